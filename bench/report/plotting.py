"""What every dashboard figure shares: escaping, series labels and colours, axes, hover text, layouts.

Figures are plain plotly figure dicts ({"data": [...], "layout": {...}}), built by pure functions
(frames in, dict out; plotly.js draws them in the page, no plotly.graph_objects, so building
thousands of traces stays fast). Every string that came from data (model names, options, errors,
workload names) goes through `esc` first: plotly.js renders trace names, hover text and titles as
a small HTML subset, so an unescaped '<img onerror=...>' in a model name would be markup; escaped,
plotly shows it literally. Traces that belong to one precision carry meta.precision, which the
page's precision filter uses.

One series (backend, precision, and the model and options where they vary) has one colour in
every figure of a section (`series_colors`), so the TTFT and TPOT boxes, the throughput lines
and the legend agree. Ratios (speedups, comparisons) use a diverging scale centred at 1.0x on
a log axis (`ratio_scale`, `ratio_heatmap`), so 0.99x and 1.01x both sit near the middle.
Throughput axes start at 0.

The figures: bench.report.figures (per cell: throughput, latency, serving sweeps, OOM frontier,
telemetry, history, the Pareto front), bench.report.ratio_figures (speedup and comparison heatmaps,
accuracy vs speedup) and bench.report.kernel_figures (kernel bars, timelines).
"""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd

from bench.report.tables import options_text, varying_options

OOM_COLOR = "crimson"
# Series colours, in order (plotly's and D3's qualitative palettes, without crimson-like reds
# next to the failure markers' crimson).
PALETTE = ("#636efa", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff", "#fecb52",
           "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# Ratio heatmaps: red below 1.0x, white at 1.0x, blue above (ColorBrewer RdBu, reversed so faster is blue).
DIVERGING = [[0.0, "#b2182b"], [0.25, "#ef8a62"], [0.5, "#f7f7f7"], [0.75, "#67a9cf"], [1.0, "#2166ac"]]
RATIO_TICKS = (1 / 256, 1 / 64, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 0.8, 1.0, 1.25, 2, 4, 8, 16, 64, 256)



def esc(value) -> str:
    """Return str(value) with HTML special characters escaped (plotly shows the entities as text)."""
    return html.escape("" if value is None else str(value), quote=True)


def series_labels(cells: pd.DataFrame) -> pd.Series:
    """Return one label per row: backend precision, plus the model, options and memory cap where they vary.

    Options: only the keys whose value differs between rows (defaults filled in), e.g.
    "hf bf16 [cache=static, compile=reduce-overhead]".
    """
    label = cells.backend.astype(str) + " " + cells.precision.astype(str)
    if "model" in cells and cells.model.astype(str).nunique() > 1:
        label = cells.model.astype(str) + " " + label
    source = cells["all_options"] if "all_options" in cells else cells.options
    source = source.where(source.notna(), cells.options)
    keys = varying_options(source)
    servers = _server_names(source, label, keys)
    if keys:
        def shown(o):
            try:
                opts = json.loads(o) if o else {}
            except (TypeError, ValueError):
                return str(o)
            return ", ".join(servers.get(opts[k], f"{k}={opts[k]}") if k == "base_url" else f"{k}={opts[k]}"
                             for k in keys if k in opts and not (k == "base_url" and servers.get(opts[k]) == ""))

        label = label + source.map(lambda o: f" [{shown(o)}]" if shown(o) else "")
    if cells.gpu_memory_gb.notna().any():
        label = label + cells.gpu_memory_gb.map(lambda v: "" if v is None or pd.isna(v) else f" cap {v:g} GB")
    return label


def _server_names(source: pd.Series, label: pd.Series, keys: list[str]) -> dict[str, str]:
    """Return {base_url: its name in a series label}: '' (left out) when the rest of the label already tells the
    servers apart, else 'server 1', 'server 2', ... in order of appearance. A server's address is often an
    ephemeral port (127.0.0.1:33829) that means nothing to a reader and differs on every start."""
    if "base_url" not in keys:
        return {}
    urls = [(json.loads(o) if isinstance(o, str) and o else {}).get("base_url") for o in source]
    others = [k for k in keys if k != "base_url"]
    rest = [f"{lbl} " + json.dumps({k: (json.loads(o) if isinstance(o, str) and o else {}).get(k) for k in others},
                                    sort_keys=True) for lbl, o in zip(label, source, strict=True)]
    by_rest: dict[str, set] = {}
    for r, u in zip(rest, urls, strict=True):
        by_rest.setdefault(r, set()).add(u)
    distinct = dict.fromkeys(u for u in urls if u is not None)
    if all(len(us) == 1 for us in by_rest.values()):
        return dict.fromkeys(distinct, "")
    return {u: f"server {i + 1}" for i, u in enumerate(distinct)}


def series_colors(labels) -> dict[str, str]:
    """Return {label: colour}: the labels sorted, coloured in palette order (the same in every figure of a section)."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(sorted(set(map(str, labels))))}


def ratio_scale(ratios: list[list]) -> tuple[list[list], dict]:
    """Return (log2 of each ratio, the coloraxis): diverging, centred at 1.0x, symmetric, ticks labelled as ratios."""
    import math

    logs = [[math.log2(v) if v is not None and not pd.isna(v) and v > 0 else None for v in row] for row in ratios]
    reach = max([abs(v) for row in logs for v in row if v is not None] + [math.log2(1.25)])
    # fine ticks (0.8x, 1.25x) only on a narrow scale, where they do not crowd the 1x tick
    ticks = [t for t in RATIO_TICKS if abs(math.log2(t)) <= reach + 1e-9
             and (reach < 2 or abs(math.log2(t)) in (0, *range(1, 64, 2 if reach > 6 else 1)))]
    axis = {"colorscale": DIVERGING, "cmin": -reach, "cmax": reach, "cmid": 0.0,
            "colorbar": {"title": {"text": "x"}, "tickvals": [math.log2(t) for t in ticks],
                         "ticktext": [f"{t:g}x" for t in ticks]}}
    return logs, axis


def tick_text(v: float) -> str:
    """Return a tick label written out in full: 5000, 0.02, 1.5 (never a bare mantissa or an exponent)."""
    return f"{v:,.0f}".replace(",", " ") if v >= 1000 else f"{v:g}"


def log_ticks(values) -> dict:
    """Return tickvals/ticktext of a log axis over the values: 1-2-5 steps (1-10 per decade when it spans one or less),
    labelled in full, so a reader never sees plotly's bare minor digits ("5" for 5000)."""
    import math

    v = [float(x) for x in values if x is not None and not pd.isna(x) and float(x) > 0]
    if not v:
        return {}
    lo, hi = min(v), max(v)
    steps = (1, 2, 5) if hi / lo > 10 else (1, 1.5, 2, 3, 5, 7)
    ticks = [m * 10 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1) for m in steps]
    below = max([t for t in ticks if t <= lo], default=lo)
    above = min([t for t in ticks if t >= hi], default=hi)
    shown = [t for t in ticks if below <= t <= above]
    return {"tickvals": shown, "ticktext": [tick_text(t) for t in shown]}


def nice_ticks(top: float, count: int = 5) -> dict:
    """Return a linear axis from 0 with round ticks (1, 2, 2.5 or 5 times a power of ten) covering `top`."""
    import math

    if not top or top <= 0 or pd.isna(top):
        return {"rangemode": "tozero"}
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    vals = [round(i * step, 10) for i in range(n + 1)]
    return {"range": [0, vals[-1] * 1.02], "tickvals": vals, "ticktext": [tick_text(x) for x in vals]}


def _fmt(v, spec="{:.4g}") -> str:
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else spec.format(v)


# The columns cell_hover and the figures' point names read: a figure turns only these into row dicts (a cell
# row has a hundred columns).
HOVER_COLUMNS = ("backend", "precision", "max_batch_size", "model", "workload", "length", "device", "gpu_name", "options",
                 "all_options", "gpu_memory_gb", "environment", "cell_id", "trials", "status", "error",
                 "output_throughput", "request_throughput", "ttft_median_ms", "tpot_median_ms", "peak_memory_gb",
                 "offered_request_rate", "output_throughput_per_user", "output_throughput_per_gpu", "_label")


def hover_records(cells: pd.DataFrame) -> list[dict]:
    """Return cells.to_dict("records") of the HOVER_COLUMNS it has."""
    return cells[[c for c in HOVER_COLUMNS if c in cells]].to_dict("records")


def cell_hover(r: dict) -> str:
    """Return the hover text of a cell: its full configuration and headline figures (escaped)."""
    lines = [
        f"<b>{esc(r['backend'])} / {esc(r['precision'])} / max_batch_size {esc(r['max_batch_size'])}</b>",
        f"model: {esc(r['model'])}",
        f"workload: {esc(r['workload'])} ({esc(r.get('length'))})",
        f"device: {esc(r['device'])}, GPU: {esc(r.get('gpu_name') or 'none')}",
        f"options: {esc(options_text(r['options']))}",
    ]
    if r.get("gpu_memory_gb") is not None and not pd.isna(r.get("gpu_memory_gb")):
        lines.append(f"GPU memory cap: {r['gpu_memory_gb']:g} GB")
    if r.get("environment"):
        lines.append(f"environment: {esc(r['environment'])}")
    lines.append(f"cell_id: {esc(r['cell_id'])}, trials: {r['trials']}, status: {esc(r['status'])}")
    if r["status"] == "ok":
        lines.append(f"{_fmt(r.get('output_throughput'))} tok/s, {_fmt(r.get('request_throughput'))} req/s")
        for key, name in (("ttft_median_ms", "TTFT p50 ms"), ("tpot_median_ms", "TPOT p50 ms"), ("peak_memory_gb", "peak GB")):
            if r.get(key) is not None and not pd.isna(r.get(key)):
                lines.append(f"{name}: {_fmt(r[key])}")
    elif r.get("error"):
        lines.append("error: " + esc(str(r["error"])[:200]))
    return "<br>".join(lines)


# Longer series labels than this go in a legend below the plot, so the legend never takes the plot's width.
LEGEND_SIDE_CHARS = 40


def legend_for(labels) -> dict:
    """Return the layout's legend placement: beside the plot for short labels, below it for long ones."""
    longest = max((len(str(x)) for x in labels), default=0)
    return {"legend": BELOW} if longest > LEGEND_SIDE_CHARS else {}


def layout(title: str, **kw) -> dict:
    return {"title": {"text": esc(title)}, "margin": {"t": 60, "l": 60, "r": 20, "b": 50}, "height": 420, **kw}


def groups(frame: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, np.ndarray]]:
    """Return [(key tuple, row positions)] of frame grouped by keys, in groupby's sorted order (NaN keys dropped)."""
    if frame.empty:
        return []
    gb = frame.groupby(keys, sort=True)
    positions = gb.indices
    return [(k, positions[k]) for k in gb.groups]


def nanmax(values: np.ndarray) -> float:
    """Return the largest non-NaN value (NaN if none), as Series.max does."""
    return pd.Series(values).max()


BELOW = {"orientation": "h", "y": -0.25}  # a right-hand y axis leaves no room for the legend beside the plot



def ratio_heatmap(cols: list, labels: list, ratios: list, text: list, title: str) -> dict:
    """Return one heatmap of ratios (rows: series labels, columns: batch sizes) on the diverging scale centred at 1x."""
    z, coloraxis = ratio_scale(ratios)
    data = [{"type": "heatmap", "x": cols, "y": [esc(x) for x in labels], "z": z, "text": text, "texttemplate": "%{text}",
             "coloraxis": "coloraxis", "hovertemplate": "%{y}, bs %{x}: %{text}<extra></extra>"}]
    return {"data": data, "layout": layout(title, xaxis={"title": {"text": "max_batch_size"}, "type": "category"},
                                            yaxis={"type": "category", "automargin": True}, coloraxis=coloraxis)}
