"""Profile records -> the dashboard's kernel frame (kernels and time per RMSNorm / attention call).

`bench profile` appends Profile records (bench.results.records) whose extra["kernel_table"] names a
KernelTable JSON file (bench.profiling.kernels). `kernel_frame` reads those files and returns
the frame `bench.report.figures.kernel_bars` draws, one row per (profiled cell, panel row):

- range rows ("RMSNorm", "attention"): module range groups matched by class-name globs, per
  call (instance) of the module: mean kernels per call, median kernel time per call;
- category rows ("norm kernels", "attention kernels", "gemm kernels", ...): the window's
  kernels of each name category (bench.profiling.kernels.categorize), per forward pass
  (prefill or decode step; per window where the table has no step ranges). Compiled graphs
  and engines fuse across module boundaries, so their module ranges vanish; these rows still
  show how many norm and attention kernels run and how long they take.

Pure: records and files in, DataFrame and warnings out; nothing is written.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

# Panel row label -> globs on range groups (module class names, or module names for name-matched ranges).
RANGE_PANELS: dict[str, tuple[str, ...]] = {
    "RMSNorm": ("*RMSNorm", "*RmsNorm"),
    "attention": ("*Attention", "*Attention2", "*Attn"),
}
STEP_RANGES = ("prefill", "decode_step")  # range groups whose instances are forward passes
COLUMNS = ("backend", "precision", "range", "kind", "per", "kernels_per_instance", "time_per_instance_us",
           "instances", "unit", "source", "cell_id", "kernel_table")


@dataclass
class KernelFrame:
    frame: pd.DataFrame  # COLUMNS; empty when no record had a readable table
    warnings: list[str] = field(default_factory=list)


def resolve_table(path: str, base_dirs: list[Path]) -> Path | None:
    """Return the kernel table file a record names, or None when it is nowhere to be found.

    Tried in order: the path as given (absolute, or relative to the working directory), relative
    to each store's folder, and its last three parts (<matrix>/<cell>-<tool>/kernel_table.json)
    under each store's folder, for stores copied from the machine that profiled them.
    """
    p = Path(path)
    candidates = [p] + [b / p for b in base_dirs if not p.is_absolute()]
    candidates += [b / Path(*p.parts[-3:]) for b in base_dirs if len(p.parts) >= 3]
    return next((c for c in candidates if c.is_file()), None)


def _label(cell: dict, with_batch: bool) -> str:
    """Return the series name of a cell: its backend and options (and batch size when several are profiled)."""
    from bench.spec import identity_options

    opts = {k: v for k, v in identity_options(cell.get("backend"), cell.get("options") or {}).items() if k != "batching"}
    label = str(cell.get("backend", "?")) + "".join(f" {k}={v}" for k, v in sorted(opts.items()))
    return label + (f" bs={cell.get('max_batch_size')}" if with_batch else "")


def _annotation_kernels(table) -> dict[str, list[float]]:
    """Return per category [launches, us] of pseudo-kernels that are the harness's own range markers.

    torch.profiler on a GPU repeats each record_function range as a device-side annotation named
    after its label, which lands in (no range) and would count as a kernel; older tables hold
    them (docs/profiling.md), newer ones give {}. (no range) rows are exclusive: subtracting is exact.
    """
    from bench.profiling.kernels import NO_RANGE

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
    steps = sum(r.instances for r in table.ranges if r.range in STEP_RANGES)
    if not steps and window:
        steps = int(window.get("batches") or 1) * (int(window.get("decode_steps") or 0) + 1)
    per, n = ("forward pass", steps) if steps else ("window", 1)
    markers = _annotation_kernels(table)
    for c in table.categories:
        launches = c.kernels - markers.get(c.category, [0, 0.0])[0]
        us = c.total_us - markers.get(c.category, [0, 0.0])[1]
        if launches <= 0:
            continue
        rows.append({"range": f"{c.category} kernels", "kind": "category", "per": per, "instances": n,
                     "kernels_per_instance": launches / n, "time_per_instance_us": us / n})
    return rows


def kernel_frame(records: list, base_dirs: list[str | Path] = (),
                 panels: dict[str, tuple[str, ...]] = RANGE_PANELS) -> KernelFrame:
    """Return the kernel frame of the ok Profile records (the latest run per cell and tool) and warnings.

    A record whose kernel table is missing or unreadable is left out with a warning naming the
    file and the fix; the other records still make the frame.
    """
    from bench.errors import BenchInputError
    from bench.profiling.kernels import KernelTable
    from bench.results.records import Profile

    bases = [Path(b) for b in base_dirs]
    latest: dict[tuple, Profile] = {}
    ok = [r for r in records if isinstance(r, Profile) and r.ok]
    # the latest run wins; within one run, the later line
    for rec in sorted(ok, key=lambda r: r.context.started_at or 0.0):
        latest[(rec.cell_id, rec.tool)] = rec
    batch_sizes = {rec.cell.get("max_batch_size") for rec in latest.values()}
    rows, warns = [], []
    for rec in latest.values():
        cell = rec.cell
        name = rec.kernel_table
        path = resolve_table(name, bases) if name else None
        if path is None:
            warns.append(f"kernel table {name!r} of profile record {rec.cell_id} ({_label(cell, False)} "
                         f"{cell.get('precision')}) is missing: left out of the kernel panel; re-run `bench profile` "
                         "for that cell or copy its profiles/ folder next to the store")
            continue
        try:
            table = KernelTable.load(path)
        except BenchInputError as exc:
            warns.append(f"{exc}: left out of the kernel panel")
            continue
        window = (rec.extra.get("profile") or {}).get("window")
        base = {"backend": _label(cell, len(batch_sizes) > 1), "precision": cell.get("precision"),
                "unit": table.unit, "source": table.source, "cell_id": rec.cell_id, "kernel_table": str(path)}
        rows += [{**base, **r} for r in table_rows(table, panels, window)]
    return KernelFrame(pd.DataFrame(rows, columns=list(COLUMNS)), warns)

