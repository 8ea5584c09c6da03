"""Dashboard figures as plain plotly figure dicts ({"data": [...], "layout": {...}}).

Pure functions: frames in, dict out; plotly.js draws them in the page (no plotly.graph_objects,
so building thousands of traces stays fast). Every string that came from data (model names,
options, errors, workload names) goes through `esc` first: plotly.js renders trace names, hover
text and titles as a small HTML subset, so an unescaped '<img onerror=...>' in a model name
would be markup; escaped, plotly shows it literally. Traces that belong to one precision carry
meta.precision, which the page's precision filter uses.

One series (backend, precision, and the model and options where they vary) has one colour in
every figure of a section (`series_colors`), so the TTFT and TPOT boxes, the throughput lines
and the legend agree. Ratios (speedups, comparisons) use a diverging scale centred at 1.0x on
a log axis, so 0.99x and 1.01x both sit near the middle. Throughput axes start at 0.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd

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


def _options_text(options: str) -> str:
    try:
        return ", ".join(f"{k}={v}" for k, v in json.loads(options).items()) or "defaults"
    except (TypeError, ValueError):
        return str(options)


def series_labels(cells: pd.DataFrame) -> pd.Series:
    """Return one label per row: backend precision, plus the model, options and memory cap where they vary.

    Options: only the keys whose value differs between rows (defaults filled in), e.g.
    "hf bf16 [cache=static, compile=reduce-overhead]".
    """
    from bench.report.tables import varying_options

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


def _tick_text(v: float) -> str:
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
    return {"tickvals": shown, "ticktext": [_tick_text(t) for t in shown]}


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
    return {"range": [0, vals[-1] * 1.02], "tickvals": vals, "ticktext": [_tick_text(x) for x in vals]}


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
        f"options: {esc(_options_text(r['options']))}",
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


def _legend_for(labels) -> dict:
    """Return the layout's legend placement: beside the plot for short labels, below it for long ones."""
    longest = max((len(str(x)) for x in labels), default=0)
    return {"legend": _BELOW} if longest > LEGEND_SIDE_CHARS else {}


def _layout(title: str, **kw) -> dict:
    return {"title": {"text": esc(title)}, "margin": {"t": 60, "l": 60, "r": 20, "b": 50}, "height": 420, **kw}


def _groups(frame: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, np.ndarray]]:
    """Return [(key tuple, row positions)] of frame grouped by keys, in groupby's sorted order (NaN keys dropped)."""
    if frame.empty:
        return []
    gb = frame.groupby(keys, sort=True)
    positions = gb.indices
    return [(k, positions[k]) for k in gb.groups]


def _nanmax(values: np.ndarray) -> float:
    """Return the largest non-NaN value (NaN if none), as Series.max does."""
    return pd.Series(values).max()


def throughput_vs_batch(cells: pd.DataFrame, title: str) -> dict:
    """Return output tok/s vs max_batch_size, one line per series, failed cells marked x in a band above.

    Failure markers sit above the highest measured point, one row of the band per series, so
    no marker lands on a measured point or on another series' marker.
    """
    cells = cells.assign(_label=series_labels(cells)).reset_index(drop=True)
    colors = series_colors(cells._label)
    data = []
    y_top = cells.output_throughput.max() if cells.output_throughput.notna().any() else 1.0
    # Columns as arrays and each cell's hover text once; groups index into them (no per-row pandas access).
    records = hover_records(cells)
    bs_all = cells.max_batch_size.to_numpy()
    tp_all = cells.output_throughput.to_numpy()
    # Error bars: the ± of the tables (between runs, or between trials with one run; bench.report.tables.aggregate).
    std_all = (pd.to_numeric(cells["output_throughput__std"], errors="coerce").fillna(0.0).to_numpy()
               if "output_throughput__std" in cells else np.zeros(len(cells)))
    status_all = cells.status.to_numpy()

    def hover(positions) -> list[str]:
        return [cell_hover(records[i]) for i in positions]

    band = 0  # which row of the failure band the next failing series takes
    for (label, precision), idx in _groups(cells, ["_label", "precision"]):
        idx = idx[np.argsort(bs_all[idx], kind="quicksort")]  # as sort_values("max_batch_size")
        ok_mask = status_all[idx] == "ok"
        ok, failed = idx[ok_mask], idx[~ok_mask]
        color = colors[label]
        data.append({"type": "scatter", "mode": "lines+markers", "name": esc(label), "legendgroup": esc(label),
                     "x": bs_all[ok].tolist(), "y": tp_all[ok].tolist(), "line": {"color": color},
                     "error_y": {"type": "data", "array": std_all[ok].tolist(), "visible": True, "color": color},
                     "marker": {"color": color}, "hovertext": hover(ok), "hoverinfo": "text", "meta": {"precision": precision}})
        if len(failed):
            band += 1
            y_mark = float(y_top) * (1 + 0.07 * band)
            data.append({"type": "scatter", "mode": "markers+text", "name": esc(f"{label}: {', '.join(sorted(set(status_all[failed])))}"),
                         "legendgroup": esc(label), "showlegend": False,
                         "x": bs_all[failed].tolist(), "y": [y_mark] * len(failed),
                         "text": [esc(str(st).upper()) for st in status_all[failed]], "textposition": "middle right",
                         "marker": {"symbol": "x", "size": 12, "color": OOM_COLOR, "line": {"color": color, "width": 2}},
                         "hovertext": hover(failed), "hoverinfo": "text",
                         "meta": {"precision": precision}})
    ticks = sorted(cells.max_batch_size.unique().tolist())
    return {"data": data, "layout": _layout(f"Output throughput vs max_batch_size — {title}", xaxis={
        "title": {"text": "max_batch_size"}, "type": "log", "tickvals": ticks, "ticktext": [str(t) for t in ticks]},
        yaxis={"title": {"text": "output tokens/s ± spread (failures marked x above the points)"}, "rangemode": "tozero"},
        **_legend_for(cells._label))}


def _sweep_series(cells: pd.DataFrame) -> list[tuple[str, pd.DataFrame]] | None:
    """Return [(label, ok cells by ascending offered rate)] of a request-rate sweep, None unless 2+ rates were offered.

    The label leaves request_rate out (it is the x axis), so each server and configuration is
    one line; a line's points are its cells at each rate.
    """
    if "offered_request_rate" not in cells or cells.offered_request_rate.dropna().nunique() < 2:
        return None
    sweep = cells[cells.offered_request_rate.notna() & (cells.status == "ok")].reset_index(drop=True)

    def without_rate(options):
        try:
            return json.dumps({k: v for k, v in json.loads(options).items() if k != "request_rate"}, sort_keys=True)
        except (TypeError, ValueError):
            return options

    source = sweep["all_options"] if "all_options" in sweep else sweep.options
    labels = series_labels(sweep.assign(all_options=source.map(without_rate), options=sweep.options.map(without_rate)))
    sweep = sweep.assign(_label=labels)
    return [(label, g.sort_values("offered_request_rate")) for label, g in sweep.groupby("_label", sort=True)]


_BELOW = {"orientation": "h", "y": -0.25}  # a right-hand y axis leaves no room for the legend beside the plot


def _rate_axis(cells: pd.DataFrame) -> dict:
    rates = sorted(cells.offered_request_rate.dropna().unique().tolist())
    return {"title": {"text": "offered request rate (req/s, Poisson)"}, "type": "log", "tickvals": rates,
            "ticktext": [_tick_text(r) for r in rates]}


def _rate_lines(series: list[tuple[str, pd.DataFrame]], specs: tuple) -> list[dict]:
    """Return one line per (series, spec) against the offered rate: spec = (column, name, dash, y axis).

    A series keeps its colour across specs; a column the cells lack, or hold no value in, draws no line.
    """
    colors = series_colors([label for label, _ in series])
    data = []
    for label, g in series:
        hover = [cell_hover(r) for r in hover_records(g)]
        for col, name, dash, axis in specs:
            if col in g and g[col].notna().any():
                data.append({"type": "scatter", "mode": "lines+markers", "name": esc(f"{label}: {name}"),
                             "legendgroup": esc(label), "x": g.offered_request_rate.tolist(), "y": g[col].tolist(),
                             "yaxis": axis, "line": {"color": colors[label], "dash": dash},
                             "marker": {"color": colors[label]}, "hovertext": hover, "hoverinfo": "text"})
    return data


def latency_vs_rate(cells: pd.DataFrame, title: str) -> dict | None:
    """Return TTFT p50 (solid, left axis) and TPOT p50 (dashed, right axis) vs the offered rate; None without a sweep."""
    series = _sweep_series(cells)
    if series is None:
        return None
    data = _rate_lines(series, (("ttft_median_ms", "TTFT p50", "solid", "y"), ("tpot_median_ms", "TPOT p50", "dash", "y2")))
    top = {col: max([_nanmax(g[col].to_numpy(dtype=float)) for _, g in series if col in g] or [0.0])
           for col in ("ttft_median_ms", "tpot_median_ms")}
    # Each axis its own round ticks (plotly's automatic ticks on an overlaid axis land on 29.7, 59.4, ...).
    return {"data": data, "layout": _layout(f"Latency vs offered request rate — {title}", xaxis=_rate_axis(cells),
            yaxis={"title": {"text": "TTFT p50 (ms), solid"}, **nice_ticks(top["ttft_median_ms"])},
            yaxis2={"title": {"text": "TPOT p50 (ms), dashed"}, "overlaying": "y", "side": "right", "showgrid": False,
                    **nice_ticks(top["tpot_median_ms"])},
            legend=_BELOW, height=520)}


def throughput_vs_rate(cells: pd.DataFrame, title: str) -> dict | None:
    """Return completed req/s (solid) and goodput under the SLO (dashed) vs the offered rate, with the offered
    rate itself as a grey line (a server that keeps up sits on it); None without a sweep."""
    series = _sweep_series(cells)
    if series is None:
        return None
    rates = sorted(cells.offered_request_rate.dropna().unique().tolist())
    offered = {"type": "scatter", "mode": "lines", "name": "offered", "x": rates, "y": rates,
               "line": {"color": "#999999", "dash": "dot"}, "hoverinfo": "skip"}
    data = [offered, *_rate_lines(series, (("request_throughput", "completed req/s", "solid", "y"),
                                           ("request_goodput", "goodput", "dash", "y")))]
    return {"data": data, "layout": _layout(f"Requests/s vs offered request rate — {title}", xaxis=_rate_axis(cells),
            yaxis={"title": {"text": "req/s: completed (solid), goodput under the SLO (dashed)"}, "rangemode": "tozero"},
            legend=_BELOW, height=520)}


def speedup_heatmap(table, title: str) -> dict:
    """Return a heatmap of generation speedup (rows series, columns max_batch_size) of a
    bench.report.tables.SpeedupTable; failures labelled.

    Colours: diverging, centred at 1.0x on a log2 scale. Tables whose records have no
    generation speed (stored before it existed) show the end-to-end output tok/s ratio, and
    the title says so.
    """
    t = table.frame.copy()
    if "gpu_memory_gb" not in t:
        t["gpu_memory_gb"] = None
    t["_label"] = series_labels(t)
    metric, what = "generation_speedup", "Generation speedup"
    if "generation_speedup" not in t or pd.to_numeric(t.generation_speedup, errors="coerce").isna().all():
        metric, what = "output_speedup", "Output tok/s ratio (end to end; no generation speed stored)"
    if metric not in t:
        t[metric] = None
    cols = [str(b) for b in sorted(t.max_batch_size.unique())]
    # One trace for all rows: plotly.js misplaces texttemplate labels of several heatmaps on one
    # categorical axis, so the heatmap shows every precision (the precision filter leaves it alone).
    t = t.sort_values(["precision", "_label"], kind="stable")
    labels = list(dict.fromkeys(t._label))
    # (label, batch size) -> (status, speedup); the first row wins if a label repeats a batch size.
    # A cell paced at a request rate runs as fast as its arrivals, not as fast as it can: its ratio
    # is not a speedup, so it is written but not coloured (a slower offered rate is not a slowdown).
    paced = (pd.to_numeric(t["offered_request_rate"], errors="coerce").notna() if "offered_request_rate" in t
             else pd.Series(False, index=t.index))
    cell: dict[tuple[str, str], tuple] = {}
    for key in zip(t._label, t.max_batch_size.astype(str), t.status, t[metric], paced, strict=True):
        cell.setdefault(key[:2], key[2:])
    ratios, text = [], []
    for label in labels:
        got = [cell.get((label, c)) for c in cols]
        ratios.append([None if g is None or g[0] != "ok" or g[1] is None or pd.isna(g[1]) or g[2] else float(g[1])
                       for g in got])
        text.append(["" if g is None else ((f"{g[1]:.2f}x" + (" (paced)" if g[2] else "")
                                            if g[1] is not None and not pd.isna(g[1]) else "n/a")
                                           if g[0] == "ok" else esc(str(g[0]).upper())) for g in got])
    return _ratio_heatmap(cols, labels, ratios, text, f"{what} vs {table.baseline} — {title}")


def _ratio_heatmap(cols: list, labels: list, ratios: list, text: list, title: str) -> dict:
    """Return one heatmap of ratios (rows: series labels, columns: batch sizes) on the diverging scale centred at 1x."""
    z, coloraxis = ratio_scale(ratios)
    data = [{"type": "heatmap", "x": cols, "y": [esc(x) for x in labels], "z": z, "text": text, "texttemplate": "%{text}",
             "coloraxis": "coloraxis", "hovertemplate": "%{y}, bs %{x}: %{text}<extra></extra>"}]
    return {"data": data, "layout": _layout(title, xaxis={"title": {"text": "max_batch_size"}, "type": "category"},
                                            yaxis={"type": "category", "automargin": True}, coloraxis=coloraxis)}


def latency_boxes(cells: pd.DataFrame, samples: pd.DataFrame, title: str) -> dict:
    """Return TTFT and TPOT distributions per cell as boxes (p25-p75, median, whiskers p5-p95) from per-request samples."""
    cells = cells.assign(_label=series_labels(cells))
    colors = series_colors(cells._label)
    s = samples.merge(cells[["cell_id", "gpu_memory_gb", "_label", "precision", "max_batch_size"]], on=["cell_id", "gpu_memory_gb"])
    data = []
    qs = [0.05, 0.25, 0.5, 0.75, 0.95]
    ticks = {}
    for axis, metric in (("", "ttft_ms"), ("2", "tpot_ms")):
        vals = s.dropna(subset=[metric])
        if vals.empty:
            continue
        q = vals.groupby(["_label", "precision", "max_batch_size"])[metric].quantile(qs).unstack()
        ticks[axis] = log_ticks([q[0.05].min(), q[0.95].max()])
        for (label, precision), g in q.groupby(level=[0, 1], sort=True):
            bs = [str(b) for b in g.index.get_level_values(2)]
            # TTFT and TPOT boxes of a series: one colour (marker, outline), the legend's.
            data.append({"type": "box", "name": esc(label), "legendgroup": esc(label), "showlegend": axis == "",
                         "marker": {"color": colors[label]}, "line": {"color": colors[label]},
                         "x": bs, "q1": g[0.25].tolist(), "median": g[0.5].tolist(), "q3": g[0.75].tolist(),
                         "lowerfence": g[0.05].tolist(), "upperfence": g[0.95].tolist(),
                         "xaxis": "x" + axis, "yaxis": "y" + axis, "meta": {"precision": precision}})
    return {"data": data, "layout": _layout(
        f"Latency per request (box p25–p75, whiskers p5–p95) — {title}", boxmode="group", height=460,
        xaxis={"domain": [0, 0.47], "title": {"text": "max_batch_size (TTFT)"}, "type": "category"},
        xaxis2={"domain": [0.53, 1], "title": {"text": "max_batch_size (TPOT)"}, "type": "category"},
        yaxis={"title": {"text": "TTFT (ms)"}, "type": "log", **ticks.get("", {})},
        yaxis2={"title": {"text": "TPOT (ms)"}, "type": "log", "anchor": "x2", **ticks.get("2", {})},
        **_legend_for(cells._label))}


def oom_frontier(cells: pd.DataFrame, title: str) -> dict:
    """Return the largest max_batch_size that ran per backend x precision (bars) and the smallest that failed (x)."""
    cells = cells.assign(_label=series_labels(cells))
    colors = series_colors(cells._label)
    data = []
    for (label, precision), g in cells.groupby(["_label", "precision"], sort=True):
        ok = g[g.status == "ok"].max_batch_size
        failed = g[g.status != "ok"]
        best = int(ok.max()) if len(ok) else 0
        first_fail = failed.sort_values("max_batch_size").iloc[0] if len(failed) else None
        hover = f"{esc(label)}<br>largest ok max_batch_size: {best or 'none'}"
        # Nothing failed: the bar is the largest size tested, not a limit found (a lighter, hatched bar says so).
        untested_limit = first_fail is None and best > 0
        if untested_limit:
            hover += "<br>no size failed: fits up to the largest tested; the limit is above it"
        if first_fail is not None:
            hover += f"<br>first failure: bs {int(first_fail.max_batch_size)} ({esc(first_fail.status)})"
            if first_fail.error:
                hover += "<br>" + esc(str(first_fail.error)[:200])
        marker = {"color": colors[label]}
        if untested_limit:
            marker.update(opacity=0.45, pattern={"shape": "/"})
        data.append({"type": "bar", "orientation": "h", "y": [esc(label)], "x": [best], "name": esc(label), "showlegend": False,
                     "marker": marker, "text": [f"fits up to the largest tested ({best})" if untested_limit else f"{best}"],
                     "textposition": "inside", "insidetextanchor": "end",
                     "hovertext": [hover], "hoverinfo": "text", "meta": {"precision": precision}})
        if first_fail is not None:
            data.append({"type": "scatter", "mode": "markers", "y": [esc(label)], "x": [int(first_fail.max_batch_size)],
                         "marker": {"symbol": "x", "size": 12, "color": OOM_COLOR}, "name": "first failure",
                         "showlegend": False, "hovertext": [hover], "hoverinfo": "text", "meta": {"precision": precision}})
    return {"data": data, "layout": _layout(f"OOM frontier: largest max_batch_size that ran (x: first failure; hatched: "
                                            f"nothing failed, the limit is above the largest tested) — {title}",
                                            xaxis={"title": {"text": "max_batch_size"}, "rangemode": "tozero"},
                                            yaxis={"type": "category", "automargin": True})}


def length_histograms(samples: pd.DataFrame, title: str) -> dict:
    """Return input and output token-length histograms of the workload's requests (one trial's samples)."""
    first = samples.iloc[0]
    one = samples[(samples.cell_id == first.cell_id) & (samples.trial == first.trial) & (samples.store == first.store)]
    if "run_key" in one:  # trial 0 of every run has the same requests: one run's
        one = one[one.run_key == first.run_key]
    data = [
        {"type": "histogram", "x": one["in"].tolist(), "name": "input tokens", "nbinsx": 40},
        {"type": "histogram", "x": one["out"].tolist(), "name": "output tokens", "nbinsx": 40, "xaxis": "x2", "yaxis": "y2"},
    ]
    return {"data": data, "layout": _layout(
        f"Request lengths ({len(one)} requests) — {title}", height=340,
        xaxis={"domain": [0, 0.47], "title": {"text": "input tokens"}},
        xaxis2={"domain": [0.53, 1], "title": {"text": "output tokens"}},
        yaxis={"title": {"text": "requests"}}, yaxis2={"anchor": "x2"})}


def telemetry_lines(cells: pd.DataFrame, telemetry: pd.DataFrame, title: str) -> dict:
    """Return power and memory over a measured pass, one line per cell (its last trial with telemetry)."""
    cells = cells.assign(_label=series_labels(cells))
    colors = series_colors(cells._label)
    t = telemetry.merge(cells[["cell_id", "gpu_memory_gb", "_label", "precision", "max_batch_size"]], on=["cell_id", "gpu_memory_gb"])
    if "run_key" in t:  # one run of each cell (its last), as one trial of it
        t = t[t.run_key == t.groupby(["cell_id", "gpu_memory_gb"], dropna=False).run_key.transform("max")]
    last = t.groupby(["cell_id", "gpu_memory_gb"], dropna=False).trial.transform("max")
    t = t[t.trial == last].reset_index(drop=True)
    t_s = t.t_s.to_numpy()
    metrics = {m: t[m].to_numpy() for m in ("power_w", "memory_gb")}
    data = []
    for (label, precision, bs), idx in _groups(t, ["_label", "precision", "max_batch_size"]):
        name = esc(f"{label} bs{bs}")
        idx = idx[np.argsort(t_s[idx], kind="quicksort")]  # as sort_values("t_s")
        x = t_s[idx].tolist()
        for axis, metric in (("", "power_w"), ("2", "memory_gb")):
            data.append({"type": "scattergl", "mode": "lines", "name": name, "legendgroup": name, "showlegend": axis == "",
                         "line": {"color": colors[label]}, "x": x, "y": metrics[metric][idx].tolist(), "xaxis": "x" + axis, "yaxis": "y" + axis,
                         "meta": {"precision": precision}})
    return {"data": data, "layout": _layout(
        f"Telemetry over the measured pass — {title}", height=460,
        xaxis={"domain": [0, 0.47], "title": {"text": "time (s)"}}, xaxis2={"domain": [0.53, 1], "title": {"text": "time (s)"}},
        yaxis={"title": {"text": "power (W)"}}, yaxis2={"title": {"text": "memory (GB)"}, "anchor": "x2"})}


def history_points(cells: pd.DataFrame, history: pd.DataFrame, title: str) -> dict:
    """Return output tok/s of each cell per run, oldest to latest: hollow markers for earlier runs, filled for the one shown."""
    both = pd.concat([history.assign(_latest=False), cells.assign(_latest=True)], ignore_index=True)
    both = both[both.status == "ok"].assign(_label=lambda f: series_labels(f) + " bs" + f.max_batch_size.astype(int).astype(str))
    data = []
    for (label, precision), g in both.groupby(["_label", "precision"], sort=True):
        g = g.sort_values("run_started_at", kind="stable", na_position="first")
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": esc(label), "x": [esc(x) for x in g.run_label],
            "y": g.output_throughput.astype(float).tolist(),
            "error_y": {"type": "data", "array": [0.0 if v is None or pd.isna(v) else float(v)
                                                  for v in g.output_throughput__std]},
            "marker": {"symbol": ["circle" if x else "circle-open" for x in g._latest], "size": 9},
            "hovertemplate": "%{x}: %{y:.4g} tok/s<extra>" + esc(label) + "</extra>", "meta": {"precision": precision},
        })
    return {"data": data, "layout": _layout(
        f"Output tok/s per run (hollow: earlier runs, not in the table) — {title}",
        xaxis={"title": {"text": "run (date, commit)"}, "type": "category"},
        yaxis={"title": {"text": "output tokens/s"}, "rangemode": "tozero"})}


KERNEL_COLUMNS = ("backend", "precision", "kernels_per_instance", "time_per_instance_us")


def kernel_bars(kernels: pd.DataFrame) -> dict:
    """Return kernel launches and time per instance of each range/category (e.g. RMSNorm, attention) per backend x precision."""
    missing = [c for c in KERNEL_COLUMNS if c not in kernels]
    cat = "range" if "range" in kernels else "category"
    if missing or cat not in kernels:
        raise ValueError(f"kernel table needs columns {', '.join(KERNEL_COLUMNS)} and range or category; missing "
                         f"{', '.join(missing + ([] if cat in kernels else ['range/category']))}")
    data = []
    colors = series_colors(f"{b} {p}" for b, p in zip(kernels.backend, kernels.precision, strict=True))
    for (backend, precision), g in kernels.groupby(["backend", "precision"], sort=True):
        name = esc(f"{backend} {precision}")
        for axis, metric in (("", "kernels_per_instance"), ("2", "time_per_instance_us")):
            data.append({"type": "bar", "name": name, "legendgroup": name, "showlegend": axis == "",
                         "marker": {"color": colors[f"{backend} {precision}"]},
                         "x": [esc(c) for c in g[cat]], "y": pd.to_numeric(g[metric], errors="coerce").tolist(),
                         "xaxis": "x" + axis, "yaxis": "y" + axis, "meta": {"precision": precision}})
    return {"data": data, "layout": _layout(
        "Kernels per instance and time per instance", barmode="group", height=420,
        xaxis={"domain": [0, 0.47], "type": "category"}, xaxis2={"domain": [0.53, 1], "type": "category"},
        yaxis={"title": {"text": "kernels per instance"}}, yaxis2={"title": {"text": "time per instance (µs)"}, "anchor": "x2"})}


def comparison_heatmap(ratios: pd.DataFrame, title: str, a: str, b: str) -> dict:
    """Return a heatmap of output tok/s ratio b / a per matched cell (rows backend x precision, columns max_batch_size)."""
    r = ratios.assign(_label=series_labels(ratios))
    cols = [str(x) for x in sorted(r.max_batch_size.unique())]
    r = r.sort_values(["precision", "_label"], kind="stable")
    labels = list(dict.fromkeys(r._label))
    ratios, text = [], []
    for label in labels:
        row = r[r._label == label].set_index(r[r._label == label].max_batch_size.astype(str))
        ratios.append([None if c not in row.index or pd.isna(row.loc[c, "ratio"]) else float(row.loc[c, "ratio"]) for c in cols])
        text.append(["" if c not in row.index else esc(row.loc[c, "text"]) for c in cols])
    return _ratio_heatmap(cols, labels, ratios, text, f"Output tok/s ratio {b} / {a} (matched by cell_id) — {title}")


def pareto_figure(cells: pd.DataFrame, title: str) -> dict | None:
    """Return output tok/s per GPU vs output tok/s per user, one point per configuration (batch size, rate,
    concurrency) of every series, the Pareto front drawn as a line and its points labelled; None without the figures."""
    from bench.report.pareto import pareto_front

    need = ("output_throughput_per_user", "output_throughput_per_gpu")
    if any(c not in cells for c in need):
        return None
    ok = cells[(cells.status == "ok") & cells.output_throughput_per_user.notna()
               & cells.output_throughput_per_gpu.notna()].reset_index(drop=True)
    if ok.empty:
        return None
    ok = ok.assign(_label=series_labels(ok))
    colors = series_colors(ok._label)
    records = hover_records(ok)

    def point_name(r: dict) -> str:
        opts = json.loads(r.get("all_options") or r.get("options") or "{}")
        parts = [f"bs{r['max_batch_size']}"]
        if r.get("offered_request_rate") is not None and not pd.isna(r.get("offered_request_rate")):
            parts.append(f"{r['offered_request_rate']:g} req/s")
        if isinstance(opts.get("max_concurrency"), int):
            parts.append(f"c{opts['max_concurrency']}")
        return " ".join(parts)

    data = []
    for label, g in ok.groupby("_label", sort=True):
        data.append({"type": "scatter", "mode": "markers", "name": esc(label), "legendgroup": esc(label),
                     "x": g.output_throughput_per_user.tolist(), "y": g.output_throughput_per_gpu.tolist(),
                     "marker": {"color": colors[label], "size": 9},
                     "hovertext": [cell_hover(records[i]) for i in g.index], "hoverinfo": "text",
                     "meta": {"precision": str(g.precision.iloc[0])}})
    front = pareto_front(list(zip(ok.output_throughput_per_user, ok.output_throughput_per_gpu, strict=True)))
    # Labels are long (series and point): one on a point in the right half of the plot goes to its left, the others
    # to their right, so each stays inside the plot (the H200 study's front, 90 and 129 tok/s per user, had its
    # left point's label cut off at the right edge when only the rightmost label went left).
    right = max((records[i]["output_throughput_per_user"] for i in front), default=0.0)
    data.append({"type": "scatter", "mode": "lines+markers+text", "name": "Pareto front",
                 "x": [records[i]["output_throughput_per_user"] for i in front],
                 "y": [records[i]["output_throughput_per_gpu"] for i in front],
                 "text": [esc(f"{records[i]['_label']} {point_name(records[i])}") for i in front],
                 "textposition": ["top left" if records[i]["output_throughput_per_user"] > right / 2 else "top right"
                                  for i in front], "line": {"color": "#333333", "dash": "dot"},
                 "marker": {"symbol": "circle-open", "size": 14, "color": "#333333"}, "hoverinfo": "text",
                 "hovertext": [cell_hover(records[i]) for i in front]})
    return {"data": data, "layout": _layout(f"Interactivity vs throughput — {title}",
            xaxis={"title": {"text": "output tok/s per user (mean over requests of output_len / E2E)"}, "rangemode": "tozero"},
            yaxis={"title": {"text": "output tok/s per GPU"}, "rangemode": "tozero"}, legend=_BELOW, height=520)}


def telemetry_clocks(cells: pd.DataFrame, telemetry: pd.DataFrame, title: str) -> dict | None:
    """Return SM clock (left) and GPU busy % (right) over a measured pass, one line per cell (its last trial);
    None when no pass sampled them (records from before clocks and utilisation were sampled, a CPU run)."""
    if not {"sm_mhz", "util_pct"} <= set(telemetry) or telemetry[["sm_mhz", "util_pct"]].notna().sum().sum() == 0:
        return None
    cells = cells.assign(_label=series_labels(cells))
    colors = series_colors(cells._label)
    t = telemetry.merge(cells[["cell_id", "gpu_memory_gb", "_label", "precision", "max_batch_size"]], on=["cell_id", "gpu_memory_gb"])
    last = t.groupby(["cell_id", "gpu_memory_gb"], dropna=False).trial.transform("max")
    t = t[t.trial == last].reset_index(drop=True)
    data = []
    for (label, precision, bs), idx in _groups(t, ["_label", "precision", "max_batch_size"]):
        name = esc(f"{label} bs{bs}")
        g = t.iloc[idx].sort_values("t_s")
        for axis, metric in (("", "sm_mhz"), ("2", "util_pct")):
            data.append({"type": "scattergl", "mode": "lines", "name": name, "legendgroup": name, "showlegend": axis == "",
                         "line": {"color": colors[label]}, "x": g.t_s.tolist(), "y": g[metric].tolist(),
                         "xaxis": "x" + axis, "yaxis": "y" + axis, "meta": {"precision": precision}})
    return {"data": data, "layout": _layout(
        f"Clocks and GPU busy over the measured pass — {title}", height=460,
        xaxis={"domain": [0, 0.47], "title": {"text": "time (s)"}}, xaxis2={"domain": [0.53, 1], "title": {"text": "time (s)"}},
        yaxis={"title": {"text": "SM clock (MHz)"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": "GPU busy (% of NVML's sample period with a kernel running)"}, "anchor": "x2",
                "range": [0, 105]})}


# Kernel categories (bench.profiling.kernels.CATEGORIES) keep one colour in every timeline.
CATEGORY_COLORS = {"norm": "#ab63fa", "attention": "#ef553b", "gemm": "#636efa", "reduction": "#ffa15a",
                   "elementwise": "#00cc96", "copy/memset": "#19d3f3", "other": "#7f7f7f"}
RANGE_COLOR = "rgba(120,120,120,0.25)"


def kernel_timeline(spans: dict, title: str) -> dict:
    """Return a timeline of a few NVTX ranges (e.g. decode steps): per range, its CPU-side span and its GPU
    kernels as horizontal bars coloured by category, times in µs from the range's start.

    `spans` is bench.profiling.nsys_collector.timeline_spans's dict. Each range has two rows:
    "<label> · CPU range" (the NVTX push to pop) and "<label> · GPU kernels" (kernels whose
    launch it encloses; they may run after the range closes: launches are asynchronous).
    """
    rows = []
    for r in spans["ranges"]:
        rows += [f"{esc(r['label'])} · CPU range", f"{esc(r['label'])} · GPU kernels"]
    data = [{"type": "bar", "orientation": "h", "name": "NVTX range (CPU)", "marker": {"color": RANGE_COLOR},
             "y": [f"{esc(r['label'])} · CPU range" for r in spans["ranges"]],
             "base": [r["start_us"] for r in spans["ranges"]],
             "x": [r["end_us"] - r["start_us"] for r in spans["ranges"]],
             "hovertext": [f"{esc(r['label'])}: {r['end_us'] - r['start_us']:.1f} µs" for r in spans["ranges"]],
             "hoverinfo": "text"}]
    by_cat: dict[str, list[dict]] = {}
    for k in spans["kernels"]:
        by_cat.setdefault(k["category"], []).append(k)
    for cat in CATEGORY_COLORS:
        ks = by_cat.pop(cat, [])
        if ks:
            data.append(_timeline_trace(cat, ks, CATEGORY_COLORS[cat]))
    for cat, ks in sorted(by_cat.items()):  # categories a newer table may add
        data.append(_timeline_trace(cat, ks, CATEGORY_COLORS["other"]))
    return {"data": data, "layout": _layout(
        title, barmode="overlay", height=160 + 60 * len(rows), bargap=0.15,
        xaxis={"title": {"text": "µs from the range's start"}, "rangemode": "tozero"},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": rows[::-1], "automargin": True})}


def _timeline_trace(category: str, ks: list[dict], color: str) -> dict:
    return {"type": "bar", "orientation": "h", "name": esc(category), "marker": {"color": color, "line": {"width": 0}},
            "y": [f"{esc(k['range'])} · GPU kernels" for k in ks], "base": [k["start_us"] for k in ks],
            "x": [max(k["end_us"] - k["start_us"], 0.0) for k in ks],
            "hovertext": [f"{esc(k['name'][:160])}<br>{esc(category)}, {k['end_us'] - k['start_us']:.2f} µs" for k in ks],
            "hoverinfo": "text"}


VERDICT_COLORS = {"aligned": "#00cc96", "degraded": "#ffa15a", "broken": OOM_COLOR}


def accuracy_vs_speedup(table, title: str) -> dict:
    """Return a scatter of each measured cell's mean KL against the baseline (log y) vs its speedup, coloured by verdict,
    from a bench.report.tables.SpeedupTable with accuracy columns.

    The speedup is the generation speedup where the table has one, else the throughput speedup.
    The baseline itself (KL 0 by definition) is not drawn on the log axis: the title names it.
    """
    t = table.frame[table.frame.status == "ok"].copy()
    if "gpu_memory_gb" not in t:
        t["gpu_memory_gb"] = None
    metric, what = "generation_speedup", "generation speedup"
    if metric not in t or pd.to_numeric(t[metric], errors="coerce").isna().all():
        metric, what = "throughput_speedup", "throughput speedup"
    t["_kl"] = pd.to_numeric(t.get("accuracy_kl_mean"), errors="coerce")
    t["_x"] = pd.to_numeric(t[metric], errors="coerce")
    t = t[(t._kl > 0) & t._x.notna()]
    t["_label"] = series_labels(t) if len(t) else []
    data = []
    for verdict, color in VERDICT_COLORS.items():
        v = t[t.accuracy_verdict == verdict]
        if not len(v):
            continue
        data.append({"type": "scatter", "mode": "markers+text", "name": verdict, "x": list(v._x), "y": list(v._kl),
                     "text": [esc(f"{lbl} bs{bs}") for lbl, bs in zip(v._label, v.max_batch_size, strict=True)],
                     "textposition": "top center", "marker": {"color": color, "size": 11},
                     "hovertemplate": "%{text}<br>" + what + " %{x:.2f}x<br>KL mean %{y:.3g}<extra>" + verdict + "</extra>"})
    return {"data": data, "layout": _layout(
        f"Accuracy vs {what} (vs {table.baseline}, drawn at KL 0 off the log axis) — {title}",
        xaxis={"title": {"text": f"{what} (x)"}}, yaxis={"title": {"text": "mean KL(baseline || cell), nats/token"},
                                                      "type": "log"})}
