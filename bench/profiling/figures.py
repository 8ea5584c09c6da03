"""Dashboard panels from profile records: kernels and time per RMSNorm / attention call.

Pure functions: `profile_frame(records)` turns profile records (the lines of
profiles/<matrix>.jsonl) into one row per (cell, range group); the figure functions turn that
frame into plotly figures with one subplot per range kind, configurations (backend and
options) on the x axis and precisions side by side.
"""

from __future__ import annotations

import fnmatch
import json

DEFAULT_PANELS = ("*RMSNorm", "*Attention")


def profile_frame(records: list[dict]):
    """Return a DataFrame: one row per (ok profile record, range group) with its per-instance figures."""
    import pandas as pd

    from bench.profiling.kernels import KernelTable

    rows = []
    for rec in records:
        if rec.get("status") != "ok" or not (rec.get("extra") or {}).get("kernel_table"):
            continue
        table = KernelTable.load(rec["extra"]["kernel_table"])
        cell = rec.get("cell", {})
        opts = cell.get("options", {})
        shown = {k: v for k, v in opts.items() if k not in ("batching",)}
        config = cell.get("backend", "?") + (" " + ",".join(f"{k}={v}" for k, v in sorted(shown.items())) if shown else "")
        for r in table.ranges:
            rows.append({
                "cell_id": rec.get("cell_id"), "backend": cell.get("backend"), "precision": cell.get("precision"),
                "max_batch_size": cell.get("max_batch_size"), "options": json.dumps(opts, sort_keys=True),
                "config": config, "source": table.source, "unit": table.unit, "range": r.range,
                "instances": r.instances, "kernels_per_instance": r.kernels_per_instance,
                "us_per_instance": r.gpu_us_per_instance_median, "total_us": r.total_us,
            })
    return pd.DataFrame(rows)


def _panel_figure(frame, value: str, title: str, y_title: str, panels=DEFAULT_PANELS):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p.strip("*") for p in panels])
    precisions = sorted(frame["precision"].dropna().unique()) if len(frame) else []
    for col, pattern in enumerate(panels, start=1):
        sub = frame[frame["range"].map(lambda r, p=pattern: fnmatch.fnmatchcase(r, p))] if len(frame) else frame
        for prec in precisions:
            part = sub[sub["precision"] == prec].sort_values("config")
            fig.add_trace(
                go.Bar(x=part["config"], y=part[value], name=prec, legendgroup=prec, showlegend=col == 1,
                       customdata=part[["range", "instances"]].values,
                       hovertemplate="%{x}<br>%{customdata[0]}: %{y:.2f} (%{customdata[1]} instances)<extra>" + prec + "</extra>"),
                row=1, col=col,
            )
        fig.update_yaxes(title_text=y_title, row=1, col=col)
    fig.update_layout(title=title, barmode="group", legend_title_text="precision")
    return fig


def kernels_per_instance_figure(frame, panels=DEFAULT_PANELS):
    """Return a plotly figure: kernels launched per call of each panel's range, per config and precision."""
    unit = "kernels" if not len(frame) or (frame["unit"] == "gpu_kernel").all() else "kernels (CPU ops on CPU)"
    return _panel_figure(frame, "kernels_per_instance", f"{unit} per call", f"{unit} per call", panels)


def time_per_instance_figure(frame, panels=DEFAULT_PANELS):
    """Return a plotly figure: median kernel time per call (us) of each panel's range, per config and precision."""
    return _panel_figure(frame, "us_per_instance", "kernel time per call (median, us)", "us per call", panels)
