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

from bench.errors import BenchInputError
from bench.execution.supervisor import GroupItem, GroupJob
from bench.machine.cores import DEFAULT_POLICY
from bench.results.records import FINAL_FAILURES, RunContext, new_context, new_record
from bench.results.store import ResultStore
from bench.spec.cells import Cell, Matrix


@dataclass
class RunSummary:
    planned: int = 0  # (cell, run, trial) triples in the matrix
    skipped: int = 0  # already stored
    statuses: dict = field(default_factory=dict)  # status -> count of records written
    elapsed_s: float = 0.0
    run_id: str = ""  # the run context this invocation's records carry ("" when it measures nothing)
    resumed: bool = False  # run_id is an earlier, unfinished invocation of the same identity
    processes: int = 0  # worker processes the matrix asks for (cells x runs x tuning builds)
    to_measure: int = 0  # of them, those this invocation measures
    why_new: str = ""  # why an earlier unfinished run was not resumed ("" when none was, or it was)
    windows: int = 0  # profile windows stored (`--profile-window`: bench.runner.windows)
    profile_store: str = ""  # where (`--profile-window`), else ""

    def context_line(self) -> str:
        """Return what the console says of the run context: resumed, new, or nothing to measure."""
        stored = self.processes - self.to_measure
        if not self.to_measure:
            return f"nothing to measure: all {self.processes} process(es) already stored"
        if self.resumed:
            return f"resuming run {self.run_id}: {stored} of {self.processes} processes stored"
        return (f"new run {self.run_id}: {self.to_measure} process(es) to measure"
                + (f", {stored} of {self.processes} already stored" if stored else "")
                + (f" ({self.why_new})" if self.why_new else ""))


@dataclass
class PlannedCell:
    """A cell still to measure: the run context its records join and the run indices to measure."""

    cell: Cell
    context: RunContext
    runs: list[int]


def invocation_digest(matrix: Matrix, artifacts: dict[str, str] | None = None) -> str:
    """Return the identity of a `bench run` invocation: a digest of its matrix, cells and the settings that shape
    what it measures (runs, trials, warm-up, tuning builds, memory cap, executor and devices, engine artifacts, and
    the cores its trials run on and their order where not the default).

    Timeouts and trust are left out: a longer timeout after a hang is the same invocation, resumed.
    artifacts: {build key hash: digest} of the engines it loads (none: built here)."""
    from bench.spec.cells import short_hash

    st = matrix.settings
    return short_hash({"matrix": matrix.name, "cells": sorted(c.cell_id for c in matrix.cells), "runs": st.runs,
                       "trials": st.trials, "warmup": st.warmup, "tuning_builds": st.tuning_builds,
                       "gpu_memory_gb": st.gpu_memory_gb, "executor": st.executor, "ray_address": st.ray_address,
                       "devices": list(st.devices), "artifacts": sorted((artifacts or {}).items()),
                       "retune_on_mismatch": st.retune_on_mismatch,
                       **({"cores": st.cores} if st.cores != DEFAULT_POLICY else {}),
                       **({"order": st.order} if st.order != "cells" else {})})


def plan(matrix: Matrix, records, context: RunContext, redo: bool = False,
         artifacts: dict[str, str] | None = None) -> list[PlannedCell]:
    """Return the cells still to measure, in matrix order, each with its context and runs.

    A cell is done when its latest run context (at this memory cap) holds `runs` runs of `trials`
    ok trials, or ended in a final failure (oom). The rest join one run context: the latest context of
    the matrix's cells when it is this same invocation (invocation_digest, at the same commit), unfinished,
    which is resumed (a cell's missing runs join it); else this invocation's new one (`context`, given its
    identity), where every such cell starts afresh. So a new invocation never appends its processes to
    an earlier one's context. A run (one worker process) counts only when all its trials are ok.
    A context counts only for the same kernels' source: as many tuning builds, and the same engine
    artifact (artifacts: {build key hash: digest}, or none: built here).
    """
    from dataclasses import replace

    want_runs, trials = matrix.settings.runs * matrix.settings.tuning_builds, matrix.settings.trials
    context = replace(context, invocation=invocation_digest(matrix, artifacts))
    latest = latest_contexts(matrix, records)
    wanted = {cell.cell_id: (artifacts or {}).get(cell.build_key().key_hash) for cell in matrix.cells}

    def same_kernels(cell_id: str) -> bool:
        ctx, recs = latest[cell_id]
        return ctx.tuning_builds == matrix.settings.tuning_builds and all(
            r.kernels.get("artifact") == wanted[cell_id] for r in recs if r.ok)

    target = context
    last = resumable_context(latest, context) if not redo else None
    if last is not None and all(same_kernels(c) for c, (ctx, _) in latest.items() if ctx.run_id == last.run_id):
        target = last
    out = []
    for cell in matrix.cells:
        if redo or cell.cell_id not in latest:
            out.append(PlannedCell(cell, context if redo else target, list(range(want_runs))))
            continue
        ctx, recs = latest[cell.cell_id]
        if not any(r.ok for r in recs) and recs[-1].status in FINAL_FAILURES:
            continue  # a batch that did not fit does not fit on a re-run (--redo measures again)
        if not same_kernels(cell.cell_id):  # measured from other kernels (built here, another artifact, other builds)
            out.append(PlannedCell(cell, target, list(range(want_runs))))
            continue
        ok_trials: dict[int, int] = {}
        for r in recs:
            if r.ok:
                ok_trials[r.run] = ok_trials.get(r.run, 0) + 1
        complete = sum(1 for n in ok_trials.values() if n >= min(trials, ctx.trials))
        if complete >= want_runs:
            continue
        if ctx.run_id == target.run_id:  # the invocation resumed: the cell's missing runs join it
            first = max(r.run for r in recs) + 1
            out.append(PlannedCell(cell, target, list(range(first, first + want_runs - complete))))
        else:
            out.append(PlannedCell(cell, target, list(range(want_runs))))
    return out


def latest_contexts(matrix: Matrix, records) -> dict[str, tuple[RunContext, list]]:
    """Return {cell_id: (its latest run context, that context's records)} of the matrix's cells' measurements at its
    memory cap."""
    from bench.results.selection import _contexts

    by_cell: dict[str, list] = {}
    for r in records:
        if r.kind == "measurement" and r.gpu_memory_gb == matrix.settings.gpu_memory_gb:
            by_cell.setdefault(r.cell_id, []).append(r)
    return {cell.cell_id: _contexts(by_cell[cell.cell_id])[0] for cell in matrix.cells if cell.cell_id in by_cell}


def resumable_context(latest: dict, context: RunContext) -> RunContext | None:
    """Return the latest run context of the matrix's cells when it is `context`'s invocation at the same commit (the
    one to resume), else None. latest: {cell_id: (its latest context, its records)}."""
    if not latest:
        return None
    last = max((ctx for ctx, _ in latest.values()), key=lambda c: c.started_at or 0.0)
    same = (last.invocation is not None and last.invocation == context.invocation and last.command == context.command
            and last.commit == context.commit and last.dirty == context.dirty)
    return last if same else None


def why_not_resumed(matrix: Matrix, records, context: RunContext, redo: bool = False,
                    artifacts: dict[str, str] | None = None) -> str:
    """Return why `plan` started a new run context rather than resume the latest one of the matrix's cells, in words
    ("" when there is none)."""
    from dataclasses import replace

    if redo:
        return "--redo"
    latest = latest_contexts(matrix, records)
    if not latest:
        return ""
    context = replace(context, invocation=invocation_digest(matrix, artifacts))
    last = max((ctx for ctx, _ in latest.values()), key=lambda c: c.started_at or 0.0)
    if resumable_context(latest, context) is not None:
        return f"run {last.run_id} ran other kernels (its engine artifacts or tuning builds differ)"
    changed = [f"{k} {getattr(last, k)} -> {getattr(context, k)}" for k in ("runs", "trials", "warmup", "tuning_builds")
               if getattr(last, k) != getattr(context, k)]
    if (last.commit, last.dirty) != (context.commit, context.dirty):
        changed.append("another commit" if last.commit != context.commit else "the tree's dirty flag changed")
    what = ", ".join(changed) if changed else "its cells or settings differ"
    return f"run {last.run_id} is another invocation: {what}"


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
                          runs=st.runs, trials=st.trials, warmup=st.warmup, tuning_builds=st.tuning_builds)
    digests = _artifact_digests(matrix)
    planned = plan(matrix, [r for recs in target for r in recs], context, redo, digests)
    tokens: dict = {}

    def output_tokens(spec):
        if spec not in tokens:
            tokens[spec] = sum(r.output_len for r in cached_workload(spec, Path("workloads/cache"))[0].requests)
        return tokens[spec]

    return estimate_run(matrix, planned, records, output_tokens)


def _artifact_digests(matrix: Matrix) -> dict[str, str]:
    """Return {build key hash: digest} of the engine artifacts the matrix's cells load, from their manifests alone
    (`run_matrix` checks each artifact whole before it runs)."""
    from bench.backends import engine_artifact

    if not matrix.settings.engines:
        return {}
    found = engine_artifact.find(matrix.settings.engines)
    keys = {c.build_key().key_hash for c in matrix.cells}
    return {h: manifest["digest"] for h, (_, manifest) in found.items() if h in keys}


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
    accuracy_capture: bool = False,
    all_cells=None,
    profile_window: bool = False,
) -> RunSummary:
    """Run every cell of the matrix not yet stored, `runs` fresh worker processes each; return what happened.

    Runs go round the matrix (every group's run 0, then every group's run 1, ...), so slow drift
    of the machine spreads over all cells instead of biasing the last ones. The executor
    (matrix.settings.executor; bench.execution.executors) runs as many build groups at once as
    it has GPUs for; this process alone writes the store, as each event arrives.

    accuracy_capture: the first run of each cell `bench accuracy` can score from its capture also feeds the accuracy
    prompts through the timed model after its trials (capture_specs; bench.execution.accuracy_capture); its baseline is
    found among all_cells (the matrix before --only; default its cells).

    profile_window: every run process of each profilable cell profiles one decode-step window through its timed model
    after its last timed pass, stored as a Profile record of that process (bench.runner.windows).
    """
    import contextlib

    from bench.backends import engine_artifact
    from bench.execution.executors import make_executor, run_chains
    from bench.execution.progress import MatrixProgress
    from bench.machine.memory_cap import check_cap
    from bench.results.query import check_store_path, load_cells
    from bench.runner.engines import artifacts_for, engine_for
    from bench.runner.windows import plan_windows
    from bench.workloads.workload import cached_workload

    started = time.monotonic()
    settings = matrix.settings
    check_cap(settings.gpu_memory_gb, _capped_devices(matrix))  # before any work
    artifacts = artifacts_for(matrix)  # before any work: a missing artifact or one made elsewhere is refused
    store = ResultStore(check_store_path(store_path, must_exist=False))
    windows = plan_windows(matrix, console) if profile_window else None  # before any work
    profiles = ResultStore(windows.store) if windows else None
    with store.writer(), profiles.writer() if profiles else contextlib.nullcontext():
        context = new_context(command, matrix=matrix.name, baseline=matrix.baseline, gpu_memory_gb=settings.gpu_memory_gb,
                              runs=settings.runs, trials=settings.trials, warmup=settings.warmup,
                              tuning_builds=settings.tuning_builds)
        digests = {h: engine_artifact.read_manifest(p)["digest"] for h, p in artifacts.items()}
        # Only this matrix's cells, without samples: a store of any size plans in the matrix's own memory.
        stored = load_cells(store.path, {c.cell_id for c in matrix.cells}) if store.path.exists() else []
        todo = plan(matrix, stored, context, redo, digests)
        total = len(matrix.cells) * settings.runs * settings.tuning_builds
        to_measure = sum(len(p.runs) for p in todo)
        run_id = todo[0].context.run_id if todo else ""  # every planned cell joins one context (`plan`)
        resumed = bool(todo) and run_id != context.run_id
        summary = RunSummary(planned=total * settings.trials, run_id=run_id, resumed=resumed, processes=total,
                             to_measure=to_measure,
                             why_new=why_not_resumed(matrix, stored, context, redo, digests) if todo and not resumed else "")
        summary.skipped = summary.planned - to_measure * settings.trials
        summary.profile_store = str(windows.store) if windows else ""
        if console is not None:
            console.print(summary.context_line(), highlight=False, markup=False)

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

        captures = capture_specs(matrix, all_cells or matrix.cells, workload_cache, console) if accuracy_capture else {}
        failed: set[str] = set()  # cells whose run failed: their later runs are not started
        rounds = max((len(p.runs) for p in todo), default=0)
        with MatrixProgress(total, total - sum(len(p.runs) for p in todo), enabled=show_progress, console=console,
                            unit="process" if settings.runs * settings.tuning_builds > 1 else "cell") as progress:

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
                                        dest, store_path, engine, captures if k == 0 else {}, (windows, profiles))
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
                 summary: RunSummary, failed: set, progress, engines_dir, store_path, engine: dict | None = None,
                 captures: dict | None = None, windows: tuple = (None, None)):
    """Return the GroupRun of one build group's cells for their k-th run; its events store each outcome.
    captures: {cell_id: accuracy capture spec} of the cells whose worker captures after its trials (this run only);
    windows: (the run's WindowPlan, its profile store), or (None, None): no window (bench.runner.windows)."""
    from bench.execution.executors import GroupRun, gpus_needed
    from bench.machine.failures import first_line
    from bench.machine.memory_cap import env_for
    from bench.runner.windows import window_job, window_record, window_warning

    captures = captures or {}
    window_plan, profiles = windows
    items = [GroupItem(p.cell, list(range(matrix.settings.trials)), str(workloads[p.cell.workload][1]),
                       _with_run(captures.get(p.cell.cell_id), p.context),
                       window_job(window_plan, matrix.name, p.cell, p.context, p.runs[k])) for p in planned]
    by_id = {p.cell.cell_id: p for p in planned}
    received = dict.fromkeys(by_id, 0)
    ended: set[str] = set()  # cells of this round counted by the progress: a failed build fails every trial, once each
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
        elif kind == "accuracy_capture" and event.get("phase") == "done" and event.get("status") != "ok":
            progress.warn(f"{by_id[event['cell_id']].cell.label}: its accuracy capture failed ({event.get('status')}: "
                          f"{first_line(event.get('error'))}); its timed figures stand, and bench "
                          "accuracy measures it in a session of its own", key=f"capture {event['cell_id']}")
        elif kind == "profile_window" and event.get("phase") == "done":
            p = by_id[event["cell_id"]]
            if event.get("status") != "ok":
                progress.warn(window_warning(event, p.cell.label, p.runs[k]), key=f"window {p.cell.cell_id} {p.runs[k]}")
            else:
                profiles.append(window_record(event, p.cell, p.context, p.runs[k], workloads[p.cell.workload][0].summary(),
                                              state["build"], record_environment(state)))
                summary.windows += 1
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
            if p.cell.cell_id not in ended and (not record.ok or received[p.cell.cell_id] == matrix.settings.trials):
                ended.add(p.cell.cell_id)
                progress.advance(p.cell.label, record.status, record.error)

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
        cores=matrix.settings.cores,
        order=matrix.settings.order,
    )
    group = GroupRun(job=job, gpus=gpus_needed(key), on_event=on_event)
    return group


def captured_cells(matrix: Matrix, all_cells) -> list[tuple[Cell, Cell]]:
    """Return [(cell, its accuracy baseline)] of the matrix's cells `bench run --accuracy-capture` captures: hf cells,
    not a baseline themselves, whose workload has reference answers, under a reference that is not the baseline's
    own greedy tokens. The one rule, for the run (capture_specs) and the study's estimate."""
    from bench.spec.baseline import accuracy_baseline
    from bench.workloads.references import has_answers

    if matrix.accuracy.reference == "baseline-greedy":
        return []
    out = []
    for cell in matrix.cells:
        if cell.backend != "hf" or not has_answers(cell.workload):
            continue
        try:
            base = accuracy_baseline(cell, all_cells, matrix.baseline)
        except BenchInputError:
            continue  # no single baseline: `bench accuracy` refuses the cell itself, with the reason
        if base.cell_id != cell.cell_id:  # a baseline's session measures it (its floors need the model)
            out.append((cell, base))
    return out


def capture_specs(matrix: Matrix, all_cells, workload_cache, console=None) -> dict:
    """Return {cell_id: accuracy capture spec} of the cells captured_cells names, the accuracy prompts and answers
    written now by the rule `bench accuracy` uses (bench.workloads.references.accuracy_workload)."""
    from bench.execution.accuracy_capture import capture_dir, capture_key
    from bench.workloads.references import accuracy_workload, answers_path

    settings = matrix.accuracy
    out, files = {}, {}
    for cell, base in captured_cells(matrix, all_cells):
        if base.workload not in files:
            try:
                _wl, wl_file, _answers = accuracy_workload(base.workload, settings, Path(workload_cache))
                files[base.workload] = (str(Path(wl_file).resolve()), str(answers_path(wl_file).resolve()))
            except BenchInputError as exc:  # answers that cannot be read: no capture; bench accuracy says the same error
                files[base.workload] = None
                if console is not None:
                    console.print(f"accuracy capture: none on workload {base.workload.name!r} ({exc})", highlight=False,
                                  markup=False)
        if files[base.workload] is None:
            continue
        wl_file, answers_file = files[base.workload]
        out[cell.cell_id] = {"folder": str(capture_dir(matrix.name, cell.cell_id, settings)), "workload_file": wl_file,
                             "answers_file": answers_file, "settings": capture_key(settings),
                             "max_total_len": base.workload.max_total_len}
    return out


def _with_run(spec: dict | None, context) -> dict | None:
    """Return a capture spec with the run that makes it (its run id and commit, said in capture.json)."""
    if spec is None:
        return None
    return {**spec, "run": {"run_id": context.run_id, "commit": context.commit, "dirty": context.dirty}}


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
