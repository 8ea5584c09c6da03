"""The one query API over stored results: load typed records, choose which records make a row.

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

Schema-1 stores carry no run ids: the loader starts a new reconstructed run context where the
commit, the matrix or the memory cap changes, or where a (cell, trial) repeats (a `--redo`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError
from bench.results.records import (
    Accuracy,
    Measurement,
    OomProbe,
    Profile,
    Record,
    RunContext,
    parse,
)


def check_store_path(path: str | Path, *, must_exist: bool = True) -> Path:
    """Return the path of a result store; BenchInputError (exit 2) if it is a folder or unreadable."""
    from bench.files import check_name_length, check_output_file

    p = Path(path)
    check_name_length(p, "--store" if not must_exist else "result store")  # first: stat() of an over-long name fails
    if p.is_dir():
        stores = sorted(str(s) for s in p.glob("*.jsonl"))[:5]
        hint = f"; stores in it: {', '.join(stores)}" if stores else ""
        raise BenchInputError(f"result store {str(p)!r} is a folder, not a store: give a .jsonl file{hint}")
    if not must_exist:  # a store to write: its folder must take files, with space to spare
        check_output_file(p, "--store")
    if not p.exists():
        if must_exist:
            raise BenchInputError(f"result store {str(p)!r} does not exist: run `bench run --store {p}` first, or check the path")
        return p
    if not os.access(p, os.R_OK):
        raise BenchInputError(f"result store {str(p)!r} is not readable (permissions): fix them or copy the file")
    return p


def load(paths: Iterable[str | Path]) -> list[Record]:
    """Return the typed records of the given stores, in store order; BenchInputError on a bad path."""
    from bench.results.store import ResultStore

    out: list[Record] = []
    for path in paths:
        p = check_store_path(path)
        try:
            raws = list(ResultStore(p).records())
        except OSError as exc:
            raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
        legacy = _legacy_runs(raws, p.name)
        records = [parse(raw, store=p.stem, legacy_run=legacy.get(i)) for i, raw in enumerate(raws)]
        odd = sum(1 for r in records if r.extra.get("non_finite_metrics"))
        if odd:
            import warnings

            warnings.warn(f"{p}: {odd} record(s) hold NaN or infinite metrics; those figures are treated as missing",
                          stacklevel=2)
        out.extend(records)
    return out


def _legacy_runs(raws: list[dict], store_name: str) -> dict[int, tuple[str, float | None]]:
    """Return {line index: (run id, start time)} reconstructed for the store's schema-1 lines.

    A new run starts where the commit, dirty flag, matrix, memory cap or record kind changes, or
    where a (cell, trial) repeats within the current run (a --redo appends the same trials again).
    """
    from bench.results.records import legacy_kind
    from bench.spec import short_hash

    out: dict[int, tuple[str, float | None]] = {}
    segment: dict | None = None
    segments = []
    for i, raw in enumerate(raws):
        if raw.get("schema_version") != 1:
            continue
        settings, env = raw.get("settings") or {}, raw.get("environment") or {}
        who = (env.get("commit"), env.get("dirty"), settings.get("matrix"), settings.get("gpu_memory_gb"),
               legacy_kind(raw))
        seen = (raw["cell_id"], raw.get("trial", 0))
        if segment is None or segment["who"] != who or seen in segment["seen"]:
            first = raw.get("started_at") or raw.get("ended_at")
            segment = {"who": who, "seen": set(), "lines": [], "start": first,
                       "id": "v1-" + short_hash([*who, first, store_name])[:12]}
            segments.append(segment)
        segment["seen"].add(seen)
        segment["lines"].append(i)
        t = raw.get("started_at")
        if t is not None and (segment["start"] is None or t < segment["start"]):
            segment["start"] = t
    for seg in segments:
        for i in seg["lines"]:
            out[i] = (seg["id"], seg["start"])
    return out


def measurements(records: Iterable[Record]) -> list[Measurement]:
    return [r for r in records if isinstance(r, Measurement)]


def probes(records: Iterable[Record]) -> list[OomProbe]:
    return [r for r in records if isinstance(r, OomProbe)]


def profiles(records: Iterable[Record]) -> list[Profile]:
    return [r for r in records if isinstance(r, Profile)]


def accuracies(records: Iterable[Record]) -> list[Accuracy]:
    return [r for r in records if isinstance(r, Accuracy)]


def latest_accuracy(records: Iterable[Record]) -> dict[str, Accuracy]:
    """Return {cell_id: its latest ok Accuracy record} (the latest run context's, by start time)."""
    out: dict[str, Accuracy] = {}
    for r in accuracies(records):
        if r.ok and (r.cell_id not in out or (r.context.started_at or 0, r.ended_at or 0)
                     >= (out[r.cell_id].context.started_at or 0, out[r.cell_id].ended_at or 0)):
            out[r.cell_id] = r
    return out


def with_commit(records: Iterable[Record], prefix: str) -> list[Record]:
    """Return the records whose context commit starts with prefix."""
    return [r for r in records if str(r.context.commit or "").startswith(prefix)]


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
        per_run, complete = _run_counts(self.records, self.contexts)
        return bool(per_run) and len(complete) < self.planned_runs

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

    @property
    def ok_records(self) -> list[Record]:
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


def counted_records(records: Sequence[Record], contexts: Sequence[RunContext]) -> tuple[list[Record], list[Record]]:
    """Return (the records a row's figures count, the ok trials left out) under the partial-run rule.

    A run (one worker process) is complete when it holds its context's `trials` ok trials. A
    partial run (a worker killed or failed after some ok trials, or a run cut short) is left out
    of the figures when the row has a complete run, so a resumed 2 x 3 row reads 2 x 3, not
    3 x 2.3; a row with no complete run keeps its partial trials and is marked partial
    (docs/guide/results.md, "Partial runs").
    """
    per_run, complete = _run_counts(records, contexts)
    partial = set(per_run) - complete
    if not complete or not partial:
        return list(records), []
    kept = [r for r in records if not (r.ok and r.process_key in partial)]
    return kept, [r for r in records if r.ok and r.process_key in partial]


def _run_counts(records: Sequence[Record], contexts: Sequence[RunContext]) -> tuple[dict[tuple, int], set[tuple]]:
    """Return ({process key: ok trials}, the process keys holding all the trials their context asked for)."""
    trials = {c.run_id: c.trials for c in contexts}
    per_run: dict[tuple, int] = {}
    for r in records:
        if r.ok:
            per_run[r.process_key] = per_run.get(r.process_key, 0) + 1
    return per_run, {k for k, n in per_run.items() if n >= trials.get(k[0], 1)}


def _cell_runs(cell_id: str, cap, records: Sequence[Record], contexts: tuple[RunContext, ...]) -> CellRuns:
    kept, left_out = counted_records(records, contexts)
    return CellRuns(cell_id, cap, tuple(kept), contexts, tuple(left_out))


def _contexts(records: Sequence[Record], by_environment: bool = False) -> list[tuple[RunContext, list[Record]]]:
    """Return the records of one cell grouped by run id, latest context first.

    by_environment: also apart by environment digest, so the runs of one invocation that ran on
    nodes that differ (an executor spreading runs over a cluster) never make one figure.
    """
    # A record whose worker never described itself (it died first: only the executor's placement
    # is known) joins its run's first known environment rather than making a group of its own.
    known: dict[str, str] = {}
    for r in records:
        if by_environment and _described(r):
            known.setdefault(r.context.run_id, r.context.env_digest)
    groups: dict[tuple, list[Record]] = {}
    for r in records:
        digest = (r.context.env_digest if _described(r) else known.get(r.context.run_id)) if by_environment else None
        groups.setdefault((r.context.run_id, digest), []).append(r)
    order: dict[str, int] = {}  # first appearance breaks ties of start time
    for rid, _ in groups:
        order.setdefault(rid, len(order))

    def when(item):
        (rid, _), recs = item
        started = recs[0].context.started_at
        # One invocation split by environment: the environment with the most records leads.
        return (started if started is not None else float("-inf"), order[rid], len(recs))

    ranked = sorted(groups.items(), key=when, reverse=True)
    return [(recs[0].context, recs) for _, recs in ranked]


def _described(record: Record) -> bool:
    """Return True if the record's environment holds any key that decides comparability (its worker described itself)."""
    from bench.machine.environment import COMPARABILITY_KEYS

    return record.context.env_digest is not None and any(record.environment.get(k) is not None for k in COMPARABILITY_KEYS)


def select(records: Iterable[Record], pool: bool = False) -> Selection:
    """Return one row per (cell_id, gpu_memory_gb): its latest run context, or (pool) all compatible ones.

    Pooling refuses (BenchInputError) contexts whose environment digest or workload differ.
    """
    by_key: dict[tuple, list[Record]] = {}
    for r in records:
        by_key.setdefault((r.cell_id, r.gpu_memory_gb), []).append(r)
    sel = Selection(rows=[])
    split = 0  # cells whose runs of one invocation ran in different environments
    for (cell_id, cap), recs in by_key.items():
        ranked = _contexts(recs, by_environment=True)
        split += len({c.run_id for c, _ in ranked}) < len(ranked)
        if not pool:
            ctx, chosen = ranked[0]
            sel.rows.append(_cell_runs(cell_id, cap, chosen, (ctx,)))
            sel.history.extend(_cell_runs(cell_id, cap, rs, (c,)) for c, rs in ranked[1:])
            continue
        _check_poolable(ranked)
        chosen = tuple(r for r in recs if any(r.context.run_id == c.run_id for c, _ in ranked))
        sel.rows.append(_cell_runs(cell_id, cap, chosen, tuple(dict.fromkeys(c for c, _ in ranked))))
    if split:
        sel.warnings.append(
            f"{split} cell(s) ran the runs of one invocation in different environments (nodes whose GPU, driver or "
            "libraries differ): each environment's runs are shown apart, the latest as the row, never averaged together"
        )
    left = [row for row in sel.rows if row.left_out]
    if left:
        sel.warnings.append(
            f"{len(left)} cell(s) have partial runs (a worker killed or failed before its last trial) beside complete "
            "ones: left out of the figures, as the runs × trials column says: "
            + ", ".join(f"{row.label} ({row.left_out_runs} run(s), {len(row.left_out)} trial(s))" for row in left[:5])
            + (" ..." if len(left) > 5 else ""))
    if sel.history and not pool:
        n = len({(h.cell_id, h.gpu_memory_gb) for h in sel.history})
        sel.warnings.append(
            f"{n} cell(s) also have earlier run(s) ({len(sel.history)} in all), shown as history and left out of the "
            "figures: each row is the latest run of its cell; pass --pool to pool compatible runs"
        )
    return sel


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


# ---- baselines -------------------------------------------------------------------------------


def stored_baselines(rows: Iterable[CellRuns]) -> list[dict]:
    """Return the distinct baselines the rows' matrices named (schema-1 records stored none)."""
    out: list[dict] = []
    for row in rows:
        b = row.context.baseline
        if b and b not in out:
            out.append(b)
    return out
