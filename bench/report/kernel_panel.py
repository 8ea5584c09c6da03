"""Profile records -> the dashboard's kernel frame (kernels and time per RMSNorm / attention call).

`bench profile` appends Profile records (bench.results.records) whose extra["kernel_table"] names a
KernelTable JSON file (bench.execution.kernels). `kernel_frame` reads those files and returns
the frame `bench.report.kernel_figures.kernel_bars` draws, one row per (profiled cell, panel row):

- range rows ("RMSNorm", "attention"): module range groups matched by class-name globs, per
  call (instance) of the module: mean kernels per call, median kernel time per call;
- category rows ("norm kernels", "attention kernels", "gemm kernels", ...): kernels of each
  name category (bench.execution.kernels.categorize), per decode step where the table has
  decode-step ranges holding kernels (the kernels inside them), else the window's per forward
  pass (prefill or decode step; per window where the table has no step ranges). Compiled
  graphs and engines fuse across module boundaries, so their module ranges vanish; these rows
  still show how many norm and attention kernels run and how long they take.

`kernel_summary_markdown` gives the same figures as one table, a row per profiled cell: the
study's "one decode step, eager vs compiled" table.

Pure: records and files in, DataFrame and warnings out; nothing is written.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.results.records import checked_step_ms

# Panel row label -> globs on range groups (module class names, or module names for name-matched ranges).
RANGE_PANELS: dict[str, tuple[str, ...]] = {
    "RMSNorm": ("*RMSNorm", "*RmsNorm"),
    "attention": ("*Attention", "*Attention2", "*Attn"),
}
STEP_RANGES = ("prefill", "decode_step")  # range groups whose instances are forward passes
DECODE_STEP = "decode_step"
COLUMNS = ("backend", "precision", "range", "kind", "per", "kernels_per_instance", "time_per_instance_us",
           "instances", "unit", "source", "cell_id", "kernel_table")


@dataclass
class KernelFrame:
    frame: pd.DataFrame  # COLUMNS; empty when no record had a readable table
    warnings: list[str] = field(default_factory=list)
    summary: list[dict] = field(default_factory=list)  # one per profiled cell: totals per step (kernel_summary_markdown)


def _label(cell: dict, with_batch: bool) -> str:
    """Return the series name of a cell: its backend and options (and batch size when several are profiled)."""
    from bench.spec.cells import identity_options

    opts = {k: v for k, v in identity_options(cell.get("backend"), cell.get("options") or {}).items() if k != "batching"}
    label = str(cell.get("backend", "?")) + "".join(f" {k}={v}" for k, v in sorted(opts.items()))
    return label + (f" bs={cell.get('max_batch_size')}" if with_batch else "")


def _annotation_kernels(table) -> dict[str, list[float]]:
    """Return per category [launches, us] of pseudo-kernels that are the harness's own range markers.

    torch.profiler on a GPU repeats each record_function range as a device-side annotation named
    after its label, which lands in (no range) and would count as a kernel; older tables hold
    them (docs/guide/profiling.md), newer ones give {}. (no range) rows are exclusive: subtracting is exact.
    """
    from bench.execution.kernels import NO_RANGE

    groups = {r.range for r in table.ranges} - {NO_RANGE}
    out: dict[str, list[float]] = {}
    for row in table.rows:
        if row.range == NO_RANGE and ":" in row.kernel and row.kernel.split(":", 1)[0] in groups:
            slot = out.setdefault(row.category, [0, 0.0])
            slot[0] += row.kernels
            slot[1] += row.total_us
    return out


def table_rows(table, panels: dict[str, tuple[str, ...]] = RANGE_PANELS, window: dict | None = None) -> list[dict]:
    """Return the panel rows of one KernelTable: matched range groups, then every kernel category."""
    rows = []
    for label, globs in panels.items():
        hits = [r for r in table.ranges if any(fnmatch.fnmatchcase(r.range, g) for g in globs)]
        n = sum(r.instances for r in hits)
        if not n:
            continue  # ranges vanished (compiled, engine) or were not asked for: the category rows remain
        # Several groups (e.g. two attention classes): instance-weighted means of their per-call figures.
        rows.append({"range": label, "kind": "range", "per": "call", "instances": n,
                     "kernels_per_instance": sum(r.kernels_per_instance * r.instances for r in hits) / n,
                     "time_per_instance_us": sum(r.gpu_us_per_instance_median * r.instances for r in hits) / n})
    per, n, cats = _per_step(table, window)
    for category, (launches, us) in cats.items():
        if launches <= 0:
            continue
        rows.append({"range": f"{category} kernels", "kind": "category", "per": per, "instances": n,
                     "kernels_per_instance": launches / n, "time_per_instance_us": us / n})
    return rows


def _per_step(table, window: dict | None) -> tuple[str, int, dict[str, tuple[float, float]]]:
    """Return (what a row is per, how many of those, {category: (launches, us)} in them), categories in table order.

    Per decode step when decode-step ranges hold kernels; else per forward pass (prefill and
    decode-step ranges, or the window's batches x (decode steps + 1)) over the whole window,
    less the range markers of old tables; else per window.
    """
    from bench.execution.kernels import CATEGORIES

    decode = next((r for r in table.ranges if r.range == DECODE_STEP), None)
    if decode is not None and decode.total_us > 0 and decode.kernels_per_instance > 0:
        cats: dict[str, list[float]] = {}
        for row in table.rows:
            if row.range == DECODE_STEP:
                slot = cats.setdefault(row.category, [0, 0.0])
                slot[0] += row.kernels
                slot[1] += row.total_us
        return "decode step", decode.instances, {c: tuple(cats[c]) for c in CATEGORIES if c in cats}
    steps = sum(r.instances for r in table.ranges if r.range in STEP_RANGES)
    if not steps and window:
        if window.get("kind") == "decode":  # a decode-only window without step ranges
            steps = int(window.get("decode_steps") or 0)
        else:
            steps = int(window.get("batches") or 1) * (int(window.get("decode_steps") or 0) + 1)
    per, n = (("decode step" if window and window.get("kind") == "decode" else "forward pass"), steps) if steps else (
        "window", 1)
    markers = _annotation_kernels(table)
    cats = {c.category: (c.kernels - markers.get(c.category, [0, 0.0])[0], c.total_us - markers.get(c.category, [0, 0.0])[1])
            for c in table.categories}
    return per, n, cats


def summary_row(table, window: dict | None, profile: dict, where: str = "profile record") -> dict:
    """Return one cell's totals per step: all kernels, norm and attention kernels and time, module calls, step time."""
    per, n, cats = _per_step(table, window)
    out = {"per": per, "steps": n, "kernels": sum(k for k, _ in cats.values()) / n,
           "kernel_us": sum(u for _, u in cats.values()) / n}
    for c in ("norm", "attention"):
        k, u = cats.get(c, (0, 0.0))
        out[f"{c}_kernels"], out[f"{c}_us"] = k / n, u / n
    for label, globs in RANGE_PANELS.items():
        hits = [r for r in table.ranges if any(fnmatch.fnmatchcase(r.range, g) for g in globs)]
        calls = sum(r.instances for r in hits)
        out[f"{label}_per_call"] = (sum(r.kernels_per_instance * r.instances for r in hits) / calls,
                                    sum(r.gpu_us_per_instance_median * r.instances for r in hits) / calls) if calls else None
    out["step_ms"] = checked_step_ms(profile, where)
    # the profiler's own cost: the window with and without it, and the whole session process (load included)
    out["window_ms"] = tuple(profile[k] * 1e3 if profile.get(k) else None
                             for k in ("profiled_window_s", "unprofiled_window_s"))
    out["session_s"] = profile.get("session_wall_s")
    out["unit"] = table.unit
    return out


def _pair(v) -> str:
    if not v or None in v:
        return "-"
    return f"{v[0]:.1f} / {v[1]:.1f}"


def kernel_summary_markdown(summary: list[dict]) -> str:
    """Return the per-step kernel table: one row per profiled cell (eager vs compiled side by side)."""
    if not summary:
        return "_no kernel profiles_\n"
    unit = "kernels" if all(s["unit"] == "gpu_kernel" for s in summary) else "kernels (CPU ops on CPU)"
    time_unit = "us" if all(s["unit"] == "gpu_kernel" for s in summary) else "us (CPU time on CPU)"
    headers = ["configuration", "precision", "batch", "tool", "per", f"{unit}", f"{time_unit}", "norm kernels", f"norm {time_unit}",
               "attention kernels", f"attention {time_unit}", "RMSNorm call: kernels, us", "attention call: kernels, us",
               "step ms (unprofiled)", "window ms: profiled / unprofiled", "session s (profiler included)"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]

    def call(v, tool):
        if v is not None:
            return f"{v[0]:.1f}, {v[1]:.1f}"
        # ncu replays one decode-step range and no module ranges inside it, also for an eager step
        return "- (ncu: step range only)" if tool == "ncu" else "- (fused: no module ranges)"

    for s in summary:
        cells = [s["configuration"], str(s["precision"]), str(s["batch"]), str(s.get("tool") or "-"), f"{s['per']} (x{s['steps']})",
                 f"{s['kernels']:.0f}", f"{s['kernel_us']:.0f}", f"{s['norm_kernels']:.1f}", f"{s['norm_us']:.1f}",
                 f"{s['attention_kernels']:.1f}", f"{s['attention_us']:.1f}", call(s["RMSNorm_per_call"], s.get("tool")),
                 call(s["attention_per_call"], s.get("tool")), "-" if s.get("step_ms") is None else f"{s['step_ms']:.2f}",
                 _pair(s.get("window_ms")), "-" if s.get("session_s") is None else f"{s['session_s']:.0f}"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def latest_per_cell(records: list, tool: str | None = None) -> list:
    """Return the latest ok Profile record of each cell and tool (of `tool` alone if given), in the order first profiled.

    The latest run wins; within one run, the later line.
    """
    from bench.results.records import Profile

    latest: dict[tuple, Profile] = {}
    for rec in sorted((r for r in records if isinstance(r, Profile) and r.ok and (tool is None or r.tool == tool)),
                      key=lambda r: r.context.started_at or 0.0):
        latest[(rec.cell_id, rec.tool)] = rec
    return list(latest.values())


def _title(cell: dict) -> str:
    """Return a profiled cell's heading: its series name, precision and batch size."""
    return f"{_label(cell, False)} {cell.get('precision')} bs={cell.get('max_batch_size')}"


def kernel_frame(records: list, base_dirs: list[str | Path] = (),
                 panels: dict[str, tuple[str, ...]] = RANGE_PANELS) -> KernelFrame:
    """Return the kernel frame of the ok Profile records (the latest run per cell and tool) and warnings.

    A record whose kernel table is missing or unreadable is left out with a warning naming the
    file and the fix; the other records still make the frame.
    """
    from bench.errors import BenchInputError
    from bench.execution.kernels import KernelTable
    from bench.report.record_files import RecordFileRefused, record_file

    bases = [Path(b) for b in base_dirs]
    latest = latest_per_cell(records)
    batch_sizes = {rec.cell.get("max_batch_size") for rec in latest}
    rows, warns, summary = [], [], []
    for rec in latest:
        cell = rec.cell
        name = rec.kernel_table
        try:
            path = record_file(name, "kernel_table", bases)
            table = KernelTable.load(path)
            totals = summary_row(table, rec.profile.get("window"), rec.profile,  # its step_ms checked
                                 f"profile record {rec.cell_id} ({_label(cell, False)} {cell.get('precision')})")
        except RecordFileRefused as exc:
            warns.append(f"kernel table {name!r} of profile record {rec.cell_id} ({_label(cell, False)} "
                         f"{cell.get('precision')}) {exc}: left out of the kernel panel; re-run `bench profile` "
                         "for that cell or copy its profiles/ folder next to the store")
            continue
        except BenchInputError as exc:
            warns.append(f"{exc}: left out of the kernel panel")
            continue
        profile = rec.profile
        window = profile.get("window")
        base = {"backend": _label(cell, len(batch_sizes) > 1), "precision": cell.get("precision"),
                "unit": table.unit, "source": table.source, "cell_id": rec.cell_id, "kernel_table": str(path)}
        rows += [{**base, **r} for r in table_rows(table, panels, window)]
        summary.append({"configuration": _label(cell, False), "precision": cell.get("precision"),
                        "batch": cell.get("max_batch_size"), "tool": rec.tool, **totals})
    return KernelFrame(pd.DataFrame(rows, columns=list(COLUMNS)), warns, summary)


def roofline_markdown(records: list, base_dirs: list[str | Path] = ()) -> tuple[str, list[str]]:
    """Return the report's ncu section and warnings: per cell, its latest ncu profile's roofline.md.

    The file `bench profile --tool ncu` (or `bench kernels ncu_raw.csv`) wrote: the step against
    the copy bandwidth, per category, and where the time above the roofline goes; its list of the
    longest kernels is left to the file. "" when no ncu profile is in the records.
    """
    from bench.profiling.ncu_collector import LONGEST
    from bench.report.record_files import RecordFileRefused, read_text, record_file

    bases = [Path(b) for b in base_dirs]
    parts, warns = [], []
    for rec in latest_per_cell(records, "ncu"):
        cell, name = rec.cell, rec.profile.get("roofline_md")
        title = _title(cell)
        try:
            path = record_file(name, "roofline_md", bases)
            text = read_text(path, "roofline_md").split("\n" + LONGEST)[0].rstrip()
        except (RecordFileRefused, OSError) as exc:
            warns.append(f"ncu roofline {name!r} of profile record {rec.cell_id} ({title}) {exc}: left out of the "
                         "report; copy its profiles/ folder next to the store, or re-read its ncu_raw.csv with "
                         "`bench kernels`")
            continue
        metrics = rec.profile.get("ncu_metrics")
        parts.append(f"### {title}" + (f" (--ncu-metrics {metrics})" if metrics else "") + f"\n\n{text}\n\n"
                     f"(from {path}; its longest kernels are listed there)\n")
    return "\n".join(parts), warns


# The range group a timeline shows: decode steps where there are some, else batches, else (None) the
# group of the first range that launched a kernel (an export of another program).
TIMELINE_GROUPS = ("decode_step", "batch", None)
TIMELINE_RANGES = 3  # instances drawn per profiled cell


def kernel_timelines(records: list, base_dirs: list[str | Path] = (), ranges: int = TIMELINE_RANGES,
                     cells: int = 4) -> tuple[list[tuple[str, dict | None, str]], list[str]]:
    """Return ([(heading, timeline figure, note)], warnings) for the latest ok nsys Profile record of each cell.

    The figure (bench.report.kernel_figures.kernel_timeline) draws the first `ranges` decode steps
    (else batches) of the record's SQLite export; at most `cells` cells. A record whose export is
    missing gets a warning naming the file, not a figure.
    """
    from bench.errors import BenchInputError
    from bench.profiling.nsys_collector import timeline_spans
    from bench.report.kernel_figures import kernel_timeline
    from bench.report.record_files import RecordFileRefused, record_file

    bases = [Path(b) for b in base_dirs]
    figs, warns = [], []
    for rec in latest_per_cell(records, "nsys")[:cells]:
        name = (rec.profile).get("sqlite")
        label = _title(rec.cell)
        try:
            path = record_file(name, "sqlite", bases)
        except RecordFileRefused as exc:
            warns.append(f"nsys export {name!r} of profile record {rec.cell_id} ({label}) {exc}: no timeline; "
                         "copy its profiles/ folder next to the store")
            continue
        try:
            spans = next((s for g in TIMELINE_GROUPS if (s := timeline_spans(path, g, ranges))["ranges"]), None)
        except BenchInputError as exc:
            warns.append(f"{exc}: no timeline")
            continue
        if spans is None:
            figs.append((f"Kernel timeline: {label}", None, f"no NVTX range encloses a kernel launch in {path}"))
            continue
        figs.append((f"Kernel timeline: {label}", kernel_timeline(spans, f"Kernel timeline (nsys): {label}"),
                     f"first {len(spans['ranges'])} {spans['group']} ranges of {path.name}: GPU kernels coloured by "
                     "category under the CPU-side NVTX range that launched them (µs from the range's start)"))
    return figs, warns
