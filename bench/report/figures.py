"""Plotly figures from aggregated cells. Pure functions: frame in, figure out."""

from __future__ import annotations

import pandas as pd


def throughput_vs_batch(cells: pd.DataFrame, workload: str):
    """Return output tok/s vs max_batch_size, one line per backend x precision, OOM marked with x."""
    import plotly.graph_objects as go

    fig = go.Figure()
    g = cells[cells.workload == workload]
    for (backend, precision, options), series in g.groupby(["backend", "precision", "options"], sort=True):
        series = series.sort_values("max_batch_size")
        ok = series[series.status == "ok"]
        name = f"{backend} {precision}" + ("" if options in ("{}", "") else f" {options}")
        hover = [
            f"{r.backend} / {r.precision} / bs {r.max_batch_size}<br>{r.options}<br>"
            f"{r.output_throughput:.1f} tok/s, {r.request_throughput:.3f} req/s<br>model {r.model}, {r.device}"
            for r in ok.itertuples()
        ]
        fig.add_trace(go.Scatter(x=ok.max_batch_size, y=ok.output_throughput, mode="lines+markers", name=name,
                                 hovertext=hover, hoverinfo="text"))
        failed = series[series.status != "ok"]
        if len(failed):
            y_mark = ok.output_throughput.max() if len(ok) else 0
            fig.add_trace(go.Scatter(
                x=failed.max_batch_size, y=[y_mark] * len(failed), mode="markers", name=f"{name}: {', '.join(sorted(set(failed.status)))}",
                marker={"symbol": "x", "size": 12, "color": "crimson"},
                hovertext=[f"{r.backend} / {r.precision} / bs {r.max_batch_size}: {r.status.upper()}" for r in failed.itertuples()],
                hoverinfo="text",
            ))
    fig.update_layout(title=f"Output throughput vs max_batch_size — {workload}", xaxis_title="max_batch_size",
                      yaxis_title="output tokens/s", xaxis_type="log", template="plotly_white")
    fig.update_xaxes(tickvals=sorted(g.max_batch_size.unique()))
    return fig
