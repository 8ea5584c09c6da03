"""Regression verdicts between two result stores (or two commits in one store).

Cells are matched by cell_id (optionally ignoring named options, e.g. to compare a fake
backend's `slowdown=1.1` against `1.0`). Each side holds one run context per cell (its latest,
or with --pool every compatible one: bench.results.query). For every matched cell and metric,
each run (a fresh worker process) gives one sample, the mean of its trials: trials inside one
process share its warm-up, compiled kernels and allocator state, so they cannot make a
difference look significant. The runs of each side give a ratio head/base with a confidence
interval (bench.results.stats.ratio_test) or an exact Mann-Whitney p-value, and a verdict that needs
both significance and a minimum factor; with fewer than two runs on a side the row is
inconclusive and says to use --runs. A cell that ran on the base side but failed
(oom/error/timeout) on the head side is a regression too. A cell whose two sides ran different
tuned kernels (their records' tuned digests differ) gets no regression or improvement verdict:
its change is labelled `kernels differ` with the digests, since two tunings of one code differ
by up to 1.4x on the H200 (docs/guide/hf-backend.md, "Engines as artifacts"); load one artifact on both
sides to judge the code.

Bad input is refused before any statistics: unknown metrics, a commit not in the store, no
cells in common, environments that differ on a comparability key (GPU, driver, library
versions) unless explicitly allowed. `compare_report` makes the comparison, its Markdown and the attribution of
its judged cells (bench.results.attribution); `bench compare`'s driver is bench.study.compare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError, choices
from bench.machine.environment import COMPARABILITY_KEYS
from bench.metrics import DIRECTION
from bench.results import paired, query, stats
from bench.results.records import HOST_PROBE, distinct_labels
from bench.spec.cells import identity_options, short_hash

DEFAULT_METRICS = (
    "output_throughput", "request_throughput", "ttft_median_ms", "tpot_median_ms", "e2el_median_ms",
    "e2el_p99_ms", "peak_memory_gb",
)
TESTS = ("t", "mannwhitney")
# A change between two sides that ran different tuned kernels: a difference of tunings, not of code.
KERNELS_DIFFER = "kernels differ"
# Rows without a verdict, by why: the comparison exits NOT_JUDGED_EXIT when some are and no row regressed.
NOT_JUDGED = {KERNELS_DIFFER: "kernels differ", stats.INCONCLUSIVE: "inconclusive", "missing": "missing on one side"}
NOT_JUDGED_EXIT = 4


@dataclass
class Side:
    """The records of one side, grouped by match key."""

    name: str  # store path plus commit filter, for messages
    cells: dict[str, query.CellRuns] = field(default_factory=dict)  # match key -> the cell's chosen records
    environments: list[dict] = field(default_factory=list)
    commits: set[str] = field(default_factory=set)
    history: int = 0  # earlier run contexts left out (no --pool)


@dataclass
class Row:
    """One (cell, metric) comparison."""

    label: str
    metric: str
    verdict: str
    base: stats.Summary | None = None
    head: stats.Summary | None = None
    ratio: float | None = None  # head / base
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    note: str = ""
    # The figure of each side the change is computed from (change = head_value / base_value - 1),
    # its name and each run's value: a row never shows one statistic and computes from another.
    statistic: str = ""
    base_value: float | None = None
    head_value: float | None = None
    base_runs: tuple[float, ...] = ()
    head_runs: tuple[float, ...] = ()
    key: str = ""  # the matched cell's key in both sides' `cells` (bench.results.attribution joins its profiles by it)
    unstable: tuple[str, ...] = ()  # the sides ("base", "head") whose runs spread over the stability limit
    paired: bool = False  # judged round by round (bench.results.paired): base_runs[k] and head_runs[k] took turns
    # a row not significant whose runs could not have detected the change looked for: the smallest change they detect
    # (0.36: above 36 %, at 80 % power), so "no regression" is never read as "none of that size"
    detects_only: float | None = None


@dataclass
class Comparison:
    rows: list[Row]
    warnings: list[str]
    base: Side
    head: Side
    factor: float
    confidence: float
    test: str
    env_differences: dict[str, tuple[list[str], list[str]]]
    attribution: object = None  # bench.results.attribution.Explanation: where the judged cells' time went

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == stats.REGRESSED]

    @property
    def not_judged(self) -> dict[str, int]:
        """Return {why: rows} of the rows given no verdict (kernels differ, inconclusive, missing on one side)."""
        out: dict[str, int] = {}
        for r in self.rows:
            if r.verdict in NOT_JUDGED:
                out[NOT_JUDGED[r.verdict]] = out.get(NOT_JUDGED[r.verdict], 0) + 1
        return out

    @property
    def exit_status(self) -> int:
        """Return the CLI's exit status: 1 when any row regressed; else 4 (NOT_JUDGED_EXIT) when some rows were given
        no verdict, since a withheld verdict must not pass a gate; else 0."""
        if self.regressions:
            return 1
        return NOT_JUDGED_EXIT if self.not_judged else 0

    def headline(self) -> str:
        """Return the comparison in a line: 'no regression in 12 judged rows (0 improvement(s)); 2 rows not judged
        (2 kernels differ)', saying how many judged rows were not significant with too little power to see the change
        looked for."""
        not_judged = self.not_judged
        judged = len(self.rows) - sum(not_judged.values())
        n_reg, n_imp = len(self.regressions), sum(r.verdict == stats.IMPROVED for r in self.rows)
        text = (f"{n_reg} regression(s), {n_imp} improvement(s) in {_rows(judged, 'judged ')}" if n_reg else
                f"no regression in {_rows(judged, 'judged ')} ({n_imp} improvement(s))" if judged else
                "no verdict: 0 judged rows")
        weak = [r.detects_only for r in self.rows if r.verdict == stats.NOT_SIGNIFICANT and r.detects_only]
        if weak and not n_reg:  # "no regression" from runs that could not have seen one of the size looked for
            lo, hi = f"{100 * min(weak):.0f}", f"{100 * max(weak):.0f}"
            text += (f", {len(weak)} of them not significant with too few runs to detect a {self.factor:.0%} change "
                     f"(they detect only changes above {hi if lo == hi else f'{lo}-{hi}'}%)")
        if not_judged:
            text += (f"; {_rows(sum(not_judged.values()))} not judged ("
                     + ", ".join(f"{n} {why}" for why, n in not_judged.items()) + ")")
        if self.env_differences:
            text += "; judged across environments that differ (--allow-env-mismatch)"
        return text


def _rows(n: int, what: str = "") -> str:
    return f"{n} {what}row" + ("" if n == 1 else "s")


def match_key(cell: dict, ignore_options: Sequence[str] = (), cap: float | None = None) -> str:
    """Return the key cells are matched on: the cell's identity (as cell_id hashes it) without the ignored options.

    Options declared keeps_ids_at_default are left out at their default, as in cell_id, so a record stored before such an
    option existed matches one stored after it.
    """
    options = identity_options(cell.get("backend"), cell.get("options") or {})
    options = {k: v for k, v in options.items() if k not in ignore_options}
    return short_hash({**cell, "options": options, "__gpu_memory_gb": cap})


def load_side(path, commit: str | None = None, ignore_options: Sequence[str] = (), pool: bool = False,
              metrics: Sequence[str] | None = None, columnar: bool | None = None, only: dict | None = None,
              only_flag: str = "--only") -> Side:
    """Return one side's chosen records per cell; BenchInputError if the store or the commit is not there.

    path: a store, a folder of stores or a glob (or a list of them). Large stores are read as columns
    (bench.results.query.table; columnar forces either way): the chosen records then carry the cell,
    context, environment and `metrics` (all numeric ones when None), not samples.
    """
    given = list(path) if isinstance(path, (list, tuple)) else [path]
    paths = query.expand_stores(given)
    name = ", ".join(str(p) for p in given)
    table = query.table(paths) if query.prefer_table(paths, columnar) else None
    if table is not None:
        selection = _table_side(table, name, commit, pool)
    else:
        records = query.measurements(query.load(paths))  # refuses a missing store, a folder and a newer schema
        if not records:
            raise BenchInputError(f"result store {name!r} holds no measurements: run `bench run --store {name}` first")
        if commit:
            _check_commit(commit, name, sorted({str(r.context.commit) for r in records}))
            records = query.with_commit(records, commit)
        selection = query.select(records, pool=pool)
    if commit:
        name += f"@{commit[:12]}"
    side = Side(name, history=len(selection.history))
    rows = selection.cell_runs(metrics) if isinstance(selection, query.TableSelection) else selection.rows
    for row in paired.select_rows(list(rows), only, only_flag, name):  # --base-only / --head-only
        key = match_key(row.cell, ignore_options, row.gpu_memory_gb) if ignore_options else f"{row.cell_id}@{row.gpu_memory_gb}"
        if key in side.cells:
            raise BenchInputError(
                f"--ignore-option {','.join(ignore_options)} merges two different cells of {name!r} "
                f"({row.label}): ignore only options that differ between the two sides, not within one"
            )
        side.cells[key] = row
        for rec in row.ok_records:
            side.environments.append(rec.environment)
        for ctx in row.contexts:
            if ctx.commit:
                side.commits.add(ctx.commit[:12] + ("+dirty" if ctx.dirty else ""))
    return side


def _check_commit(commit: str, name: str, present: list[str] | None) -> None:
    """Refuse a commit prefix that is too short, or (present given) one no record was measured at."""
    if len(commit) < 4:
        raise BenchInputError(f"commit {commit!r} is too short: give at least 4 hex digits")
    if present is not None and not any(c.startswith(commit) for c in present):
        raise BenchInputError(
            f"no record in {name!r} was measured at commit {commit!r}; commits in that store: "
            + ", ".join(c[:12] for c in present)
        )


def _table_side(table, name: str, commit: str | None, pool: bool) -> query.TableSelection:
    keys = table.keys
    runs = table.indices("measurement")
    if not runs:
        raise BenchInputError(f"result store {name!r} holds no measurements: run `bench run --store {name}` first")
    if commit:
        commits = keys.commit.to_numpy()[runs]
        _check_commit(commit, name, sorted({str(c) for c in commits}))
        runs = [i for i, c in zip(runs, commits, strict=True) if str(c or "").startswith(commit)]
    return query.select_table(table, runs, pool=pool)


def environment_differences(base: Side, head: Side) -> dict[str, tuple[list[str], list[str]]]:
    """Return {key: (base values, head values)} for comparability keys whose values differ."""
    out = {}
    for key in COMPARABILITY_KEYS:
        b = sorted({str(e.get(key)) for e in base.environments})
        h = sorted({str(e.get(key)) for e in head.environments})
        if b != h:
            out[key] = (b, h)
    return out


def _values(row: query.CellRuns, metric: str) -> list[float]:
    """Return one value per run (fresh worker process): the mean of its trials."""
    return [sum(v) / len(v) for v in row.values(metric)]


def compare_metric(label: str, metric: str, base_values: list[float], head_values: list[float], *,
                   factor: float, confidence: float, test: str) -> Row:
    """Return the Row comparing one metric of one cell (verdict inconclusive when it cannot judge)."""
    direction = DIRECTION[metric]
    if not base_values or not head_values:
        missing = "base" if not base_values else "head"
        return Row(label, metric, "missing", note=f"{metric} is missing on the {missing} side")
    b, h = stats.summarize(base_values, metric), stats.summarize(head_values, metric)
    row = Row(label, metric, stats.INCONCLUSIVE, base=b, head=h, base_runs=tuple(base_values),
              head_runs=tuple(head_values))

    def shown(statistic: str, base_value: float, head_value: float) -> None:
        row.statistic, row.base_value, row.head_value = statistic, base_value, head_value
        row.ratio = head_value / base_value if base_value else None

    notes = []
    if min(len(base_values), len(head_values)) < 2:
        shown("mean", b.mean, h.mean)
        row.note = (f"{len(base_values)} run(s) on the base side and {len(head_values)} on the head side: a verdict "
                    "needs at least 2 runs (fresh processes) a side, because trials inside one process do not show "
                    "the spread between processes; re-run both with --runs 3")
        return row
    if test in ("t", paired.PAIRED):
        try:
            rt = (paired.paired_ratio_test if test == paired.PAIRED else stats.ratio_test)(base_values, head_values,
                                                                                           confidence)
        except ValueError as exc:
            shown("median", b.median, h.median)
            row.note = str(exc)
            return row
        # The t-test's ratio is that of the geometric means of the runs: show those.
        shown("geometric mean", _geomean(base_values), _geomean(head_values))
        row.ratio, row.low, row.high, row.p_value = rt.ratio, rt.low, rt.high, rt.p_value
        significant = rt.significant
    else:
        shown("median", b.median, h.median)
        mw = stats.mann_whitney_u(base_values, head_values)
        row.p_value = mw.p_value
        floor = stats.mann_whitney_min_p(len(base_values), len(head_values))
        if floor >= 1.0 - confidence:
            row.note = (f"Mann-Whitney with {b.n} vs {h.n} runs cannot reach p < {1 - confidence:g} "
                        f"(smallest possible p is {floor:.3g}): use more runs or --test t")
            return row
        significant = mw.p_value < 1.0 - confidence
        if row.ratio is None:
            row.note = "base median is 0: no ratio"
            return row
    row.verdict = stats.verdict(significant, row.ratio, direction, factor)
    if test == paired.PAIRED:
        row.paired = True
        notes.append(f"paired: the two cells took turns in one invocation, so each of the {len(base_values)} rounds' "
                     "ratio is judged (a drift both sides shared cancels).")
    if not significant:
        power, row.detects_only = (paired.paired_power_note if test == paired.PAIRED else stats.power_note)(
            base_values, head_values, factor, confidence)
        notes.extend(power)
    spread = {side: [w for w in summary.warnings if "trial(s)" not in w] for side, summary in (("base", b), ("head", h))}
    row.unstable = tuple(side for side, warnings in spread.items() if warnings)
    if row.unstable:
        notes.append("unstable on the " + "; ".join(f"{side} side: " + w.replace("trial", "run")
                                                   for side, warnings in spread.items() for w in warnings))
    row.note = " ".join(notes)
    return row


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def compare_stores(
    base_path: str | Path,
    head_path: str | Path,
    *,
    base_commit: str | None = None,
    head_commit: str | None = None,
    metrics: Sequence[str] | None = None,
    factor: float = 0.05,
    confidence: float = 0.99,
    test: str = "t",
    ignore_options: Sequence[str] = (),
    allow_env_mismatch: bool = False,
    pool: bool = False,
    columnar: bool | None = None,
    base_only: dict | None = None,
    head_only: dict | None = None,
) -> Comparison:
    """Return the Comparison of two stores' common cells; BenchInputError on bad input."""
    explicit = metrics is not None
    metrics = list(metrics) if explicit else list(DEFAULT_METRICS)
    unknown = [m for m in metrics if m not in DIRECTION]
    if unknown:
        raise BenchInputError(f"unknown metric {unknown[0]!r}: metrics with a known direction are {choices(DIRECTION)}")
    if not 0.0 < factor < 1.0:
        raise BenchInputError(f"--factor must be between 0 and 1 (0.05 = 5%), got {factor}")
    if not 0.5 <= confidence < 1.0:
        raise BenchInputError(f"--confidence must be in [0.5, 1), e.g. 0.99, got {confidence}")
    if test not in TESTS:
        raise BenchInputError(f"unknown --test {test!r}; valid tests are {choices(TESTS)}")

    # what --base-only and --head-only choose differently is what is compared: cells match without it
    ignore_options = list(ignore_options) + [k for k, v in (base_only or {}).items()
                                             if k in (head_only or {}) and head_only[k] != v and k not in ignore_options]
    base = load_side(base_path, base_commit, ignore_options, pool, metrics, columnar, base_only, "--base-only")
    head = load_side(head_path, head_commit, ignore_options, pool, metrics, columnar, head_only, "--head-only")
    known = {k for side in (base, head) for row in side.cells.values() for k in (row.cell.get("options") or {})}
    unknown_ignored = sorted(set(ignore_options) - known)
    if unknown_ignored:
        raise BenchInputError(f"--ignore-option {unknown_ignored[0]!r} is not an option of any cell in these stores: "
                              f"valid option names are {choices(known) if known else 'none (the cells have no options)'}")
    warnings: list[str] = []
    for side, where in ((base, "base"), (head, "head")):
        if side.history:
            warnings.append(f"the {where} side ({side.name}) also holds {side.history} earlier run(s) of its cells: "
                            "each cell is compared by its latest run; --pool pools compatible runs, "
                            "--base-commit/--head-commit choose runs by commit")
    common = [k for k in base.cells if k in head.cells]
    if not common:
        raise BenchInputError(
            f"no cells in common between {base.name} ({len(base.cells)} cells) and {head.name} "
            f"({len(head.cells)} cells): cells match by cell_id, which hashes the whole cell (model, precision, "
            "batch size, workload, every option); run the same matrix on both sides, or name options that "
            "are meant to differ with --ignore-option"
        )
    labels = distinct_labels({**{k: c.latest for k, c in base.cells.items()}, **{k: c.latest for k, c in head.cells.items()}})
    for side, other, where in ((base, head, "base"), (head, base, "head")):
        only = [labels[k] for k in side.cells if k not in other.cells]
        if only:
            warnings.append(f"{len(only)} cell(s) only on the {where} side, not compared: " + ", ".join(sorted(only)[:8])
                            + (" ..." if len(only) > 8 else ""))

    # A side without an ok record has no environment to compare (its workers may have failed before describing
    # themselves): its cells are compared by status, and the environment check needs both sides.
    failed_only = [(where, side) for side, where in ((base, "base"), (head, "head")) if not side.environments]
    for where, side in failed_only:
        statuses = sorted({row.status for row in side.cells.values()})
        warnings.append(f"the {where} side ({side.name}) holds only failures ({', '.join(statuses)}): its cells are "
                        "compared by status, and the environments were not compared")
    env_diff = {} if failed_only else environment_differences(base, head)
    if env_diff:
        text = "; ".join(f"{k}: {', '.join(b)} vs {', '.join(h)}" for k, (b, h) in env_diff.items())
        if not allow_env_mismatch:
            raise BenchInputError(
                f"the two sides ran in different environments ({text}): their timings are not comparable. "
                "Re-run both on one machine, or pass --allow-env-mismatch to compare anyway"
            )
        warnings.append(f"environments differ ({text}): differences may come from the environment, not the code")

    if explicit:
        for m in metrics:
            for side in (base, head):
                if not any(_values(side.cells[k], m) for k in common):
                    raise BenchInputError(f"metric {m!r} is not in any ok record of {side.name}: choose from the "
                                          "metrics it has, e.g. output_throughput, e2el_median_ms")

    rows: list[Row] = []
    for key in common:
        b, h = base.cells[key], head.cells[key]
        label = labels[key]
        if not b.ok_records or not h.ok_records:
            rows.append(_status_row(label, b, h))
            continue
        kernels = kernels_note(b.tuned_digests, h.tuned_digests)
        rounds, unpaired = paired.paired_runs(b, h) if test == "t" else ([], None)
        if unpaired:
            warnings.append(f"{label}: compared as two independent samples: {unpaired}")
        for m in metrics:
            bv, hv = paired.paired_values(b, h, rounds, m) if rounds else (_values(b, m), _values(h, m))
            if not bv and not hv:
                continue  # not measured on this device (e.g. GPU memory on a CPU run)
            row = compare_metric(label, m, bv, hv, factor=factor, confidence=confidence,
                                 test=paired.PAIRED if rounds else test)
            row.key = key
            host = host_note(b, h, row.unstable, m)
            if rounds and row.detects_only is not None:  # paired rounds too spread to see the change: is it the host?
                host = " ".join(x for x in (host, paired.paired_host_note(b, h, rounds, m, DIRECTION[m])) if x)
            if host:
                row.note += " " + host
            if row.verdict == "missing":
                warnings.append(f"{label}: {row.note}")
            elif kernels and row.verdict in (stats.REGRESSED, stats.IMPROVED):
                row.note = f"{kernels} (was: {row.verdict}) " + row.note
                row.verdict = KERNELS_DIFFER
            rows.append(row)
    judged = [r for r in rows if r.verdict not in (stats.INCONCLUSIVE, "missing")]
    if not judged:  # the table is still shown, marked inconclusive; exit_status says not judged (4)
        reasons = sorted({r.note for r in rows if r.note})
        warnings.append("no metric could be judged, so there is no verdict: " + "; ".join(reasons[:3]))
    inconclusive = [r for r in rows if r.verdict == stats.INCONCLUSIVE]
    if inconclusive:
        warnings.append(f"{len(inconclusive)} comparison(s) inconclusive (see notes): not judged, not passed")
    return Comparison(rows, warnings, base, head, factor, confidence, test, env_diff)


def host_causes(row: query.CellRuns, metric: str | None = None) -> list[str]:
    """Return what a cell's runs' host probes say (bench.machine.telemetry.spread_causes): the host's speed differed
    between its processes, which its load figures do not show, and with `metric`, whether the runs' figure moved in
    the probes' order; [] when it did not, or is unknown."""
    from bench.machine.telemetry import spread_causes

    runs: dict[tuple, dict[str, list[float]]] = {}
    for r in row.ok_records:
        run = runs.setdefault(r.process_key, {HOST_PROBE: [], "slowness": []})
        probe, figure = r.metric(HOST_PROBE), r.metric(metric) if metric else None
        if probe is not None:
            run[HOST_PROBE].append(probe)
        if figure is not None:
            run["slowness"].append(-DIRECTION[metric] * figure)  # larger is slower, whichever way the metric points
    return spread_causes([{k: sum(v) / len(v) if v else None for k, v in run.items()} for run in runs.values()],
                         stats.rank_correlation)


def host_note(base: query.CellRuns, head: query.CellRuns, sides: tuple[str, ...], metric: str) -> str:
    """Return the host_causes of the unstable `sides` as one note ('' when none has one): a side whose runs agree is
    not explained, whatever its host probes say (a CUDA-graphed step does not move with the host's speed)."""
    out = [f"{where} side {cause}" for where, side in (("base", base), ("head", head)) if where in sides
           for cause in host_causes(side, metric)]
    return ("; ".join(out) + ".") if out else ""


def kernels_note(base: tuple[str, ...], head: tuple[str, ...]) -> str:
    """Return 'kernels differ: tuned c38cec28… vs 0035a36c…' when the two sides ran different tuned kernels, else ''.

    A side without digests (an untuned cell, records from before digests) is not judged."""
    if not base or not head or base == head:
        return ""
    def short(ds):
        return ", ".join(d[:8] + "…" for d in ds)
    return f"kernels differ: tuned {short(base)} vs {short(head)}"


def _status_row(label: str, b: query.CellRuns, h: query.CellRuns) -> Row:
    """Return the Row for a cell that failed on at least one side."""
    bs, hs = b.status, h.status
    if bs == "ok":
        return Row(label, "status", stats.REGRESSED, note=f"ok on base, {hs} on head")
    if hs == "ok":
        return Row(label, "status", stats.IMPROVED, note=f"{bs} on base, ok on head")
    return Row(label, "status", stats.UNCHANGED, note=f"{bs} on both sides")


# ---- rendering -------------------------------------------------------------------------------

_ORDER = {stats.REGRESSED: 0, "missing": 1, KERNELS_DIFFER: 2, stats.INCONCLUSIVE: 2, stats.IMPROVED: 3,
          stats.NOT_SIGNIFICANT: 4, stats.UNCHANGED: 5}
_ICON = {stats.REGRESSED: ":red_circle:", stats.IMPROVED: ":green_circle:", "missing": ":warning:",
         stats.INCONCLUSIVE: ":warning:", KERNELS_DIFFER: ":large_orange_diamond:"}


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    a = abs(x)
    return f"{x:.4g}" if a < 1000 else f"{x:.0f}"


_SHORT = {"geometric mean": "geomean", "median": "median", "mean": "mean"}


def _summary_cell(r: Row, side: str) -> str:
    """Return a side's figure as the change uses it: '193.5 (geomean of 3 runs: 174.9, 166.8, 248.8)'."""
    value, runs = (r.base_value, r.base_runs) if side == "base" else (r.head_value, r.head_runs)
    if value is None:
        s = r.base if side == "base" else r.head
        return "" if s is None else f"{_fmt(s.median)} ± {_fmt(s.mad)} (n={s.n})"
    stat = _SHORT.get(r.statistic, r.statistic)
    if len(runs) == 1:
        return f"{_fmt(value)} (1 run)"
    listed = ": " + ", ".join(_fmt(v) for v in runs) if len(runs) <= 5 else f", CV {_cv(runs):.1%}"
    return f"{_fmt(value)} ({stat} of {len(runs)} runs{listed})"


def _cv(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / abs(mean) if mean else 0.0


def _change(r: Row) -> str:
    if r.ratio is None:
        return ""
    return f"{(r.ratio - 1) * 100:+.1f}%"


def to_markdown(c: Comparison) -> str:
    """Return the comparison as Markdown for a pull-request comment: verdicts first, then details."""
    head = f"## bench compare: {c.headline()}"
    method = ("Student t on log trial values" if c.test == "t" else "exact Mann-Whitney U")
    if any(r.paired for r in c.rows):  # two cells that took turns in one invocation (bench.results.paired)
        method += "; rows noted paired: a paired t on the rounds' log ratios"

    lines = [
        head, "",
        f"base `{c.base.name}` ({', '.join(sorted(c.base.commits)) or 'commit unknown'}) → head `{c.head.name}` "
        f"({', '.join(sorted(c.head.commits)) or 'commit unknown'}).",
        f"A verdict needs significance ({c.confidence:.0%} confidence, {method}) **and** a change of at least "
        f"{c.factor:.0%} in the metric's bad direction. Each run (a fresh worker process) is one sample, the mean "
        "of its trials; base and head show the statistic the change is computed from ("
        + ("the geometric mean of the runs, as the t-test on logs compares them" if c.test == "t" else
           "the median of the runs") + ") and each run's value; change = head / base − 1.", "",
    ]
    ci = f"{c.confidence:.0%} CI"
    header = ["", "verdict", "cell", "metric", "base", "head", "change", ci, "p", "note"]
    notable = [r for r in c.rows if r.verdict not in (stats.NOT_SIGNIFICANT, stats.UNCHANGED)]
    quiet = [r for r in c.rows if r.verdict in (stats.NOT_SIGNIFICANT, stats.UNCHANGED)]

    def table(rows):
        out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        for r in sorted(rows, key=lambda r: (_ORDER.get(r.verdict, 9), r.label, r.metric)):
            cells = [_ICON.get(r.verdict, ""), f"**{r.verdict}**" if r.verdict == stats.REGRESSED else r.verdict,
                     r.label, r.metric, _summary_cell(r, "base"), _summary_cell(r, "head"), _change(r),
                     f"{_fmt(r.low)} – {_fmt(r.high)}" if r.low is not None else "",
                     f"{r.p_value:.2g}" if r.p_value is not None else "", r.note]
            out.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
        return out

    if notable:
        lines += table(notable) + [""]
    if quiet:
        lines += [f"<details><summary>{len(quiet)} comparison(s) without a verdict-worthy change</summary>", ""]
        lines += table(quiet) + ["", "</details>", ""]
    if c.warnings:
        lines += ["**Warnings**", ""] + [f"- {w}" for w in c.warnings] + [""]
    return "\n".join(lines)


def compare_report(base: str, head: str, *, markdown_file: str | None = None, metrics: str | None = None,
                   ignore_options: Sequence[str] = (), profiles: tuple | None = None, profile_hint: str = "",
                   **options) -> tuple[Comparison, str, list[str]]:
    """Return (the Comparison, its Markdown, the stores' own warnings: torn lines, NaN figures), the Markdown also
    written to markdown_file (checked before any work). metrics: 'a,b' (None: DEFAULT_METRICS); ignore_options:
    option keys, each possibly 'k1,k2'; profiles: (base, head) profile stores for the attribution of the judged cells
    (None: each side's by its conventional path; bench.results.attribution), which the Markdown ends with and
    comparison.attribution holds; profile_hint: what the Markdown says to do for a cell without a profile;
    options: compare_stores'."""
    import warnings

    from bench.files import check_output_file, write_atomic
    from bench.results import attribution

    if markdown_file:
        check_output_file(markdown_file, "--markdown")
    chosen = [m.strip() for m in metrics.split(",") if m.strip()] if metrics else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comparison = compare_stores(base, head, metrics=chosen,
                                    ignore_options=[o for opt in ignore_options for o in opt.split(",") if o], **options)
        comparison.attribution = attribution.explain(comparison, base, head, profiles, withheld=KERNELS_DIFFER)
    markdown = to_markdown(comparison) + attribution.to_markdown(comparison.attribution, profile_hint)
    if markdown_file:
        write_atomic(markdown_file, markdown)
    return comparison, markdown, [str(w.message) for w in caught]
