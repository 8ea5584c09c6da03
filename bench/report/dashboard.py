"""One self-contained HTML dashboard (plotly.js inlined: opens with no network)."""

from __future__ import annotations

import html

import pandas as pd


def dashboard_html(cells: pd.DataFrame, tables_md: str, title: str) -> str:
    """Return the dashboard page: figures per workload, then the speedup tables as text."""
    import plotly.io as pio

    from bench.report.figures import throughput_vs_batch

    parts = []
    first = True
    for workload in cells.workload.unique():
        fig = throughput_vs_batch(cells, workload)
        # Inline plotly.js once, in the first figure; the others reuse it.
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=True if first else False))
        first = False
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>\n{body}\n"
        f"<h2>Speedup tables</h2><pre>{html.escape(tables_md)}</pre></body></html>\n"
    )
