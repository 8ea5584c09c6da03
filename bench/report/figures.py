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
    if keys:
        def shown(o):
            try:
                opts = json.loads(o) if o else {}
            except (TypeError, ValueError):
                return str(o)
            return ", ".join(f"{k}={opts[k]}" for k in keys if k in opts)

        label = label + source.map(lambda o: f" [{shown(o)}]" if shown(o) else "")
    if cells.gpu_memory_gb.notna().any():
        label = label + cells.gpu_memory_gb.map(lambda v: "" if v is None or pd.isna(v) else f" cap {v:g} GB")
    return label


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


def _fmt(v, spec="{:.4g}") -> str:
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else spec.format(v)


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
    records = cells.to_dict("records")
    bs_all = cells.max_batch_size.to_numpy()
    tp_all = cells.output_throughput.to_numpy()
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
        yaxis={"title": {"text": "output tokens/s (failures marked x above the points)"}, "rangemode": "tozero"})}


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
            "ticktext": [f"{r:g}" for r in rates]}


def _rate_lines(series: list[tuple[str, pd.DataFrame]], specs: tuple) -> list[dict]:
    """Return one line per (series, spec) against the offered rate: spec = (column, name, dash, y axis).

    A series keeps its colour across specs; a column the cells lack, or hold no value in, draws no line.
    """
    colors = series_colors([label for label, _ in series])
    data = []
    for label, g in series:
        hover = [cell_hover(r) for r in g.to_dict("records")]
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
    return {"data": data, "layout": _layout(f"Latency vs offered request rate — {title}", xaxis=_rate_axis(cells),
            yaxis={"title": {"text": "TTFT p50 (ms), solid"}, "rangemode": "tozero"},
            yaxis2={"title": {"text": "TPOT p50 (ms), dashed"}, "overlaying": "y", "side": "right", "rangemode": "tozero"},
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


def speedup_heatmap(table: pd.DataFrame, title: str) -> dict:
    """Return a heatmap of generation speedup (rows series, columns max_batch_size); failures labelled.

    Colours: diverging, centred at 1.0x on a log2 scale. Tables whose records have no
    generation speed (stored before it existed) show the end-to-end output tok/s ratio, and
    the title says so.
    """
    t = table.copy()
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
    cell: dict[tuple[str, str], tuple] = {}
    for key in zip(t._label, t.max_batch_size.astype(str), t.status, t[metric], strict=True):
        cell.setdefault(key[:2], key[2:])
    ratios, text = [], []
    for label in labels:
        got = [cell.get((label, c)) for c in cols]
        ratios.append([None if g is None or g[0] != "ok" or g[1] is None or pd.isna(g[1]) else float(g[1]) for g in got])
        text.append(["" if g is None else ((f"{g[1]:.2f}x" if g[1] is not None and not pd.isna(g[1]) else "n/a")
                                           if g[0] == "ok" else esc(str(g[0]).upper())) for g in got])
    return _ratio_heatmap(cols, labels, ratios, text, f"{what} vs {table.attrs.get('baseline')} — {title}")


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
    for axis, metric in (("", "ttft_ms"), ("2", "tpot_ms")):
        vals = s.dropna(subset=[metric])
        if vals.empty:
            continue
        q = vals.groupby(["_label", "precision", "max_batch_size"])[metric].quantile(qs).unstack()
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
        yaxis={"title": {"text": "TTFT (ms)"}, "type": "log"}, yaxis2={"title": {"text": "TPOT (ms)"}, "type": "log", "anchor": "x2"})}


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
        if first_fail is not None:
            hover += f"<br>first failure: bs {int(first_fail.max_batch_size)} ({esc(first_fail.status)})"
            if first_fail.error:
                hover += "<br>" + esc(str(first_fail.error)[:200])
        data.append({"type": "bar", "orientation": "h", "y": [esc(label)], "x": [best], "name": esc(label), "showlegend": False,
                     "marker": {"color": colors[label]},
                     "hovertext": [hover], "hoverinfo": "text", "meta": {"precision": precision}})
        if first_fail is not None:
            data.append({"type": "scatter", "mode": "markers", "y": [esc(label)], "x": [int(first_fail.max_batch_size)],
                         "marker": {"symbol": "x", "size": 12, "color": OOM_COLOR}, "name": "first failure",
                         "showlegend": False, "hovertext": [hover], "hoverinfo": "text", "meta": {"precision": precision}})
    return {"data": data, "layout": _layout(f"OOM frontier: largest max_batch_size that ran (x: first failure) — {title}",
                                            xaxis={"title": {"text": "max_batch_size"}, "rangemode": "tozero"},
                                            yaxis={"type": "category", "automargin": True})}


def length_histograms(samples: pd.DataFrame, title: str) -> dict:
    """Return input and output token-length histograms of the workload's requests (one trial's samples)."""
    first = samples.iloc[0]
    one = samples[(samples.cell_id == first.cell_id) & (samples.trial == first.trial) & (samples.store == first.store)]
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


VERDICT_COLORS = {"aligned": "#00cc96", "degraded": "#ffa15a", "broken": OOM_COLOR}


def accuracy_vs_speedup(table: pd.DataFrame, title: str) -> dict:
    """Return a scatter of each measured cell's mean KL against the baseline (log y) vs its speedup, coloured by verdict.

    The speedup is the generation speedup where the table has one, else the throughput speedup.
    The baseline itself (KL 0 by definition) is not drawn on the log axis: the title names it.
    """
    t = table[table.status == "ok"].copy()
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
        f"Accuracy vs {what} (vs {table.attrs.get('baseline')}, drawn at KL 0 off the log axis) — {title}",
        xaxis={"title": {"text": f"{what} (x)"}}, yaxis={"title": {"text": "mean KL(baseline || cell), nats/token"},
                                                      "type": "log"})}
