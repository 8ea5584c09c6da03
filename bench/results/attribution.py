"""Where a regression's time went: the profiles of a regressed cell on both sides, joined as a ranked table.

`bench compare` judges a cell regressed (or improved) from its runs; this module says which module
range and which kernel category account for it, from the Profile records (`bench profile`) stored
for the cell on each side. For each such cell:

- the step-time change it explains: the measured TPOT (time per output token: one decode step of a
  static batch), each side's value as the comparison computed it from the runs;
- per module range (RMSNorm, attention, MLP, decoder layer, lm_head, outside any range) and per
  kernel category (gemm, attention, norm/reduction, elementwise, copy, other, and launch gaps and
  idle): the change in µs and in kernels per decode step, from the profile's decode-step ranges,
  each kernel counted once, in the innermost module range that launched it (the table's
  meta["decode_steps"], bench.execution.kernels.decode_step_breakdown);
- "launch gaps and idle", a row of the category table: the profile's unprofiled step time (`step_ms`:
  harness-loop windows' and uncompiled generate windows') less the kernel time of a step, where both
  sides' profiles have a step time (the time no kernel ran belongs to no module range, so the module
  table leaves it to its unexplained rest);
- where the torch.profiler or nsys window recorded them, each module range's own host time per step
  (meta["decode_steps"]["host_us"], bench.execution.kernels.host_time_by_module): when the gaps grew more than any
  module's kernels, the GPU waited for the host, and the range whose host time moved most is the first row;
- ranked by how much of the change each row carries, with its share of the measured change, and what
  is left unexplained (measured change less the rows' sum: noise, or what the profile window did not
  reproduce); the kernels that ran on one side only, by name.

A side's windows (bench.results.profile_windows): those of its own timed processes, where `bench run
--profile-window` profiled them after the trials, else its latest profiling invocation of the cell; where there are
several (the side's runs, or `bench profile --processes N`, `bench compare --profile`'s default 3), the mean of their
windows (bench.results.decode_step reads each kernel table and averages them), since a host-bound step moves from
process to process. Windows of the timed processes are checked against the step of the same processes' runs; a
session's, against the range of the side's runs.

The kernels are GPU kernels where the profile ran on a GPU (torch.profiler, nsys, ncu) and aten
operators with their CPU time where it ran on the CPU (torch.profiler). Both sides must come from one
tool and one unit. A table without decode-step ranges (a compiled `generate` cell gets no hooks) is
read per forward pass, prefill included, by category only, and says so.

Profile records are untrusted data: a kernel table they name is opened only under its profile store's
folder (the path as stored, or its last three parts there: profile_windows.table_file). Pure but for reading those
files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError
from bench.results.decode_step import StepFigures, mean_figures, step_figures
from bench.results.profile_windows import (
    TIMED_PROCESSES,
    WindowsFrom,
    profile_stores,
    side_windows,
    table_file,
)

GAPS = "launch gaps and idle"
TOOL_ORDER = ("nsys", "torch", "ncu")  # which tool's profiles to join when both sides have several
STEP_METRIC = "tpot_median_ms"  # the measured decode-step time a row's share is of
TOP_KERNELS = 10
# A trial that carries its run: above this many times the median of the same process's other trials (3 or more trials
# a process). A run's figure is the mean of its trials, and its window, a few decode steps after them, meets no such
# excursion: on an H100 of 2026-12-07 one plant trial at 46.28 ms (its others 27.46-33.12) took a process's change
# to +8.13 ms where its window measured +5.14 (docs/measurements/2026-12-07-h100-interleaved-trials.md).
EXCURSION = 1.3


@dataclass(frozen=True)
class Row:
    name: str
    base_kernels: float
    head_kernels: float
    base_us: float
    head_us: float
    share: float | None  # of the measured step-time change

    @property
    def delta_us(self) -> float:
        return self.head_us - self.base_us

    @property
    def delta_kernels(self) -> float:
        return self.head_kernels - self.base_kernels


@dataclass
class Attribution:
    """Where one cell's step-time change went."""

    key: str
    label: str
    verdicts: list[str]  # "regressed: output_throughput, tpot_median_ms"
    base: StepFigures
    head: StepFigures
    measured_base_us: float | None
    measured_head_us: float | None
    modules: list[Row] | None
    categories: list[Row]
    added: list[tuple[str, float, float]]  # (kernel, launches, µs) per step, head only
    removed: list[tuple[str, float, float]]
    notes: list[str] = field(default_factory=list)
    host: list[Row] | None = None  # host time per module range, ranked; None: a side's profile has none
    origins: dict[str, WindowsFrom] | None = None  # side -> where its windows came from (None: not said)

    @property
    def measured_delta_us(self) -> float | None:
        if self.measured_base_us is None or self.measured_head_us is None:
            return None
        return self.measured_head_us - self.measured_base_us

    def unexplained_us(self, rows: list[Row]) -> float | None:
        d = self.measured_delta_us
        return None if d is None else d - sum(r.delta_us for r in rows)

    @property
    def first(self) -> Row | None:
        """Return the row that carries most of the change (first_of)."""
        return self.first_of[0]

    @property
    def first_of(self) -> tuple[Row | None, str]:
        """Return (the row that carries most of the change, its table): the first module row, else the first category
        row; but where the launch gaps moved more than any module's kernels (the GPU waited for the host), the module
        range whose host time moved most ("host time"), else the gaps row itself: no module's kernels explain it."""
        rows = self.modules or self.categories
        if not rows:
            return None, ""
        gaps = next((r for r in self.categories if r.name == GAPS), None)
        if self.modules and gaps is not None:
            sign = -1.0 if (self.measured_delta_us if self.measured_delta_us is not None else gaps.delta_us) < 0 else 1.0
            if sign * gaps.delta_us > sign * rows[0].delta_us:
                return (self.host[0], "host time") if self.host else (gaps, "kernel category")
        return rows[0], "module range" if self.modules else "kernel category"

    @property
    def explained_share(self) -> float | None:
        """Return the share of the measured change the category rows (launch gaps and idle included) sum to."""
        d = self.measured_delta_us
        return None if not d else sum(r.delta_us for r in self.categories) / d


@dataclass(frozen=True)
class Missing:
    """A side of a judged cell without a usable profile: what `bench compare --profile` would profile."""

    key: str
    label: str
    side: str  # "base" or "head"
    cell: dict
    matrix: str
    commits: tuple[str, ...]  # the side's measured commits ("abc123456789+dirty")
    reason: str
    regressed: bool = False  # a metric of the cell regressed (or would have, but for tuned kernels that differ)


@dataclass
class Explanation:
    """The attribution of a comparison: one Attribution per explained cell, the sides that lack a profile."""

    attributions: list[Attribution] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profile_stores: dict[str, list[Path]] = field(default_factory=dict)  # side -> the profile stores read


def _rows(base: dict, head: dict, measured_delta: float | None, gaps: tuple[float, float] | None) -> list[Row]:
    """Return the rows of one view, ranked: the rows that carry the measured change first."""
    none = (0.0, 0.0)
    rows = [Row(name, base.get(name, none)[0], head.get(name, none)[0], base.get(name, none)[1], head.get(name, none)[1],
                None) for name in dict.fromkeys([*base, *head])]
    if gaps is not None:
        rows.append(Row(GAPS, 0.0, 0.0, gaps[0], gaps[1], None))
    if measured_delta:
        rows = [Row(r.name, r.base_kernels, r.head_kernels, r.base_us, r.head_us, r.delta_us / measured_delta)
                for r in rows]
    if measured_delta is None:  # no direction to explain: the largest moves first
        return sorted(rows, key=lambda r: (-abs(r.delta_us), r.name))
    sign = -1.0 if measured_delta < 0 else 1.0
    return sorted(rows, key=lambda r: (-sign * r.delta_us, r.name))


def attribute(key: str, label: str, verdicts: list[str], base: StepFigures, head: StepFigures,
              measured: tuple[float | None, float | None],
              run_ranges: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None),
              origins: tuple[WindowsFrom | None, WindowsFrom | None] = (None, None),
              excursions: tuple[list[str], float | None] = ([], None)) -> Attribution:
    """Return the Attribution of one cell from its two sides' decode steps and its measured step times (µs).

    run_ranges: each side's runs' step times, (lowest, highest) µs; origins: where each side's windows came from. A
    side's windows whose unprofiled step was not typical of the runs (_untypical: a session's outside its side's range,
    a timed process's more than stats.MAX_CV from the same processes' runs) are named in a note, with the share of
    the runs' change the windows reproduced (the category rows sum to the windows' change, so that share bounds what
    they can explain). excursions: the trials that carried their runs (_excursions) and the runs' change without them,
    µs, said in a note with the share of it the windows' change is."""
    notes = []
    mb, mh = measured
    delta = mh - mb if mb is not None and mh is not None else None
    gaps = None
    if base.wall_us is not None and head.wall_us is not None:
        gaps = (base.wall_us - base.busy_us, head.wall_us - head.busy_us)
        sides = (("base", base, run_ranges[0], origins[0]), ("head", head, run_ranges[1], origins[1]))
        outside = [(text, origin is not None and origin.timed) for side, fig, rng, origin in sides
                   for text in [_untypical(side, fig, rng, origin)] if text]
        if outside and delta:
            rest = []
            if any(not timed for _, timed in outside):
                rest.append("the spread between processes (a host-bound step moves from process to process), not a "
                            "missing row. `bench profile --processes 3` of that side's matrix profiles new processes, "
                            "and the latest invocation's windows are the ones read; `bench run --profile-window` "
                            "profiles the timed processes themselves")
            if any(timed for _, timed in outside):
                rest.append("what the windows did not reproduce of their own processes' step (a few decode steps of "
                            "the first batch, after the trials), not a missing row")
            notes.append(f"the profiled processes were not typical of the runs: {'; '.join(t for t, _ in outside)}. "
                         f"The windows' change is {100 * (head.wall_us - base.wall_us) / delta:.0f} % of the runs', and "
                         f"the category rows sum to the windows' change; the rest is {'; and '.join(rest)}")
        carried, without = excursions
        if carried and delta:
            rest = (f" Without those trials the runs' change is {_signed(without)} µs, of which the windows' change is "
                    f"{100 * (head.wall_us - base.wall_us) / without:.0f} %." if without else "")
            notes.append(f"runs carried by a trial or two: {'; '.join(carried)}. A run's figure is the mean of its trials; "
                         f"its window, a few decode steps timed after them, is another moment of its process.{rest}")
        ob, oh = origins
        if (delta and ob is not None and oh is not None and ob.timed and oh.timed and ob.runs_step_us and oh.runs_step_us
                and (ob.with_window < ob.runs or oh.with_window < oh.runs) and oh.runs_step_us != ob.runs_step_us):
            like = oh.runs_step_us - ob.runs_step_us  # like with like: the runs whose processes the windows were read from
            notes.append(f"the windows are {ob.with_window} of the base's {ob.runs} runs and {oh.with_window} of the "
                         f"head's {oh.runs}: over those runs the change is {_signed(like)} µs, of which the windows' change "
                         f"is {100 * (head.wall_us - base.wall_us) / like:.0f} % (the shares above divide by all the runs' "
                         "change)")
    else:
        notes.append(f"no {GAPS} row: a side's profile has no unprofiled step time (a compiled `generate` window, or "
                     "a generate window profiled before 2026-12-06: `bench profile` again measures one)")
    if base.per != "decode step":
        notes.append(f"the profiles have no decode-step ranges (a compiled `generate` cell): figures are per {base.per}")
    modules = _rows(base.modules, head.modules, delta, None) if base.modules is not None and head.modules is not None \
        else None
    if modules is None:
        notes.append("no module rows: a side's profile has no module ranges (a compiled step, or ncu): the kernel "
                     "categories say where the time went")
    categories = _rows(base.categories, head.categories, delta, gaps)
    host = None
    if modules is not None and base.host is not None and head.host is not None:
        host = _rows({k: (0.0, v) for k, v in base.host.items()}, {k: (0.0, v) for k, v in head.host.items()}, delta,
                     None)

    def only(a: StepFigures, b: StepFigures) -> list[tuple[str, float, float]]:
        return sorted(((n, k, us) for n, (k, us, _) in a.kernels.items() if n not in b.kernels), key=lambda x: -x[2])

    given = {side: o for side, o in (("base", origins[0]), ("head", origins[1])) if o is not None}
    return Attribution(key, label, verdicts, base, head, mb, mh, modules, categories, only(head, base), only(base, head),
                       notes, host, given or None)


def _untypical(side: str, fig: StepFigures, run_range: tuple[float, float] | None, origin: WindowsFrom | None) -> str:
    """Return how a side's windows were not typical of its runs ('' where they were, or nothing says): like with like,
    the windows of timed processes against the mean step of the same processes' runs, a session's against the lowest
    and highest of the side's runs."""
    # How far timed windows may read from their own processes' runs: pyperf's spread limit, above the 3-5 % a harness
    # window's step reads over its runs' TPOT (bench.execution.profile_window.step_times).
    from bench.results.stats import MAX_CV

    if origin is not None and origin.timed:
        if not origin.runs_step_us:
            return ""
        off = fig.wall_us / origin.runs_step_us - 1
        if abs(off) <= MAX_CV:
            return ""
        return (f"the {side} {_window_name(fig)} {_us(fig.wall_us)} µs lies {100 * abs(off):.0f} % "
                f"{'below' if off < 0 else 'above'} the same {origin.with_window} process(es)' runs' "
                f"{_us(origin.runs_step_us)} µs")
    if run_range is None or run_range[0] <= fig.wall_us <= run_range[1]:
        return ""
    return (f"the {side} {_window_name(fig)} {_us(fig.wall_us)} µs lies "
            f"{'below' if fig.wall_us < run_range[0] else 'above'} its runs' {_us(run_range[0])}-{_us(run_range[1])} µs")


def _windows_text(a: Attribution) -> str:
    """Return where the sides' windows came from, for the Profiles line: session processes, or the timed processes of
    the runs compared (how many of the side's runs have one)."""
    origins = a.origins or {}
    if not any(o.timed for o in origins.values()):
        return (f", from {a.base.windows} and {a.head.windows} session processes (their mean)"
                if a.base.windows > 1 or a.head.windows > 1 else "")

    def one(side: str, fig: StepFigures) -> str:
        o = origins.get(side)
        if o is not None and o.timed:
            cost = ""
            if o.cost_s:
                lo, hi = o.cost_s
                cost = f", {lo:.1f} s a window" if round(lo, 1) == round(hi, 1) else f", {lo:.1f}-{hi:.1f} s a window"
            return f"{side}: {o.with_window} of its {o.runs} runs{cost}"
        return f"{side}: {fig.windows} session process{'es' if fig.windows > 1 else ''}"

    return (f", from {TIMED_PROCESSES} where a side has them, windows profiled after the trials of the very runs "
            f"compared ({one('base', a.base)}; {one('head', a.head)}; their mean)")


def _window_name(fig: StepFigures) -> str:
    """Return what a side's step is: one window's, or the mean of several processes' windows."""
    return "window's" if fig.windows == 1 else f"{fig.windows} windows' mean"


def _window_spread(fig: StepFigures) -> str:
    """Return ' (N processes' windows: lowest-highest µs)' for averaged windows that all measured a step, else ''."""
    walls = [w for w in fig.window_walls if w is not None]
    if fig.windows == 1 or len(walls) != fig.windows:
        return ""
    return f" ({fig.windows} processes' windows: {_us(min(walls))}-{_us(max(walls))} µs)"


def _run_range_us(comparison, key: str, side: str) -> tuple[float, float] | None:
    """Return a side's lowest and highest run step time in µs (each run the mean of its trials), or None: fewer than
    two runs, or a run whose value is not a finite positive number (a store is untrusted input: no range from it)."""
    runs = [sum(v) / len(v) * 1e3 for v in getattr(comparison, side).cells[key].values(STEP_METRIC) if v]
    if len(runs) < 2 or not all(math.isfinite(r) and r > 0 for r in runs):
        return None
    return min(runs), max(runs)


def _measured_us(comparison, key: str, side: str) -> float | None:
    """Return a side's measured step time in µs: the TPOT the comparison's row shows, else the mean of its runs."""
    for r in comparison.rows:
        if getattr(r, "key", None) == key and r.metric == STEP_METRIC:
            value = r.base_value if side == "base" else r.head_value
            if value is not None:
                return value * 1e3
    runs = [sum(v) / len(v) for v in getattr(comparison, side).cells[key].values(STEP_METRIC) if v]
    return sum(runs) / len(runs) * 1e3 if runs else None


def _excursions(comparison, key: str, side: str) -> tuple[list[str], float | None]:
    """Return (each trial of a side that carried its run: more than EXCURSION times the median of the same process's
    other trials, said; the side's step in µs without those trials: the geometric mean of its runs' means, as the
    comparison's t-test takes them), or ([], None) where no run has 3 trials or a value is not a finite positive
    number (a store is untrusted input)."""
    import statistics

    runs = [v for v in getattr(comparison, side).cells[key].values(STEP_METRIC) if v]
    if not runs or not all(math.isfinite(x) and x > 0 for v in runs for x in v) or max(map(len, runs)) < 3:
        return [], None
    said, means = [], []
    for i, trials in enumerate(runs):
        out = [j for j, x in enumerate(trials) if len(trials) >= 3
               and x > EXCURSION * statistics.median(trials[:j] + trials[j + 1:])]
        kept = [x for j, x in enumerate(trials) if j not in out]
        if out and kept:  # one phrase a run, every trial of it that stood out named (two in one run: "two of its 4")
            read = " and ".join(f"{trials[j]:.2f}" for j in out)
            count = {1: "one", 2: "two"}.get(len(out), str(len(out)))
            said.append(f"the {side}'s run {i + 1} of {len(runs)} read {read} ms in {count} of its {len(trials)} "
                        f"trials, its others {min(kept):.2f}-{max(kept):.2f} ms")
        means.append(sum(kept) / len(kept) if kept else sum(trials) / len(trials))
    return said, math.exp(sum(map(math.log, means)) / len(means)) * 1e3


def judged_verdict(row, withheld: str = "") -> str | None:
    """Return the verdict a row is attributed for: regressed or improved, also where it was withheld because the two
    sides ran different tuned kernels (its verdict `withheld`, its note "(was: regressed)"); else None."""
    import re

    from bench.results import stats

    if row.verdict in (stats.REGRESSED, stats.IMPROVED):
        return row.verdict
    was = re.search(r"\(was: (\w+)\)", row.note or "") if withheld and row.verdict == withheld else None
    return f"{withheld} (was: {was.group(1)})" if was and was.group(1) in (stats.REGRESSED, stats.IMPROVED) else None


def explain(comparison, base_paths, head_paths, profiles: tuple | None = None, withheld: str = "") -> Explanation:
    """Return the Explanation of a Comparison (bench.results.compare): every cell with a regressed or improved
    metric (or one withheld as `withheld`, kernels that differ), attributed from its sides' stored profiles
    (`profiles`: (base store, head store), else each side's profile store by its conventional path), or listed
    as missing a profile."""
    from bench.results import query

    out = Explanation()
    judged: dict[str, tuple[str, list[str]]] = {}
    for r in comparison.rows:
        verdict = judged_verdict(r, withheld)
        if verdict and getattr(r, "key", ""):
            label, verdicts = judged.setdefault(r.key, (r.label, []))
            verdicts.append(f"{verdict}: {r.metric}")
    if not judged:
        return out
    sides = {}
    for side, paths, given in (("base", base_paths, profiles[0] if profiles else None),
                               ("head", head_paths, profiles[1] if profiles else None)):
        cells = getattr(comparison, side).cells
        matrices = {cells[k].context.matrix for k in judged}
        stores = profile_stores(query.expand_stores(paths if isinstance(paths, (list, tuple)) else [paths]),
                                matrices, given)
        out.profile_stores[side] = stores
        records = [(rec, store) for store in stores for rec in query.profiles(query.load([store]))]
        sides[side] = records
    for key, (label, verdicts) in judged.items():
        figures, chosen, origins = {}, {}, {}
        for side in ("base", "head"):
            runs = getattr(comparison, side).cells[key]
            commits = tuple(sorted(getattr(comparison, side).commits))
            recs = [r for r, _ in sides[side]]
            chosen[side], origins[side] = side_windows(recs, runs, commits, STEP_METRIC)
            if not chosen[side]:
                where = ", ".join(map(str, out.profile_stores[side])) or "no profile store found"
                out.missing.append(Missing(key, label, side, runs.cell, runs.context.matrix, commits,
                                           f"no ok profile of this cell in {where}",
                                           any("regressed" in v for v in verdicts)))
        if any(not chosen[s] for s in ("base", "head")):
            continue
        tools = [t for t in TOOL_ORDER if t in chosen["base"] and t in chosen["head"]]
        if not tools:
            out.notes.append(f"{label}: the two sides were profiled with different tools ({sorted(chosen['base'])} vs "
                             f"{sorted(chosen['head'])}): profile both with one (`bench profile --tool ...`)")
            continue
        pair = {s: chosen[s][tools[0]] for s in ("base", "head")}
        if {(p.cell_id, p.context.run_id, p.ended_at) for p in pair["base"]} == \
                {(p.cell_id, p.context.run_id, p.ended_at) for p in pair["head"]}:
            out.notes.append(f"{label}: both sides are one cell with one profile: a profile of this checkout cannot tell "
                             "two commits apart; profile each side in a checkout of its own commit and pass --profiles")
            continue
        try:
            for s in ("base", "head"):
                windows = []
                for rec in pair[s]:
                    store = next(st for r, st in sides[s] if r is rec)
                    path = table_file(rec.kernel_table, store)
                    if path is None:
                        raise BenchInputError(f"the {s} side's kernel table {rec.kernel_table!r} is not under its "
                                              f"profile store's folder {store.resolve().parent}: copy the profiles/ "
                                              "folder with it")
                    try:
                        table = json.loads(path.read_text())
                    except (OSError, ValueError) as exc:
                        raise BenchInputError(f"cannot read kernel table {path}: {exc}") from exc
                    windows.append(step_figures(table, rec.profile, tools[0], str(path)))
                figures[s] = mean_figures(windows)
        except (BenchInputError, KeyError, TypeError, ValueError) as exc:
            out.notes.append(f"{label}: not attributed: {exc}")
            continue
        if figures["base"].unit != figures["head"].unit or figures["base"].per != figures["head"].per:
            out.notes.append(f"{label}: the sides' profiles count different things ({figures['base'].unit} per "
                             f"{figures['base'].per} vs {figures['head'].unit} per {figures['head'].per}): not attributed")
            continue
        measured = (_measured_us(comparison, key, "base"), _measured_us(comparison, key, "head"))
        ranges = (_run_range_us(comparison, key, "base"), _run_range_us(comparison, key, "head"))
        carried = {s: _excursions(comparison, key, s) for s in ("base", "head")}
        without = (carried["head"][1] - carried["base"][1]) if carried["head"][1] and carried["base"][1] else None
        out.attributions.append(attribute(key, label, verdicts, figures["base"], figures["head"], measured, ranges,
                                          (origins["base"], origins["head"]),
                                          (carried["base"][0] + carried["head"][0], without)))
    return out


def to_dict(e: Explanation) -> dict:
    """Return the Explanation as plain data (`bench compare --json`): per attributed cell its measured change, first
    row, share explained and ranked rows; the sides without a profile; the notes."""
    def rows(rs: list[Row] | None) -> list[dict] | None:
        return None if rs is None else [{"name": r.name, "base_us": r.base_us, "head_us": r.head_us, "delta_us": r.delta_us,
                                         "base_kernels": r.base_kernels, "head_kernels": r.head_kernels,
                                         "share": r.share} for r in rs]

    cells = []
    for a in e.attributions:
        first, table = a.first_of
        cells.append({
            "label": a.label, "verdicts": a.verdicts, "tool": a.base.tool, "unit": a.base.unit, "per": a.base.per,
            "measured_base_us": a.measured_base_us, "measured_head_us": a.measured_head_us,
            "measured_delta_us": a.measured_delta_us, "explained_share": a.explained_share,
            "profile_step_us": {"base": a.base.wall_us, "head": a.head.wall_us},
            "first": None if first is None else {"name": first.name, "delta_us": first.delta_us, "share": first.share,
                                                 "table": table},
            "first_category": None if not a.categories else a.categories[0].name,
            "unexplained_us": a.unexplained_us(a.categories),
            "modules": rows(a.modules), "categories": rows(a.categories), "host": rows(a.host),
            "added": [list(k) for k in a.added], "removed": [list(k) for k in a.removed], "notes": a.notes,
            "profiles": {"base": a.base.source, "head": a.head.source},
            "windows": {side: {**((a.origins or {})[side].to_dict() if side in (a.origins or {}) else {}),
                               "processes": f.windows, "step_us": list(f.window_walls) or [f.wall_us],
                               "files": list(f.sources) or [f.source]} for side, f in (("base", a.base), ("head", a.head))}})
    return {"attributions": cells, "missing": [{"label": m.label, "side": m.side, "reason": m.reason} for m in e.missing],
            "notes": e.notes, "profile_stores": {k: [str(p) for p in v] for k, v in e.profile_stores.items()}}


# ---- rendering -------------------------------------------------------------------------------

def _us(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "") + _us(x)


def _count(x: float) -> str:
    return f"{x:.1f}" if x != int(x) else f"{x:.0f}"


def _table(heading: str, rows: list[Row], unexplained: float | None, delta: float | None,
           kernels_too: bool = True) -> list[str]:
    out = [f"| {heading} | µs per step: base | head | change | kernels per step: base | head | change | share of the "
           "change |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = "" if r.share is None else f"{100 * r.share:.0f} %"
        kernels = ("", "", "") if r.name == GAPS or not kernels_too else (_count(r.base_kernels), _count(r.head_kernels),
                                                       ("+" if r.delta_kernels >= 0 else "") + _count(r.delta_kernels))
        out.append(f"| {r.name} | {_us(r.base_us)} | {_us(r.head_us)} | {_signed(r.delta_us)} | {kernels[0]} | "
                   f"{kernels[1]} | {kernels[2]} | {share} |")
    if unexplained is not None:
        share = f"{100 * unexplained / delta:.0f} %" if delta else ""
        out.append(f"| *unexplained* (measured change less the rows) | | | {_signed(unexplained)} | | | | {share} |")
    return out


def attribution_markdown(a: Attribution) -> str:
    """Return one cell's attribution as Markdown: the step-time change, the first row, the two ranked tables, the
    kernels that ran on one side only."""
    unit = "kernels" if a.base.unit == "gpu_kernel" else "aten operators (CPU time)"
    lines = [f"#### {a.label}: {'; '.join(a.verdicts)}", ""]
    d = a.measured_delta_us
    if d is not None:
        lines.append(f"Step time (measured TPOT of the runs, as compared above): base {_us(a.measured_base_us)} µs → "
                     f"head {_us(a.measured_head_us)} µs: {_signed(d)} µs ({100 * d / a.measured_base_us:+.1f} %).")
    else:
        lines.append("No measured step time (TPOT) on both sides: the rows are not shares of a measured change.")
    def files(fig: StepFigures) -> str:
        return f"`{fig.source}`" + (f" and {fig.windows - 1} more (one per process)" if fig.windows > 1 else "")

    lines.append(f"Profiles ({a.base.tool}, {unit} per {a.base.per}, {a.base.steps} and {a.head.steps} of them"
                 f"{_windows_text(a)}): base {files(a.base)}, head {files(a.head)}.")
    if a.base.wall_us is not None and a.head.wall_us is not None:
        # the rows sum to this change; where it is far from the runs' change, the window did not reproduce the runs
        lines.append(f"The profile windows' own unprofiled step: {_us(a.base.wall_us)}{_window_spread(a.base)} → "
                     f"{_us(a.head.wall_us)}{_window_spread(a.head)} µs ({_signed(a.head.wall_us - a.base.wall_us)} µs).")
    (first, table), share = a.first_of, a.explained_share
    if first is not None:
        lines.append("")
        lines.append(f"**First row: {first.name}{' (host time in the range)' if table == 'host time' else ''}, "
                     f"{_signed(first.delta_us)} µs per step"
                     + (f", {100 * first.share:.0f} % of the change" if first.share is not None else "")
                     + (f"; the category rows explain {100 * share:.0f} %" if share is not None else "") + ".**")
    if a.modules is not None:
        lines += ["", *_table("module range", a.modules, a.unexplained_us(a.modules), d)]
    lines += ["", *_table("kernel category", a.categories, a.unexplained_us(a.categories), d)]
    if a.host is not None:
        lines += ["", f"Host time per decode step inside each module range (its own, its module children's left out), "
                  f"in the profiled window: where the GPU waits for the host ({GAPS}), the range whose host time "
                  "moved is the cause. The profiler's overhead lengthens every range: compare the changes, not the "
                  "levels.", "", *_table("module range (host time)", a.host, None, d, kernels_too=False)]
    for what, kernels in (("head side only (added)", a.added), ("base side only (removed)", a.removed)):
        if kernels:
            shown = ", ".join(f"`{n[:80]}` ({_count(k)} per step, {_us(us)} µs)" for n, k, us in kernels[:TOP_KERNELS])
            more = f" and {len(kernels) - TOP_KERNELS} more" if len(kernels) > TOP_KERNELS else ""
            lines += ["", f"Kernels on the {what}: {shown}{more}."]
    lines += [""] + [f"- {n}" for n in a.notes]
    return "\n".join(lines) + "\n"


def to_markdown(e: Explanation, profile_hint: str = "") -> str:
    """Return the comparison's attribution section ("" when no cell was judged regressed or improved)."""
    if not e.attributions and not e.missing and not e.notes:
        return ""
    lines = ["### Where the time went", "",
             "Per decode step, from the stored profiles of each regressed or improved cell (the windows its runs' own "
             "processes profiled, `bench run --profile-window`, else `bench profile`'s): the "
             "change per module range and per kernel category, ranked, each row's share of the measured step-time "
             "change, and what is left unexplained.", ""]
    for a in e.attributions:
        lines.append(attribution_markdown(a))
    if e.missing:
        lines.append("No profile, so no attribution, for: " + "; ".join(
            f"{m.label} ({m.side} side: {m.reason})" for m in e.missing) + "."
            + (f" {profile_hint}" if profile_hint else " `bench compare --profile` profiles them."))
        lines.append("")
    lines += [f"- {n}" for n in e.notes]
    return "\n".join(lines).rstrip() + "\n"
