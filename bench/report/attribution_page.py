"""`bench compare --dashboard`: the comparison and where each judged cell's time went, as one self-contained page.

Per attributed cell (bench.results.attribution.Attribution) a figure: the change in µs per decode
step of each module range and each kernel category, ranked as the tables rank them, beside the
measured step-time change and what is left unexplained; under it the same tables. The comparison's
verdict tables come first. Pure: a Comparison and its Markdown in, the page's HTML out
(bench.report.dashboard.dashboard_html, plotly.js inlined).
"""

from __future__ import annotations

from bench.report.plotting import esc, layout

INCREASE, DECREASE, MEASURED = "#ef553b", "#00cc96", "#636efa"


def attribution_figure(a) -> dict:
    """Return a bar figure of one Attribution: Δµs per step of each row (module ranges, then kernel categories), the
    measured change and the unexplained rest."""
    data = []
    panels = [("module range", a.modules), ("kernel category", a.categories)] if a.modules is not None else [
        ("kernel category", a.categories)]
    d = a.measured_delta_us
    for i, (what, rows) in enumerate(panels):
        axis = "" if i == 0 else str(i + 1)
        names = [esc(r.name) for r in rows]
        values = [r.delta_us for r in rows]
        colors = [INCREASE if v > 0 else DECREASE for v in values]
        if d is not None:
            names += ["unexplained", "measured change"]
            values += [a.unexplained_us(rows), d]
            colors += ["#7f7f7f", MEASURED]
        data.append({"type": "bar", "orientation": "h", "name": esc(what), "showlegend": False, "y": names, "x": values,
                     "marker": {"color": colors}, "xaxis": "x" + axis, "yaxis": "y" + axis,
                     "hovertext": [f"{n}: {v:+.1f} µs per step" + (f", {100 * v / d:.0f} % of the change" if d else "")
                                   for n, v in zip(names, values, strict=True)], "hoverinfo": "text"})
    n = len(panels)
    axes = {}
    for i, (what, _rows) in enumerate(panels):
        axis = "" if i == 0 else str(i + 1)
        lo, hi = i / n + (0.06 if i else 0), (i + 1) / n - (0.06 if i + 1 < n else 0)
        axes["xaxis" + axis] = {"domain": [lo, hi], "title": {"text": f"Δ µs per {a.base.per} ({what})"}, "zeroline": True}
        axes["yaxis" + axis] = {"type": "category", "autorange": "reversed", "automargin": True,
                                **({"anchor": "x" + axis} if axis else {})}
    rows = max(len(r) for _, r in panels) + 2
    return {"data": data, "layout": layout(f"Where the time went: {a.label}", height=160 + 28 * rows, **axes)}


def comparison_page(comparison, markdown: str) -> str:
    """Return the page: the comparison's tables, then per attributed cell its figure and tables."""
    from bench.report.dashboard import dashboard_html, markdown_table_html
    from bench.results.attribution import attribution_markdown

    verdicts = markdown.split("\n### Where the time went", 1)[0]
    explanation = comparison.attribution
    sections = [{"heading": "Verdicts", "figures": [], "html": markdown_table_html(verdicts)}]
    for a in getattr(explanation, "attributions", []):
        sections.append({"heading": f"Where the time went: {a.label}",
                         "figures": [("Change per decode step", attribution_figure(a), "; ".join(a.verdicts))],
                         "html": markdown_table_html(attribution_markdown(a))})
    missing = getattr(explanation, "missing", [])
    notes = [f"no profile for {m.label} ({m.side} side): {m.reason}" for m in missing] + list(
        getattr(explanation, "notes", []))
    title = f"bench compare: {comparison.base.name} → {comparison.head.name}"
    return dashboard_html([], sections, title, [], list(comparison.warnings) + notes,
                          "<p class='note'>the environments of both sides are in the verdicts' warnings</p>")
