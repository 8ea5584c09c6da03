"""Figures of ratios: a speedup table's heatmap and its accuracy against its speedups, and the heatmap of
two groups' matched cells (the comparison view).

They take bench.report.tables.SpeedupTable (its frame, and its baseline for the titles) or the
ratio frames of bench.report.cells.compared_cells; ratios sit on bench.report.plotting's diverging
scale centred at 1.0x.
"""

from __future__ import annotations

import pandas as pd

from bench.report.plotting import OOM_COLOR, esc, layout, ratio_heatmap, series_labels
from bench.report.render import UNSTABLE_MARK, speedup_text
from bench.report.tables import SpeedupTable


def speedup_heatmap(table: SpeedupTable, title: str) -> dict:
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
    # Each ratio as the table writes it (bench.report.render.speedup_text): a * where its inputs are unstable
    # or were measured on a busy machine, the interval (or "1 run") on a second line.
    shown = [speedup_text(r, metric) if metric != "output_speedup" else
             (f"{r[metric]:.2f}x" + (UNSTABLE_MARK if r.get("speedup_unstable") is True else "")
              if r.get(metric) is not None and not pd.isna(r.get(metric)) else "")
             for r in t.to_dict("records")]
    cell: dict[tuple[str, str], tuple] = {}
    for key in zip(t._label, t.max_batch_size.astype(str), t.status, t[metric], paced, shown, strict=True):
        cell.setdefault(key[:2], key[2:])
    ratios, text = [], []
    for label in labels:
        got = [cell.get((label, c)) for c in cols]
        ratios.append([None if g is None or g[0] != "ok" or g[1] is None or pd.isna(g[1]) or g[2] else float(g[1])
                       for g in got])
        text.append(["" if g is None else ((esc(g[3]).replace(" ", "<br>", 1) + (" (paced)" if g[2] else "")
                                            if g[1] is not None and not pd.isna(g[1]) else "n/a")
                                           if g[0] == "ok" else esc(str(g[0]).upper())) for g in got])
    marked = bool(t.get("speedup_unstable", pd.Series(dtype=bool)).eq(True).any())
    note = f" ({UNSTABLE_MARK}: unstable or measured on a busy machine, not a result)" if marked else ""
    return ratio_heatmap(cols, labels, ratios, text, f"{what} vs {table.baseline}{note} — {title}")


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
    return ratio_heatmap(cols, labels, ratios, text, f"Output tok/s ratio {b} / {a} (matched by cell_id) — {title}")


VERDICT_COLORS = {"aligned": "#00cc96", "degraded": "#ffa15a", "broken": OOM_COLOR}


def accuracy_vs_speedup(table: SpeedupTable, title: str) -> dict:
    """Return a scatter of each measured cell's mean KL against the baseline (log y) vs its speedup, coloured by verdict,
    from a bench.report.tables.SpeedupTable with accuracy columns.

    The speedup is the generation speedup where the table has one, else the throughput speedup.
    Cells of KL 0 (the baseline itself, and cells whose logits equal the baseline's) sit on a line a
    decade below the smallest positive KL, labelled "0": a log axis has no 0, and leaving them out
    would hide the cells that agree best.
    """
    import math

    from bench.report.plotting import log_ticks

    t = table.frame[table.frame.status == "ok"].copy()
    if "gpu_memory_gb" not in t:
        t["gpu_memory_gb"] = None
    metric, what = "generation_speedup", "generation speedup"
    if metric not in t or pd.to_numeric(t[metric], errors="coerce").isna().all():
        metric, what = "throughput_speedup", "throughput speedup"
    t["_kl"] = pd.to_numeric(t.get("accuracy_kl_mean"), errors="coerce")
    t["_x"] = pd.to_numeric(t[metric], errors="coerce")
    t = t[(t._kl >= 0) & t._x.notna()]
    t["_label"] = series_labels(t) if len(t) else []
    positive = t._kl[t._kl > 0]
    log = len(positive) > 0
    zero = 10 ** (math.floor(math.log10(positive.min())) - 1) if log else 0.0  # where KL 0 is drawn
    yaxis = {"title": {"text": "mean KL(baseline || cell), nats/token"}}
    if log:
        ticks = log_ticks(positive)
        yaxis.update(type="log", tickvals=[zero] + ticks.get("tickvals", []), ticktext=["0"] + ticks.get("ticktext", []))
    data = []
    for verdict, color in {**VERDICT_COLORS, "baseline": "#636efa"}.items():
        v = t[t.accuracy_verdict == verdict]
        if not len(v):
            continue
        data.append({"type": "scatter", "mode": "markers+text", "name": verdict, "x": list(v._x),
                     "y": [k if k > 0 else zero for k in v._kl], "customdata": list(v._kl),
                     "text": [esc(f"{lbl} bs{bs}") for lbl, bs in zip(v._label, v.max_batch_size, strict=True)],
                     "textposition": "top center", "marker": {"color": color, "size": 11},
                     "hovertemplate": "%{text}<br>" + what + " %{x:.2f}x<br>KL mean %{customdata:.3g}<extra>" + verdict
                                      + "</extra>"})
    return {"data": data, "layout": layout(f"Accuracy vs {what} (vs {table.baseline}; KL 0 on the line marked 0) — {title}",
                                           xaxis={"title": {"text": f"{what} (x)"}}, yaxis=yaxis)}
