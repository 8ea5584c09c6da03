"""The dashboard's figures of a table's cells: throughput vs batch size, request-rate sweeps (latency,
requests/s and goodput), latency distributions, request lengths, the OOM frontier, telemetry, each
cell's history and the interactivity-vs-throughput front.

Plain plotly figure dicts from frames, every data string escaped, one colour per series in a
section: the rules of bench.report.plotting, whose helpers every figure module shares.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.report.plotting import (
    BELOW,
    OOM_COLOR,
    cell_hover,
    esc,
    groups,
    hover_records,
    layout,
    legend_for,
    log_ticks,
    nanmax,
    nice_ticks,
    series_colors,
    series_labels,
    tick_text,
)


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
    # Error bars: the ± of the tables (between runs, or between trials with one run; bench.report.cells.aggregate).
    std_all = (pd.to_numeric(cells["output_throughput__std"], errors="coerce").fillna(0.0).to_numpy()
               if "output_throughput__std" in cells else np.zeros(len(cells)))
    status_all = cells.status.to_numpy()

    def hover(positions) -> list[str]:
        return [cell_hover(records[i]) for i in positions]

    band = 0  # which row of the failure band the next failing series takes
    for (label, precision), idx in groups(cells, ["_label", "precision"]):
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
    return {"data": data, "layout": layout(f"Output throughput vs max_batch_size — {title}", xaxis={
        "title": {"text": "max_batch_size"}, "type": "log", "tickvals": ticks, "ticktext": [str(t) for t in ticks]},
        yaxis={"title": {"text": "output tokens/s ± spread (failures marked x above the points)"}, "rangemode": "tozero"},
        **legend_for(cells._label))}


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



def _rate_axis(cells: pd.DataFrame) -> dict:
    rates = sorted(cells.offered_request_rate.dropna().unique().tolist())
    return {"title": {"text": "offered request rate (req/s, Poisson)"}, "type": "log", "tickvals": rates,
            "ticktext": [tick_text(r) for r in rates]}


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
    top = {col: max([nanmax(g[col].to_numpy(dtype=float)) for _, g in series if col in g] or [0.0])
           for col in ("ttft_median_ms", "tpot_median_ms")}
    # Each axis its own round ticks (plotly's automatic ticks on an overlaid axis land on 29.7, 59.4, ...).
    return {"data": data, "layout": layout(f"Latency vs offered request rate — {title}", xaxis=_rate_axis(cells),
            yaxis={"title": {"text": "TTFT p50 (ms), solid"}, **nice_ticks(top["ttft_median_ms"])},
            yaxis2={"title": {"text": "TPOT p50 (ms), dashed"}, "overlaying": "y", "side": "right", "showgrid": False,
                    **nice_ticks(top["tpot_median_ms"])},
            legend=BELOW, height=520)}


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
    return {"data": data, "layout": layout(f"Requests/s vs offered request rate — {title}", xaxis=_rate_axis(cells),
            yaxis={"title": {"text": "req/s: completed (solid), goodput under the SLO (dashed)"}, "rangemode": "tozero"},
            legend=BELOW, height=520)}


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
    return {"data": data, "layout": layout(
        f"Latency per request (box p25–p75, whiskers p5–p95) — {title}", boxmode="group", height=460,
        xaxis={"domain": [0, 0.47], "title": {"text": "max_batch_size (TTFT)"}, "type": "category"},
        xaxis2={"domain": [0.53, 1], "title": {"text": "max_batch_size (TPOT)"}, "type": "category"},
        yaxis={"title": {"text": "TTFT (ms)"}, "type": "log", **ticks.get("", {})},
        yaxis2={"title": {"text": "TPOT (ms)"}, "type": "log", "anchor": "x2", **ticks.get("2", {})},
        **legend_for(cells._label))}


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
                     # dark text: plotly's white inside-label is unreadable on the pale hatched bar
                     **({"textfont": {"color": "#222222"}} if untested_limit else {}),
                     "textposition": "inside", "insidetextanchor": "end",
                     "hovertext": [hover], "hoverinfo": "text", "meta": {"precision": precision}})
        if first_fail is not None:
            data.append({"type": "scatter", "mode": "markers", "y": [esc(label)], "x": [int(first_fail.max_batch_size)],
                         "marker": {"symbol": "x", "size": 12, "color": OOM_COLOR}, "name": "first failure",
                         "showlegend": False, "hovertext": [hover], "hoverinfo": "text", "meta": {"precision": precision}})
    return {"data": data, "layout": layout(f"OOM frontier: largest max_batch_size that ran (x: first failure; hatched: "
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
    return {"data": data, "layout": layout(
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
    for (label, precision, bs), idx in groups(t, ["_label", "precision", "max_batch_size"]):
        name = esc(f"{label} bs{bs}")
        idx = idx[np.argsort(t_s[idx], kind="quicksort")]  # as sort_values("t_s")
        x = t_s[idx].tolist()
        for axis, metric in (("", "power_w"), ("2", "memory_gb")):
            data.append({"type": "scattergl", "mode": "lines", "name": name, "legendgroup": name, "showlegend": axis == "",
                         "line": {"color": colors[label]}, "x": x, "y": metrics[metric][idx].tolist(), "xaxis": "x" + axis, "yaxis": "y" + axis,
                         "meta": {"precision": precision}})
    return {"data": data, "layout": layout(
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
    return {"data": data, "layout": layout(
        f"Output tok/s per run (hollow: earlier runs, not in the table) — {title}",
        xaxis={"title": {"text": "run (date, commit)"}, "type": "category"},
        yaxis={"title": {"text": "output tokens/s"}, "rangemode": "tozero"})}


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
    cpu = "device" in ok and bool((ok.device.astype(str) == "cpu").all())  # no GPU to divide by: the process's tok/s

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
    return {"data": data, "layout": layout(f"Interactivity vs throughput — {title}",
            xaxis={"title": {"text": "output tok/s per user (mean over requests of output_len / E2E)"}, "rangemode": "tozero"},
            yaxis={"title": {"text": "output tok/s" if cpu else "output tok/s per GPU"}, "rangemode": "tozero"},
            legend=BELOW, height=520)}


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
    for (label, precision, bs), idx in groups(t, ["_label", "precision", "max_batch_size"]):
        name = esc(f"{label} bs{bs}")
        g = t.iloc[idx].sort_values("t_s")
        for axis, metric in (("", "sm_mhz"), ("2", "util_pct")):
            data.append({"type": "scattergl", "mode": "lines", "name": name, "legendgroup": name, "showlegend": axis == "",
                         "line": {"color": colors[label]}, "x": g.t_s.tolist(), "y": g[metric].tolist(),
                         "xaxis": "x" + axis, "yaxis": "y" + axis, "meta": {"precision": precision}})
    return {"data": data, "layout": layout(
        f"Clocks and GPU busy over the measured pass — {title}", height=460,
        xaxis={"domain": [0, 0.47], "title": {"text": "time (s)"}}, xaxis2={"domain": [0.53, 1], "title": {"text": "time (s)"}},
        yaxis={"title": {"text": "SM clock (MHz)"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": "GPU busy (% of NVML's sample period with a kernel running)"}, "anchor": "x2",
                "range": [0, 105]})}
