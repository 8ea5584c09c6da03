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

import functools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import BenchInputError
from bench.results.jsonl import is_compressed, read_lines, refuse_compressed, store_name
from bench.results.records import (
    Accuracy,
    CapacityProbe,
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
        refuse_compressed(p)
        check_output_file(p, "--store")
    if not p.exists():
        if must_exist:
            raise BenchInputError(f"result store {str(p)!r} does not exist: run `bench run --store {p}` first, or check the path")
        return p
    if not os.access(p, os.R_OK):
        raise BenchInputError(f"result store {str(p)!r} is not readable (permissions): fix them or copy the file")
    return p


def load(paths: Iterable[str | Path]) -> list[Record]:
    """Return the typed records of the given stores (.jsonl, or .jsonl.gz read as it is), in store order;
    BenchInputError on a bad path."""
    out: list[Record] = []
    for path in paths:
        p = check_store_path(path)
        try:
            raws = [line.record for line in read_lines(p)]
        except OSError as exc:
            raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
        name = store_name(p)
        legacy = _legacy_runs(raws, p.name.removesuffix(".gz"))  # a .gz store: the runs of its plain twin
        records = [parse(raw, store=name, legacy_run=legacy.get(i)) for i, raw in enumerate(raws)]
        odd = sum(1 for r in records if r.extra.get("non_finite_metrics"))
        if odd:
            import warnings

            warnings.warn(f"{p}: {odd} record(s) hold NaN or infinite metrics; those figures are treated as missing",
                          stacklevel=2)
        out.extend(records)
    return out


def load_cells(path: str | Path, cell_ids: set[str]) -> list[Record]:
    """Return the typed measurement-relevant records of the given cells in one store, without their per-request
    samples and telemetry: the run driver's resume plan, in memory proportional to the matrix's own records, not
    to the store (a year of nightly records in one store held 3.2 GB per 100,000 records as full typed records).

    Every line is still parsed once. A store holding schema-1 lines, whose runs are reconstructed across cells
    (_legacy_runs), is read whole and then filtered."""
    p = check_store_path(path)
    raws: list[dict] = []
    try:
        for line in read_lines(p):
            raw = line.record
            if raw.get("schema_version") == 1:
                return [r for r in load([p]) if r.cell_id in cell_ids]
            if raw["cell_id"] not in cell_ids:
                continue
            raw["samples"] = []  # the plan reads status, run and context, never the per-request samples
            if isinstance(raw.get("extra"), dict):
                raw["extra"].pop("telemetry", None)
            raws.append(raw)
    except OSError as exc:
        raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
    return [parse(raw, store=store_name(p)) for raw in raws]


def _legacy_runs(raws: list[dict], store_name: str) -> dict[int, tuple[str, float | None]]:
    """Return {line index: (run id, start time)} reconstructed for the store's schema-1 lines.

    A new run starts where the commit, dirty flag, matrix, memory cap or record kind changes, or
    where a (cell, trial) repeats within the current run (a --redo appends the same trials again).
    """
    from bench.results.records import legacy_kind
    from bench.spec.cells import short_hash

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


def capacity_probes(records: Iterable[Record]) -> list[CapacityProbe]:
    return [r for r in records if isinstance(r, CapacityProbe)]


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


def choose(keys: Iterable[tuple], pool: bool = False) -> tuple[list[tuple[tuple, list[list[int]]]], int]:
    """Return, per (cell_id, gpu_memory_gb) in first-seen order, its run contexts ranked latest first
    (each a list of record positions in store order), and how many cells ran one invocation's runs in
    different environments. The one rule both readers use (select, and query.table's selection).

    keys: per record, in store order, (cell_id, gpu_memory_gb, run_id, env_digest, described, context
    started_at); described: the record's environment holds a key that decides comparability. The runs of
    one invocation are also told apart by environment digest, so runs on nodes that differ (an executor
    spreading runs over a cluster) never make one figure.
    """
    by_key: dict[tuple, list[tuple]] = {}
    for i, (cell_id, cap, run_id, digest, described, started) in enumerate(keys):
        by_key.setdefault((cell_id, cap), []).append((i, run_id, digest, described, started))
    out, split = [], 0
    for key, recs in by_key.items():
        # A record whose worker never described itself (it died first: only the executor's placement
        # is known) joins its run's first known environment rather than making a group of its own.
        known: dict[str, str] = {}
        for _, run_id, digest, described, _ in recs:
            if described:
                known.setdefault(run_id, digest)
        groups: dict[tuple, list[int]] = {}
        started: dict[tuple, float | None] = {}
        for i, run_id, digest, described, t in recs:
            group = (run_id, digest if described else known.get(run_id))
            if group not in groups:
                groups[group] = []
                started[group] = t
            groups[group].append(i)
        order: dict[str, int] = {}  # first appearance breaks ties of start time
        for rid, _ in groups:
            order.setdefault(rid, len(order))

        # Latest start first; first appearance breaks ties; one invocation split by environment: the
        # environment with the most records leads.
        ranked = sorted(groups.items(), reverse=True, key=lambda item, started=started, order=order: (
            started[item[0]] if started[item[0]] is not None else float("-inf"), order[item[0][0]], len(item[1])))
        split += len(order) < len(ranked)
        out.append((key, [members for _, members in ranked]))
    return out, split


def _contexts(records: Sequence[Record]) -> list[tuple[RunContext, list[Record]]]:
    """Return the records of one cell grouped by run id, latest context first (the run driver's resume plan)."""
    records = list(records)
    keys = ((None, None, r.context.run_id, None, False, r.context.started_at) for r in records)
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
    keys = ((r.cell_id, r.gpu_memory_gb, r.context.run_id, r.context.env_digest, _described(r), r.context.started_at)
            for r in records)
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


def selection_warnings(split: int, history_keys: list[tuple], pool: bool) -> list[str]:
    """Return the warnings a selection carries: split environments, history left out."""
    out = []
    if split:
        out.append(
            f"{split} cell(s) ran the runs of one invocation in different environments (nodes whose GPU, driver or "
            "libraries differ): each environment's runs are shown apart, the latest as the row, never averaged together"
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


# ---- baselines -------------------------------------------------------------------------------


def stored_baselines(rows: Iterable[CellRuns]) -> list[dict]:
    """Return the distinct baselines the rows' matrices named (schema-1 records stored none)."""
    out: list[dict] = []
    for row in rows:
        b = row.context.baseline
        if b and b not in out:
            out.append(b)
    return out


# ---- stores as columns (large stores, many stores) ---------------------------------------------
#
# The same records, read through each store's columnar companion (bench.results.columnar) instead
# of one typed record per line: the selection reads a few key columns of every record, and only the
# chosen records' rows (and, for figures, their samples) are read in full. `choose` makes the rows
# of both readers; bench.results.rows.record_row makes the columns of both.

# A store at least this large is read as columns by `bench report` and `bench compare` (a smaller
# one parses faster than its companion is written).
TABLE_MIN_BYTES = 32 << 20


def expand_stores(paths: Iterable[str | Path], pattern: str = "*.jsonl") -> list[Path]:
    """Return the stores named by paths, where a folder stands for its `*.jsonl` stores and a glob for its
    matches (sorted: nightly stores named by date read oldest first); BenchInputError when one names none."""
    import glob

    out: list[Path] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            found = sorted(p.glob(pattern))
            if not found:
                raise BenchInputError(f"folder {str(p)!r} holds no result stores ({pattern}): give stores or a folder of them")
        elif glob.has_magic(str(path)):
            found = sorted(Path(m) for m in glob.glob(str(path)) if not Path(m).is_dir())
            if not found:
                raise BenchInputError(f"no result store matches {str(path)!r}: check the pattern")
        else:
            found = [p]
        out.extend(found)
    return out


def prefer_table(paths: Sequence[str | Path], columnar: bool | None = None) -> bool:
    """Return whether to read these stores as columns: `columnar` if given, else when they add up to TABLE_MIN_BYTES
    and none is compressed (a .jsonl.gz store has no companion: `table` would read them all as typed records)."""
    if columnar is not None:
        return columnar
    if any(is_compressed(p) for p in paths):
        return False
    total = 0
    for p in paths:
        with contextlib_suppress():
            total += Path(p).stat().st_size
    return total >= TABLE_MIN_BYTES


class contextlib_suppress:
    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        return kind is not None and issubclass(kind, OSError)


@dataclass
class Table:
    """Stores read as columns: every record's key columns in store order; the rest read for chosen records.

    A record is named by its index into `keys` (the stores' records, one store after the other).
    """

    paths: list[Path]
    names: list[str]              # each store's stem (a record's `store`)
    columns: list                 # bench.results.columnar.StoreColumns per store
    keys: Any                     # pandas frame: store (index into paths), pos, kind, cell_id, gpu_memory_gb, run_id, ...

    def indices(self, kind: str = "measurement") -> list[int]:
        """Return the indices of the records of one kind, in store order."""
        return self.keys.index[self.keys.kind == kind].tolist()

    def _by_store(self, indices: Sequence[int]) -> dict[int, Any]:
        """Return {store index: record positions (numpy) of these records in that store}."""
        import numpy as np

        idx = np.asarray(indices, dtype=np.int64)
        stores, positions = self.keys.store.to_numpy()[idx], self.keys.pos.to_numpy()[idx]
        return {int(s): positions[stores == s] for s in np.unique(stores)}

    def _read(self, kind: str, indices: Sequence[int], columns=None, exclude=()):
        """Return {store index: pandas frame} of one kind's rows for these records (JSON-text columns decoded)."""
        from bench.results.columnar import json_columns

        out = {}
        for s, positions in self._by_store(indices).items():
            t = self.columns[s].read(kind, columns=columns, positions=positions, exclude=exclude)
            if t is None:
                continue
            frame = t.to_pandas()
            for c in frame.columns:
                if isinstance(frame[c].dtype, pd_categorical()):
                    frame[c] = frame[c].astype(object).where(frame[c].notna(), None)
            for c in json_columns(t):
                if c in frame:
                    frame[c] = [None if v is None else json.loads(v) for v in frame[c]]
            out[s] = frame
        return out

    def frame(self, indices: Sequence[int]):
        """Return the report frame (bench.results.rows.record_row columns) of these records, in this order."""
        import pandas as pd

        from bench.results.rows import ROW_FIELDS

        hidden = {"pos", "kind", "offset", "nbytes", "context_json", "cell_json", "environment_json", "described"}
        parts = []
        for s, f in self._read("records", indices, exclude=hidden - {"pos"}).items():
            f.insert(0, "store", self.names[s])
            f.index = pd.MultiIndex.from_arrays([[s] * len(f), f.pos.to_numpy()])
            parts.append(f.drop(columns=[c for c in hidden if c in f]))
        if not parts:
            return pd.DataFrame(columns=list(ROW_FIELDS))
        frame = pd.concat(parts) if len(parts) > 1 else parts[0]
        k = self.keys
        order = pd.MultiIndex.from_arrays([k.store.to_numpy()[list(indices)], k.pos.to_numpy()[list(indices)]])
        frame = frame.reindex(order).reset_index(drop=True)
        # Stores whose parts held None where these rows hold none: the dtype the rows themselves make.
        for c in frame.columns:
            if frame[c].dtype == object and pd.api.types.infer_dtype(frame[c], skipna=False) == "boolean":
                frame[c] = frame[c].astype(bool)
        return frame

    def frame_columns(self, indices: Sequence[int], columns: Sequence[str]):
        """Return these columns of these records' rows (any order; columns no store has are left out)."""
        import pandas as pd

        parts = [f.drop(columns="pos") for f in self._read("records", indices, columns=["pos", *columns]).values()]
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0] if parts else pd.DataFrame()

    def per_request(self, kind: str, indices: Sequence[int]):
        """Return {store index: frame of `kind` ("samples" or "telemetry") rows of these records}, keyed by `pos`."""
        return self._read(kind, indices)

    def records(self, indices: Sequence[int], full: bool = False, metrics: Sequence[str] | None = None) -> list[Record]:
        """Return typed records of these records, in this order.

        full: parsed from their stored lines (samples and extra included; for the few probe and profile
        records). Otherwise summaries from the columns: cell, context, environment, status, run, trial,
        error, times and the numeric metrics (`metrics` only, when given), without samples or extra.
        """
        from bench.results.rows import ROW_FIELDS

        k = self.keys
        out: dict[tuple[int, int], Record] = {}
        if full:
            from bench.results.jsonl import LineCounts

            for s, positions in self._by_store(indices).items():
                t = self.columns[s].read("records", columns=["pos", "offset", "nbytes"], positions=positions)
                with open(self.paths[s], "rb") as fh:
                    for pos, offset, nbytes in zip(*(t.column(c).to_pylist() for c in ("pos", "offset", "nbytes")), strict=True):
                        (line,) = read_lines(self.paths[s], offset, offset + nbytes, fh=fh, counts=LineCounts())
                        out[(s, pos)] = parse(line.record, store=self.names[s])
        else:
            from bench.results.records import TYPES

            cache: dict[str, Any] = {}

            def cached(text, make):
                value = cache.get(text)
                if value is None:
                    value = cache[text] = make(json.loads(text))
                return value

            fields_ = ("pos", "kind", "cell_id", "cell_json", "context_json", "environment_json", "run", "trial",
                       "status", "error", "started_at", "schema_version")
            wanted = None if metrics is None else [*fields_, *metrics]
            for s, f in self._read("records", indices, columns=wanted).items():
                for c in fields_:
                    if c not in f:
                        f[c] = None
                metric_cols = [c for c in f.columns if c not in ROW_FIELDS and c not in Table._INTERNAL
                               and (metrics is None or c in metrics) and f[c].dtype.kind in "fiu"]
                values = f[metric_cols].to_numpy(dtype=float)
                for j, (pos, kind, cell_id, cell, ctx, env, run, trial, status, error, started, version) in enumerate(
                        zip(*(f[c].tolist() for c in fields_), strict=True)):
                    m = {c: v for c, v in zip(metric_cols, values[j].tolist(), strict=True) if v == v}
                    out[(s, pos)] = TYPES[kind](
                        cell_id=cell_id, cell=cached(cell, dict), context=cached(ctx, RunContext.from_json),
                        run=int(run), trial=int(trial), status=status, metrics=m or None, error=error,
                        environment=cached(env, dict), started_at=_float(started), schema_version=int(version),
                        store=self.names[s])
        return [out[(int(s), int(p))] for s, p in zip(k.store.to_numpy()[list(indices)], k.pos.to_numpy()[list(indices)], strict=True)]

    _INTERNAL = frozenset({"pos", "kind", "offset", "nbytes", "context_json", "cell_json", "environment_json", "described"})

    def distinct(self, column: str, indices: Sequence[int], ordered: bool = True) -> list:
        """Return the distinct parsed values of a JSON column (environment_json, context_json) of these
        records, in the order the records first hold them (ordered) or in any order."""
        import numpy as np
        import pandas as pd

        if not ordered:
            seen: dict[str, None] = {}
            for s, positions in self._by_store(indices).items():
                t = self.columns[s].read("records", columns=[column], positions=positions)
                for v in (t.column(column).unique().to_pylist() if t is not None else ()):
                    seen.setdefault(v)
            return [json.loads(v) for v in seen if v is not None]

        frames = self._read("records", indices, columns=["pos", column])
        if not frames:
            return []
        parts = [pd.Series(f[column].to_numpy(), index=pd.MultiIndex.from_arrays([np.full(len(f), s), f.pos.to_numpy()]))
                 for s, f in frames.items()]
        values = pd.concat(parts) if len(parts) > 1 else parts[0]
        idx = np.asarray(indices, dtype=np.int64)
        order = pd.MultiIndex.from_arrays([self.keys.store.to_numpy()[idx], self.keys.pos.to_numpy()[idx]])
        return [json.loads(v) for v in pd.unique(values.reindex(order).to_numpy())]


def pd_categorical():
    import pandas as pd

    return pd.CategoricalDtype


def _float(v):
    return None if v is None or v != v else float(v)


def table(paths: Sequence[str | Path]) -> Table | None:
    """Return the stores as columns (each companion extended or rebuilt first); None when a store holds
    schema-1 lines or is compressed (read those through `load`). BenchInputError on a bad path."""
    import pandas as pd

    from bench.results.columnar import KEY_COLUMNS, open_store

    checked = [check_store_path(p) for p in paths]
    columns, keys = [], []
    for i, p in enumerate(checked):
        try:
            sc = open_store(p)
        except OSError as exc:
            raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
        if sc is None:
            return None
        columns.append(sc)
        t = sc.read("records", columns=list(KEY_COLUMNS))
        if t is not None:
            f = t.to_pandas()
            for c in ("gpu_memory_gb", "env_digest", "commit", "run_started_at", "described"):
                if c not in f:
                    f[c] = None
            for c in ("kind", "cell_id", "run_id", "env_digest", "commit"):
                f[c] = f[c].astype(object).where(f[c].notna(), None)
            f["ok"] = (f.pop("status") == "ok").to_numpy(dtype=bool)  # what the partial-run rule counts
            f.insert(0, "store", i)
            keys.append(f)
    frame = pd.concat(keys, ignore_index=True) if keys else pd.DataFrame(columns=["store", *KEY_COLUMNS])
    return Table(checked, [store_name(p) for p in checked], columns, frame)


@dataclass
class TableSelection:
    """`select`'s choice over a Table: record indices per row (and per earlier run context)."""

    table: Table
    # (cell_id, cap, chosen records, first record of each chosen run context, latest first)
    rows: list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]]
    history: list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]]
    warnings: list[str] = field(default_factory=list)
    # {(cell_id, cap): ok records of the partial runs a row left out (left_out_runs)}, rows that left any out
    left_out: dict[tuple, tuple[int, ...]] = field(default_factory=dict)

    def left_out_runs(self) -> dict[tuple[str, float | None], int]:
        """Return Selection.left_out_runs: {(cell_id, gpu_memory_gb): partial runs left out of the row's figures}."""
        k = self.table.keys
        return {key: len(set(zip(k.run_id.to_numpy()[list(idx)], k.run.to_numpy()[list(idx)], strict=True)))
                for key, idx in self.left_out.items()}

    @property
    def indices(self) -> list[int]:
        """Return the chosen records of every row, rows in first-seen order, each in store order."""
        return [i for row in self.rows for i in row[2]]

    @property
    def history_indices(self) -> list[int]:
        return [i for row in self.history for i in row[2]]

    def cell_runs(self, metrics: Sequence[str] | None = None) -> list[CellRuns]:
        """Return the rows as CellRuns of summary records (bench.results.query.Table.records)."""
        records = self.table.records(self.indices, metrics=metrics)
        pooled = [i for row in self.rows if len(row[3]) > 1 for i in row[3]]
        firsts = dict(zip(pooled, self.table.records(pooled, metrics=()), strict=True)) if pooled else {}
        out, n = [], 0
        for cell_id, cap, chosen, ctx_records in self.rows:
            recs = tuple(records[n:n + len(chosen)])
            n += len(chosen)
            ctxs = tuple(firsts[i].context for i in ctx_records) if len(ctx_records) > 1 else (recs[0].context,)
            left = self.left_out.get((cell_id, cap), ())
            out.append(CellRuns(cell_id, cap, recs, ctxs, tuple(self.table.records(left, metrics=metrics)) if left else ()))
        return out

    def baselines(self) -> list[dict]:
        """Return the distinct baselines the rows' run contexts named (stored_baselines)."""
        contexts = self.table.distinct("context_json", [row[3][0] for row in self.rows])
        out: list[dict] = []
        for c in contexts:
            b = c.get("baseline")
            if b and b not in out:
                out.append(b)
        return out


def select_table(tbl: Table, indices: Sequence[int] | None = None, pool: bool = False) -> TableSelection:
    """Return `select`'s choice over the table's measurements (or these records): the same rule, as indices."""
    k = tbl.keys
    idx = list(tbl.indices() if indices is None else indices)
    caps = k.gpu_memory_gb.to_numpy()[idx]
    keys = zip(k.cell_id.to_numpy()[idx], [None if c is None or c != c else float(c) for c in caps],
               k.run_id.to_numpy()[idx], k.env_digest.to_numpy()[idx], k.described.to_numpy()[idx],
               [_float(t) for t in k.run_started_at.to_numpy()[idx]], strict=True)
    cells, split = choose(keys)
    sel = TableSelection(tbl, [], [])
    for (cell_id, cap), groups in cells:
        groups = [[idx[i] for i in g] for g in groups]
        if not pool:
            sel.rows.append((cell_id, cap, tuple(groups[0]), (groups[0][0],)))
            sel.history.extend((cell_id, cap, tuple(g), (g[0],)) for g in groups[1:])
            continue
        recs = tbl.records([i for g in groups for i in g])
        n, ranked = 0, []
        for g in groups:
            ranked.append((recs[n].context, recs[n:n + len(g)]))
            n += len(g)
        _check_poolable(ranked)
        sel.rows.append((cell_id, cap, tuple(sorted(i for g in groups for i in g)), tuple(g[0] for g in groups)))
    sel.warnings.extend(selection_warnings(split, [(h[0], h[1]) for h in sel.history], pool))
    _leave_out_partial_runs(sel)
    return sel


def _leave_out_partial_runs(sel: TableSelection) -> None:
    """Apply the partial-run rule (left_out_runs) to every row and history row of a table selection, as
    select does through counted_records: their left-out ok records dropped, the rows' listed, and warned of."""
    import numpy as np
    import pandas as pd

    k = sel.table.keys
    groups = [row[2] for row in sel.rows] + [row[2] for row in sel.history]
    if not groups:
        return
    sizes = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))
    idx = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=int(sizes.sum()))
    ok = k.ok.to_numpy()[idx]
    counts = pd.DataFrame({"row": np.repeat(np.arange(len(groups)), sizes)[ok], "run_id": k.run_id.to_numpy()[idx][ok],
                           "run": k.run.to_numpy()[idx][ok], "trials": k.planned_trials.to_numpy()[idx][ok]})
    counts = counts.groupby(["row", "run_id", "run"], sort=False).trials.agg(["size", "first"])
    per_row: dict[int, tuple[dict, dict]] = {}
    for (row, run_id, run), n, trials in zip(counts.index, counts["size"].tolist(), counts["first"].tolist(), strict=True):
        ok_trials, asked = per_row.setdefault(row, ({}, {}))
        ok_trials[(run_id, int(run))] = n
        asked[run_id] = int(trials)
    left = {row: runs for row, (ok_trials, asked) in per_row.items() if (runs := left_out_runs(ok_trials, asked))}
    if not left:
        return
    ok_all, run_ids, run_nos = k.ok.to_numpy(), k.run_id.to_numpy(), k.run.to_numpy()
    for row, runs in left.items():
        rows, j = (sel.rows, row) if row < len(sel.rows) else (sel.history, row - len(sel.rows))
        cell_id, cap, chosen, firsts = rows[j]
        out = {i for i in chosen if ok_all[i] and (run_ids[i], int(run_nos[i])) in runs}
        rows[j] = (cell_id, cap, tuple(i for i in chosen if i not in out), firsts)
        if row < len(sel.rows):
            sel.left_out[(cell_id, cap)] = tuple(i for i in chosen if i in out)
    if sel.left_out:
        labels = sel.table.records([idx[0] for idx in sel.left_out.values()], metrics=())
        runs_left = sel.left_out_runs()
        sel.warnings.append(partial_runs_warning([(rec.label, runs_left[key], len(idx)) for rec, (key, idx) in zip(
            labels, sel.left_out.items(), strict=True)]))
