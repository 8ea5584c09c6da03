"""Which records make a row: the one selection rule over typed records, and the rows it makes.

Rules (docs/guide/results.md, "Which records make a row"):

- A row is a cell at one memory cap (`cell_id`, `gpu_memory_gb`) in **one run context**: by
  default the latest (the context that started last), so two runs of one cell never pool into
  one figure without a word. The other contexts of that cell are its history.
- Pooling several contexts of a cell happens only when asked (`pool=True`), and only for
  contexts whose environment digest, workload and tuned kernels (Record.tuned_digest) agree;
  otherwise it is refused, as pyperf's Benchmark.add_run refuses runs whose metadata differ. A
  pooled row says so.
- Inside a row, values come in two levels: trials inside a worker process, and runs (fresh
  processes). A row's figure is the mean of its runs' means (bench.results.stats.run_spread).
- A partial run (a worker killed after some ok trials) is left out beside complete ones
  (`left_out_runs`, "Partial runs").

`choose` and `left_out_runs` are shared with bench.results.table, which applies the same rule to
stores read as columns. Callers import these names from bench.results.query, the API every reader uses.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from bench.errors import BenchInputError
from bench.results.records import Record, RunContext
from bench.results.rows import record_host


@dataclass(frozen=True)
class CellRuns:
    """The records one row aggregates: a cell at one memory cap, in one run context (or pooled)."""

    cell_id: str
    gpu_memory_gb: float | None
    records: tuple[Record, ...]  # the records of the chosen context(s) the row counts, all statuses, in store order
    contexts: tuple[RunContext, ...]  # the chosen contexts, latest first
    left_out: tuple[Record, ...] = ()  # ok trials of partial runs, left out beside complete ones (counted_records)

    @property
    def planned_runs(self) -> int:
        """Return how many runs (worker processes) the chosen contexts asked for."""
        return sum(c.runs for c in self.contexts)

    @property
    def planned_trials(self) -> int:
        """Return the trials per run the latest context asked for."""
        return self.context.trials

    @property
    def left_out_runs(self) -> int:
        return len({r.process_key for r in self.left_out})

    @property
    def partial(self) -> bool:
        """Return True for a row that ran ok but has fewer complete runs than its contexts asked for."""
        per_run = _ok_trials(self.records)
        return bool(per_run) and len(_complete(per_run, {c.run_id: c.trials for c in self.contexts})) < self.planned_runs

    @property
    def pooled(self) -> bool:
        return len(self.contexts) > 1

    @property
    def context(self) -> RunContext:
        """Return the latest chosen context."""
        return self.contexts[0]

    @property
    def latest(self) -> Record:
        return self.records[-1]

    @property
    def cell(self) -> dict:
        return self.latest.cell

    @property
    def label(self) -> str:
        return self.latest.label

    @functools.cached_property
    def ok_records(self) -> list[Record]:  # cached: a comparison reads it once per metric
        return [r for r in self.records if r.ok]

    @property
    def status(self) -> str:
        """Return 'ok' when any pass succeeded, else the status of the last record."""
        return "ok" if any(r.ok for r in self.records) else self.latest.status

    @property
    def runs(self) -> int:
        """Return how many worker processes contributed an ok trial."""
        return len({r.process_key for r in self.ok_records})

    @property
    def tuned_digests(self) -> tuple[str, ...]:
        """Return the distinct tuned-kernel digests its ok records ran (Record.tuned_digest), sorted; () when untuned."""
        return tuple(sorted({r.tuned_digest for r in self.ok_records} - {None}))

    def values(self, metric: str) -> list[list[float]]:
        """Return the metric's ok trial values grouped by worker process (one list per run)."""
        by_run: dict[tuple, list[float]] = {}
        for r in self.ok_records:
            v = r.metric(metric)
            if v is not None:
                by_run.setdefault(r.process_key, []).append(v)
        return list(by_run.values())

    def spread(self, metric: str):
        """Return the metric's bench.results.stats.RunSpread over runs and trials, or None without values."""
        from bench.results.stats import run_spread

        values = self.values(metric)
        return run_spread(values, metric) if values else None

    def describe(self) -> str:
        """Return where the row's figures come from, e.g. '2026-12-01 14:02 ab12cd3' or 'pooled from 2 runs: ...'."""
        if self.pooled:
            return f"pooled from {len(self.contexts)} run contexts: " + ", ".join(c.label for c in self.contexts)
        return self.context.label


@dataclass
class Selection:
    """Rows chosen for a report or a comparison side, with the history they leave out."""

    rows: list[CellRuns]
    history: list[CellRuns] = field(default_factory=list)  # older contexts of the same cells, one each
    warnings: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[Record]:
        """Return the records of the chosen rows (what tables and figures aggregate), in store order."""
        return [r for row in self.rows for r in row.records]

    def by_key(self) -> dict[tuple[str, float | None], CellRuns]:
        return {(r.cell_id, r.gpu_memory_gb): r for r in self.rows}

    def left_out_runs(self) -> dict[tuple[str, float | None], int]:
        """Return {(cell_id, gpu_memory_gb): partial runs left out of the row's figures} for rows that left any out."""
        return {(r.cell_id, r.gpu_memory_gb): r.left_out_runs for r in self.rows if r.left_out}


def left_out_runs(ok_trials: dict[tuple, int], trials: dict) -> set[tuple]:
    """Return the runs a row's figures leave out under the partial-run rule, the one rule both readers apply.

    ok_trials: {(run_id, run): the ok trials of that worker process in the row}; trials: {run_id: the
    trials per run its context asked for}. A run is complete when it holds its context's `trials` ok
    trials. A partial run (a worker killed or failed after some ok trials, or a run cut short) is left
    out of the figures when the row has a complete run, so a resumed 2 x 3 row reads 2 x 3, not
    3 x 2.3; a row with no complete run keeps its partial trials and is marked partial
    (docs/guide/results.md, "Partial runs").
    """
    complete = _complete(ok_trials, trials)
    return set(ok_trials) - complete if complete else set()


def _complete(ok_trials: dict[tuple, int], trials: dict) -> set[tuple]:
    """Return the process keys holding all the trials their context asked for."""
    return {k for k, n in ok_trials.items() if n >= trials.get(k[0], 1)}


def counted_records(records: Sequence[Record], contexts: Sequence[RunContext]) -> tuple[list[Record], list[Record]]:
    """Return (the records a row's figures count, the ok trials left out) under the partial-run rule (left_out_runs)."""
    left = left_out_runs(_ok_trials(records), {c.run_id: c.trials for c in contexts})
    if not left:
        return list(records), []
    kept = [r for r in records if not (r.ok and r.process_key in left)]
    return kept, [r for r in records if r.ok and r.process_key in left]


def _ok_trials(records: Sequence[Record]) -> dict[tuple, int]:
    """Return {process key: ok trials} of these records."""
    per_run: dict[tuple, int] = {}
    for r in records:
        if r.ok:
            per_run[r.process_key] = per_run.get(r.process_key, 0) + 1
    return per_run


def partial_runs_warning(rows: list[tuple[str, int, int]]) -> str:
    """Return the warning of rows that left partial runs out: rows: (label, runs left out, trials left out)."""
    return (f"{len(rows)} cell(s) have partial runs (a worker killed or failed before its last trial) beside complete "
            "ones: left out of the figures, as the runs × trials column says: "
            + ", ".join(f"{label} ({runs} run(s), {trials} trial(s))" for label, runs, trials in rows[:5])
            + (" ..." if len(rows) > 5 else ""))


def _cell_runs(cell_id: str, cap, records: Sequence[Record], contexts: tuple[RunContext, ...]) -> CellRuns:
    kept, left_out = counted_records(records, contexts)
    return CellRuns(cell_id, cap, tuple(kept), contexts, tuple(left_out))


class Splits(NamedTuple):
    """How many cells `choose` found with one run id split into several rows' worth of records."""

    environments: int = 0  # one invocation's runs in different environments (nodes whose GPU, driver or libraries differ)
    hosts: int = 0         # one run id's run numbers on two hosts (two machines' runs under one id)


def choose(keys: Iterable[tuple], pool: bool = False) -> tuple[list[tuple[tuple, list[list[int]]]], Splits]:
    """Return, per (cell_id, gpu_memory_gb) in first-seen order, its run contexts ranked latest first
    (each a list of record positions in store order), and the cells whose run ids were split (Splits).
    The one rule both readers use (select, and query.table's selection).

    keys: per record, in store order, (cell_id, gpu_memory_gb, run_id, env_digest, described, context
    started_at, host, run); described: the record's environment holds a key that decides comparability;
    host: bench.results.rows.record_host. The runs of one invocation are also told apart by environment
    digest, so runs on nodes that differ (an executor spreading runs over a cluster) never make one figure.
    And a worker process runs on one host: where one run number of a run id was measured on two hosts
    (stores of two machines merged, a run id reused), each host's records are a run context of their own,
    never pooled into one row with the other's (runs of one invocation spread over identical nodes, each
    run on one host, stay one context).
    """
    by_key: dict[tuple, list[tuple]] = {}
    for i, (cell_id, cap, run_id, digest, described, started, host, run) in enumerate(keys):
        by_key.setdefault((cell_id, cap), []).append((i, run_id, digest, described, started, host, run))
    out, split_env, split_host = [], 0, 0
    for key, recs in by_key.items():
        # A record whose worker never described itself (it died first: only the executor's placement
        # is known) joins its run's first known environment rather than making a group of its own.
        known: dict[str, str] = {}
        hosts: dict[tuple, set] = {}
        first_host: dict[str, str] = {}
        for _, run_id, digest, described, _, host, run in recs:
            if described:
                known.setdefault(run_id, digest)
            if host is not None:
                hosts.setdefault((run_id, run), set()).add(host)
                first_host.setdefault(run_id, host)
        two_hosts = {run_id for (run_id, _), found in hosts.items() if len(found) > 1}
        groups: dict[tuple, list[int]] = {}
        started: dict[tuple, float | None] = {}
        for i, run_id, digest, described, t, host, _ in recs:
            where = (host if host is not None else first_host.get(run_id)) if run_id in two_hosts else None
            group = (run_id, digest if described else known.get(run_id), where)
            if group not in groups:
                groups[group] = []
                started[group] = t
            groups[group].append(i)
        order: dict[str, int] = {}  # first appearance breaks ties of start time
        for rid, _, _ in groups:
            order.setdefault(rid, len(order))

        # Latest start first; first appearance breaks ties; one invocation split by environment or host: the
        # group with the most records leads (then the first seen).
        ranked = sorted(groups.items(), reverse=True, key=lambda item, started=started, order=order: (
            started[item[0]] if started[item[0]] is not None else float("-inf"), order[item[0][0]], len(item[1])))
        split_host += bool(two_hosts)
        split_env += len({(rid, digest) for rid, digest, _ in groups}) > len(order)
        out.append((key, [members for _, members in ranked]))
    return out, Splits(split_env, split_host)


def _contexts(records: Sequence[Record]) -> list[tuple[RunContext, list[Record]]]:
    """Return the records of one cell grouped by run id, latest context first (the run driver's resume plan)."""
    records = list(records)
    keys = ((None, None, r.context.run_id, None, False, r.context.started_at, None, r.run) for r in records)
    cells, _ = choose(keys)
    return [(records[g[0]].context, [records[i] for i in g]) for _, groups in cells for g in groups]


def _described(record: Record) -> bool:
    """Return True if the record's environment holds any key that decides comparability (its worker described itself)."""
    from bench.machine.environment import COMPARABILITY_KEYS

    return record.context.env_digest is not None and any(record.environment.get(k) is not None for k in COMPARABILITY_KEYS)


def select(records: Iterable[Record], pool: bool = False) -> Selection:
    """Return one row per (cell_id, gpu_memory_gb): its latest run context, or (pool) all compatible ones.

    Pooling refuses (BenchInputError) contexts whose environment digest or workload differ.
    """
    records = list(records)
    keys = ((r.cell_id, r.gpu_memory_gb, r.context.run_id, r.context.env_digest, _described(r), r.context.started_at,
             record_host(r), r.run) for r in records)
    cells, split = choose(keys)
    sel = Selection(rows=[])
    for (cell_id, cap), groups in cells:
        ranked = [(records[g[0]].context, [records[i] for i in g]) for g in groups]
        if not pool:
            ctx, chosen = ranked[0]
            sel.rows.append(_cell_runs(cell_id, cap, chosen, (ctx,)))
            sel.history.extend(_cell_runs(cell_id, cap, rs, (c,)) for c, rs in ranked[1:])
            continue
        _check_poolable(ranked)
        chosen = tuple(records[i] for i in sorted(i for g in groups for i in g))
        sel.rows.append(_cell_runs(cell_id, cap, chosen, tuple(c for c, _ in ranked)))
    sel.warnings.extend(selection_warnings(split, [(h.cell_id, h.gpu_memory_gb) for h in sel.history], pool))
    left = [(row.label, row.left_out_runs, len(row.left_out)) for row in sel.rows if row.left_out]
    if left:
        sel.warnings.append(partial_runs_warning(left))
    return sel


def selection_warnings(split: Splits, history_keys: list[tuple], pool: bool) -> list[str]:
    """Return the warnings a selection carries: split environments or hosts, history left out."""
    out = []
    if split.environments:
        out.append(
            f"{split.environments} cell(s) ran the runs of one invocation in different environments (nodes whose GPU, "
            "driver or libraries differ): each environment's runs are shown apart, the latest as the row, never "
            "averaged together"
        )
    if split.hosts:
        out.append(
            f"{split.hosts} cell(s) hold runs of one run id measured on different hosts with the same run numbers (stores "
            "of two machines merged, or a run id reused): each host's runs are a run of their own, the latest as the "
            "row and the others as history, never averaged together (--pool refuses them)"
        )
    if history_keys and not pool:
        out.append(
            f"{len(set(history_keys))} cell(s) also have earlier run(s) ({len(history_keys)} in all), shown as history "
            "and left out of the figures: each row is the latest run of its cell; pass --pool to pool compatible runs"
        )
    return out


def _check_poolable(ranked: list[tuple[RunContext, list[Record]]]) -> None:
    label = ranked[0][1][-1].label
    # Different tuned kernels are different programs: their figures are two tunings, not one (docs/guide/hf-backend.md).
    tuned = [(c, tuple(sorted({r.tuned_digest for r in rs if r.ok} - {None}))) for c, rs in ranked]
    tuned = [(c, d) for c, d in tuned if d]
    if len({d for _, d in tuned}) > 1:
        detail = "; ".join(f"{', '.join(x[:8] + '…' for x in d)} in run {c.run_id} ({c.label})" for c, d in tuned)
        raise BenchInputError(
            f"cannot pool the runs of {label}: they ran different tuned kernels (tuned {detail}); their figures are "
            "different tunings' figures, not one. Drop --pool (each row then shows the latest run), or measure every "
            "run from one engine artifact (`bench build`, `bench run --engines`)"
        )
    for key, what in (("env_digest", "environments"), ("workload_hash", "workloads")):
        values = {getattr(c, key) for c, _ in ranked} - {None}
        if len(values) > 1:
            detail = ""
            if key == "env_digest":
                from bench.machine.environment import COMPARABILITY_KEYS

                envs = [next((r.environment for r in rs if r.environment), {}) for _, rs in ranked]
                diff = [k for k in COMPARABILITY_KEYS if len({str(e.get(k)) for e in envs}) > 1]
                detail = " (" + "; ".join(f"{k}: {', '.join(sorted({str(e.get(k)) for e in envs}))}" for k in diff) + ")"
            raise BenchInputError(
                f"cannot pool the runs of {label}: they ran in different {what}{detail}; their figures are not "
                "comparable. Drop --pool (each row then shows the latest run), or report the stores separately"
            )
    _check_one_host(ranked, label)


def _check_one_host(ranked: list[tuple[RunContext, list[Record]]], label: str) -> None:
    """Refuse to pool the run contexts of one run id that `choose` told apart by host (their run numbers clash)."""
    seen: dict[str, list] = {}
    for c, rs in ranked:
        seen.setdefault(c.run_id, []).append(rs)
    for run_id, parts in seen.items():
        if len(parts) > 1:
            hosts = sorted({str(record_host(r)) for rs in parts for r in rs})
            raise BenchInputError(
                f"cannot pool the runs of {label}: run {run_id} holds runs of the same number measured on different "
                f"hosts ({', '.join(hosts)}): two machines' runs under one run id (stores of two machines merged, or a "
                "run id reused), which pooled would count two worker processes as one. Drop --pool (each host's runs "
                "are then shown apart, the latest as the row), or report the stores separately"
            )


# ---- baselines -------------------------------------------------------------------------------


def stored_baselines(rows: Iterable[CellRuns]) -> list[dict]:
    """Return the distinct baselines the rows' matrices named (schema-1 records stored none)."""
    out: list[dict] = []
    for row in rows:
        b = row.context.baseline
        if b and b not in out:
            out.append(b)
    return out
