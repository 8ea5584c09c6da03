"""Kernel figures: launches and time per instance of each module range or kernel category (the kernel
panel), and a few NVTX ranges' kernels on a timeline.

Plotly figure dicts as bench.report.plotting makes them; kernel categories keep one colour in
every timeline.
"""

from __future__ import annotations

import pandas as pd

from bench.report.plotting import esc, layout, series_colors

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
    return {"data": data, "layout": layout(
        "Kernels per instance and time per instance", barmode="group", height=420,
        xaxis={"domain": [0, 0.47], "type": "category"}, xaxis2={"domain": [0.53, 1], "type": "category"},
        yaxis={"title": {"text": "kernels per instance"}}, yaxis2={"title": {"text": "time per instance (µs)"}, "anchor": "x2"})}


# Kernel categories (bench.execution.kernels.CATEGORIES) keep one colour in every timeline.
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
    return {"data": data, "layout": layout(
        title, barmode="overlay", height=160 + 60 * len(rows), bargap=0.15,
        xaxis={"title": {"text": "µs from the range's start"}, "rangemode": "tozero"},
        yaxis={"type": "category", "categoryorder": "array", "categoryarray": rows[::-1], "automargin": True})}


def _timeline_trace(category: str, ks: list[dict], color: str) -> dict:
    return {"type": "bar", "orientation": "h", "name": esc(category), "marker": {"color": color, "line": {"width": 0}},
            "y": [f"{esc(k['range'])} · GPU kernels" for k in ks], "base": [k["start_us"] for k in ks],
            "x": [max(k["end_us"] - k["start_us"], 0.0) for k in ks],
            "hovertext": [f"{esc(k['name'][:160])}<br>{esc(category)}, {k['end_us'] - k['start_us']:.2f} µs" for k in ks],
            "hoverinfo": "text"}
