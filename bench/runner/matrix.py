"""The run driver: runs a matrix, resuming from the store, building workloads, running build groups, storing results.

Cells are grouped by BuildKey (one worker builds or loads once per group). Each cell is
measured in `runs` fresh worker processes (pyperf's runs), each with its own warm-up and
`trials` measured passes. Each finished (cell, run, trial) becomes one stored record, carrying
this invocation's run context, the moment its event arrives, so an interrupted run loses
nothing it finished; the next run resumes what is missing unless asked to redo. `run_estimate`
says, from stored records alone, how long the run would take (`--dry-run`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from bench.execution.supervisor import GroupItem, GroupJob
from bench.results.records import FINAL_FAILURES, RunContext, new_context, new_record
from bench.results.store import ResultStore
from bench.spec.cells import Cell, Matrix


@dataclass
class RunSummary:
    planned: int = 0  # (cell, run, trial) triples in the matrix
    skipped: int = 0  # already stored
    statuses: dict = field(default_factory=dict)  # status -> count of records written
    elapsed_s: float = 0.0
    run_id: str = ""  # this invocation's run context


@dataclass
class PlannedCell:
    """A cell still to measure: the run context its records join and the run indices to measure."""

    cell: Cell
    context: RunContext
    runs: list[int]


def plan(matrix: Matrix, records, context: RunContext, redo: bool = False,
         artifacts: dict[str, str] | None = None) -> list[PlannedCell]:
    """Return the cells still to measure, in matrix order, each with its context and runs.

    A cell is done when its latest run context (at this memory cap) holds `runs` runs of `trials`
    ok trials, or ended in a final failure (oom). An unfinished context measured at
    this same commit is resumed (its missing runs join it); otherwise the cell starts afresh in
    this invocation's context. A run (one worker process) counts only when all its trials are ok.
    A context counts only for the same kernels' source: as many tuning builds, and the same engine
    artifact (artifacts: {build key hash: digest}, or none: built here).
    """
    from bench.results.selection import _contexts

    want_runs, trials = matrix.settings.runs * matrix.settings.tuning_builds, matrix.settings.trials
    by_cell: dict[str, list] = {}
    for r in records:
        if r.kind == "measurement" and r.gpu_memory_gb == matrix.settings.gpu_memory_gb:
            by_cell.setdefault(r.cell_id, []).append(r)
    out = []
    for cell in matrix.cells:
        recs = by_cell.get(cell.cell_id)
        if redo or not recs:
            out.append(PlannedCell(cell, context, list(range(want_runs))))
            continue
        latest, latest_recs = _contexts(recs)[0]
        if not any(r.ok for r in latest_recs) and latest_recs[-1].status in FINAL_FAILURES:
            continue  # a batch that did not fit does not fit on a re-run (--redo measures again)
        wanted = (artifacts or {}).get(cell.build_key().key_hash)
        same_kernels = latest.tuning_builds == matrix.settings.tuning_builds and all(
            r.kernels.get("artifact") == wanted for r in latest_recs if r.ok)
        if not same_kernels:  # measured from other kernels (built here, another artifact, other builds): afresh
            out.append(PlannedCell(cell, context, list(range(want_runs))))
            continue
        ok_trials: dict[int, int] = {}
        for r in latest_recs:
            if r.ok:
                ok_trials[r.run] = ok_trials.get(r.run, 0) + 1
        complete = sum(1 for n in ok_trials.values() if n >= min(trials, latest.trials))
        if complete >= want_runs:
            continue
        resumable = (latest.command == "run" and latest.commit == context.commit and latest.dirty == context.dirty
                     and latest.trials == trials and latest.warmup == matrix.settings.warmup)
        if resumable:
            first = max(r.run for r in latest_recs) + 1
            out.append(PlannedCell(cell, latest, list(range(first, first + want_runs - complete))))
        else:
            out.append(PlannedCell(cell, context, list(range(want_runs))))
    return out


def run_estimate(matrix, store: Path, history: list, redo: bool = False):
    """Return the bench.results.estimate.Estimate of running the matrix into `store`, from the stored records."""
    from bench.results import query
    from bench.results.estimate import estimate_run
    from bench.workloads.workload import cached_workload

    store = Path(store)
    target = [query.load([store])] if store.exists() else []
    extra = [query.load([h]) for h in history]
    records = [r for recs in target + extra for r in recs]
    st = matrix.settings
    context = new_context("run", matrix=matrix.name, baseline=matrix.baseline, gpu_memory_gb=st.gpu_memory_gb,
                          runs=st.runs, trials=st.trials, warmup=st.warmup)
    planned = plan(matrix, [r for recs in target for r in recs], context, redo)
    tokens: dict = {}

    def output_tokens(spec):
        if spec not in tokens:
            tokens[spec] = sum(r.output_len for r in cached_workload(spec, Path("workloads/cache"))[0].requests)
        return tokens[spec]

    return estimate_run(matrix, planned, records, output_tokens)


def statuses_text(statuses: dict) -> str:
    """Return '24 ok, 2 oom' (records written, by status), or 'nothing new'."""
    return ", ".join(f"{n} {status}" for status, n in statuses.items()) or "nothing new"


def run_matrix(
    matrix: Matrix,
    store_path: str | Path,
    *,
    redo: bool = False,
    engines_dir: str | Path = "engines",
    workload_cache: str | Path = "workloads/cache",
    show_progress: bool = True,
    console=None,
    command: str = "run",
) -> RunSummary:
    """Run every cell of the matrix not yet stored, `runs` fresh worker processes each; return what happened.

    Runs go round the matrix (every group's run 0, then every group's run 1, ...), so slow drift
    of the machine spreads over all cells instead of biasing the last ones. The executor
    (matrix.settings.executor; bench.execution.executors) runs as many build groups at once as
    it has GPUs for; this process alone writes the store, as each event arrives.
    """
    from bench.backends import engine_artifact
    from bench.execution.executors import make_executor, run_chains
    from bench.execution.progress import MatrixProgress
    from bench.machine.memory_cap import check_cap
    from bench.results.query import check_store_path, load_cells
    from bench.runner.engines import artifacts_for, engine_for
    from bench.workloads.workload import cached_workload

    started = time.monotonic()
    settings = matrix.settings
    check_cap(settings.gpu_memory_gb, _capped_devices(matrix))  # before any work
    artifacts = artifacts_for(matrix)  # before any work: a missing artifact or one made elsewhere is refused
    store = ResultStore(check_store_path(store_path, must_exist=False))
    with store.writer():
        context = new_context(command, matrix=matrix.name, baseline=matrix.baseline, gpu_memory_gb=settings.gpu_memory_gb,
                              runs=settings.runs, trials=settings.trials, warmup=settings.warmup,
                              tuning_builds=settings.tuning_builds)
        digests = {h: engine_artifact.read_manifest(p)["digest"] for h, p in artifacts.items()}
        # Only this matrix's cells, without samples: a store of any size plans in the matrix's own memory.
        stored = load_cells(store.path, {c.cell_id for c in matrix.cells}) if store.path.exists() else []
        todo = plan(matrix, stored, context, redo, digests)
        total = len(matrix.cells) * settings.runs * settings.tuning_builds
        summary = RunSummary(planned=total * settings.trials, run_id=context.run_id)
        summary.skipped = summary.planned - sum(len(p.runs) for p in todo) * settings.trials

        # (build key, tuning build or None) -> its planned cells, in matrix order. Each tuning build is a
        # group of its own (its own engine folder), so an executor with several GPUs builds them at once.
        groups: OrderedDict = OrderedDict()
        for p in todo:
            if settings.tuning_builds > 1:
                for b in sorted({r // settings.runs for r in p.runs}):
                    runs = [r for r in p.runs if r // settings.runs == b]
                    groups.setdefault((p.cell.build_key(), b), []).append(PlannedCell(p.cell, p.context, runs))
            else:
                groups.setdefault((p.cell.build_key(), None), []).append(p)
        executor = make_executor(settings, [k for k, _ in groups]) if groups else None  # bad placement: an error now
        workloads: dict = {}
        try:
            for p in todo:
                if p.cell.workload not in workloads:
                    workloads[p.cell.workload] = cached_workload(p.cell.workload, Path(workload_cache))
        except BaseException:
            if executor is not None:
                executor.close()  # run_chains closes it otherwise (a Ray connection this process started)
            raise

        failed: set[str] = set()  # cells whose run failed: their later runs are not started
        rounds = max((len(p.runs) for p in todo), default=0)
        with MatrixProgress(total, total - sum(len(p.runs) for p in todo), enabled=show_progress, console=console,
                            unit="run" if settings.runs * settings.tuning_builds > 1 else "cell") as progress:

            def chain(group, members: list[PlannedCell]):
                key, build = group
                def round_k(k: int):
                    planned = []
                    for p in members:
                        if k >= len(p.runs):
                            continue
                        if p.cell.cell_id in failed:
                            progress.advance(p.cell.label, "skipped")
                            continue
                        planned.append(p)
                    if not planned:
                        return None
                    dest, engine = engine_for(key, build, artifacts, settings, Path(engines_dir),
                                              planned[0].context.run_id)
                    return _group_round(key, planned, k, matrix, store, workloads, summary, failed, progress,
                                        dest, store_path, engine)
                return round_k

            if executor is not None:
                run_chains(executor, [chain(key, members) for key, members in groups.items()], rounds, progress)
    summary.elapsed_s = time.monotonic() - started
    return summary


def _capped_devices(matrix: Matrix) -> list[str]:
    """Return the devices a memory cap must fit: the local pool's GPUs, else the cells' devices (none for Ray's)."""
    settings = matrix.settings
    if settings.executor == "ray":
        return []  # the cluster's GPUs are not this machine's: the workers apply (and check) the cap
    if settings.devices and settings.devices != ("all",):
        return list(settings.devices)
    return [c.device for c in matrix.cells]


def _group_round(key, planned: list[PlannedCell], k: int, matrix: Matrix, store: ResultStore, workloads: dict,
                 summary: RunSummary, failed: set, progress, engines_dir, store_path, engine: dict | None = None):
    """Return the GroupRun of one build group's cells for their k-th run; its events store each outcome."""
    from bench.execution.executors import GroupRun, gpus_needed
    from bench.machine.memory_cap import env_for

    items = [GroupItem(p.cell, list(range(matrix.settings.trials)), str(workloads[p.cell.workload][1])) for p in planned]
    by_id = {p.cell.cell_id: p for p in planned}
    received = dict.fromkeys(by_id, 0)
    tok_s: dict[str, list] = {}  # each cell's output tok/s of this run's ok trials: their spread is warned about
    state = group_state(key)
    runs = matrix.settings.runs

    def on_event(event):
        kind = event.get("event")
        absorb_group_event(state, event)
        if kind == "placement":
            progress.current(f"building {key.backend}/{key.precision} ({key.key_hash[:8]})", None, slot=group.label)
        elif kind == "start":
            p = by_id[event["cell_id"]]
            progress.current(p.cell.label, event["trial"], run=(k, runs) if runs > 1 else None, slot=group.label)
        elif kind == "result":
            p = by_id[event["cell_id"]]
            record = new_record("measurement", p.cell, event, context=p.context, run=p.runs[k],
                                workload=workloads[p.cell.workload][0].summary(), build=state["build"],
                                environment=record_environment(state))
            store.append(record)
            busy = (record.extra.get("host_load") or {}).get("busy")
            if busy:  # once per cell: its other passes were measured on the same machine
                progress.warn(f"{p.cell.label}: measured on a busy machine ({'; '.join(busy)}): its figures may be "
                              "low and may not reproduce", key=f"busy {p.cell.cell_id}")
            for note in record.extra.get("notes") or ():  # what the backend found out (a server's refusals): once each
                progress.warn(note)
            summary.statuses[record.status] = summary.statuses.get(record.status, 0) + 1
            received[p.cell.cell_id] += 1
            if record.ok:
                tok_s.setdefault(p.cell.cell_id, []).append((record.metrics or {}).get("output_throughput"))
            if received[p.cell.cell_id] == matrix.settings.trials:  # the run's trials of this cell are in
                for w in trial_spread_warnings(tok_s.pop(p.cell.cell_id, [])):
                    progress.warn(f"{p.cell.label}: {w}", key=f"spread {p.cell.cell_id}")
            # A failed trial ends its cell (the worker skips the remaining trials).
            if not record.ok:
                failed.add(p.cell.cell_id)
            if not record.ok or received[p.cell.cell_id] == matrix.settings.trials:
                progress.advance(p.cell.label, record.status)

    job = GroupJob(
        build_key=key,
        items=items,
        engines_dir=Path(engines_dir),
        warmup=matrix.settings.warmup,
        build_timeout_s=matrix.settings.build_timeout_s,
        cell_timeout_s=matrix.settings.timeout_s,
        log_dir=Path(store_path).parent / "logs", log_prefix=f"{Path(store_path).stem}-{key.key_hash}",
        env=env_for(matrix.settings.gpu_memory_gb),
        engine=engine or {},
    )
    group = GroupRun(job=job, gpus=gpus_needed(key), on_event=on_event)
    return group


def trial_spread_warnings(values: list) -> list[str]:
    """Return the warning of a run's trials of a cell whose output tok/s differ past pyperf's 10 % rule
    (bench.results.stats.run_warnings), a sign of a busy machine the load figures may have missed."""
    from bench.results.stats import run_spread

    known = [v for v in values if isinstance(v, (int, float))]
    if len(known) < 2:
        return []
    return [w for w in run_spread([known], "output_throughput").warnings if "trials inside" in w]


def group_state(key) -> dict:
    """Return the context a build group's records share, before its worker has said anything."""
    return {"env": {}, "build": {"key_hash": key.key_hash}, "placement": None}


def record_environment(state: dict) -> dict:
    """Return a record's environment: its worker's fingerprint, plus where the executor placed it."""
    if not state.get("placement"):
        return state["env"]
    return {**state["env"], "placement": state["placement"]}


def absorb_group_event(state: dict, event: dict) -> None:
    """Update a group's record context from a worker event (its environment, its build, its placement)."""
    if event.get("event") == "placement":
        state["placement"] = event["placement"]
    elif event.get("event") == "env":
        state["env"] = event["environment"]
    elif event.get("event") == "built":
        state["build"] = {"key_hash": state["build"]["key_hash"], **{k: v for k, v in event.items() if k != "event"}}


def run_probe_group(job, key) -> tuple[dict, list[dict]]:
    """Return (the group's record context, its result events) after one build group ran through the supervisor.

    The shape every probe shares (OOM probes, capacity probes): one job, its events folded into
    the group's state as the run driver folds them, its results kept for the caller's records.
    """
    from bench.execution.supervisor import supervise_group

    state = group_state(key)
    results: list[dict] = []

    def on_event(event):
        absorb_group_event(state, event)
        if event.get("event") == "result":
            results.append(event)

    supervise_group(job, on_event)
    return state, results
