"""The driver of `bench accuracy`: every selected cell against the matrix's baseline cell of the same model.

`accuracy_matrix` plans the pairs (`plan_accuracy`: every check before any work), reuses what the
store holds, and runs session processes (bench.accuracy.session, started through
bench.execution.launcher), each measuring through the cells' own runtime (bench.accuracy.runtime):

1. per baseline, a baseline session: the baseline's Reference (bench.accuracy.reference: its
   teacher-forced logits, greedy ids, noise floors) written under
   results/accuracy/<matrix>/<baseline cell_id>/<settings>/, and the cells that share its build key
   measured with the same loaded model;
2. per build key of the other cells, a cell session against that Reference (a trtllm or served
   cell: one session each).

With `parallel` N (`bench accuracy --parallel N`, a study's [study.accuracy] `parallel`), N sessions
run at once (bench.execution.session_pool: a baseline's session before the others of its group,
different baselines' groups side by side); accuracy figures do not depend on timing, so they are
the serial run's. A session that ran out of memory while another ran beside it is run again alone,
and its records say so (`rerun_alone`); every record says how many other sessions ran beside its
own (`concurrent_sessions`: its seconds are then not a solo time).

It builds one `accuracy` record per cell (bench.results.records.new_record, with the invocation's
run context): the session's figures, the determinism across processes, and the verdict judged by
bench.accuracy.verdict against the Reference's floors. Each record's text is bench.accuracy.text's.
`bench study` calls `accuracy_matrix` too.

Resume: a baseline whose store holds an ok record of the same settings, and whose Reference is
on disk and intact, is not measured again; a cell whose store holds an ok record of the same
baseline, settings and Reference (its SHA-256) neither; --redo measures them again (a second
process, for the reproduction check).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BenchInputError

SESSION = "bench.accuracy.session"  # the session process's module (python -m)
# Backends whose logits this harness reads: hf in process (the loaded torch model). A baseline must be one.
LOGIT_BACKENDS = ("hf",)
# Cells read through their own API: trtllm's context logits (bench/accuracy/trtllm.py, written against 1.2.1, not
# run on hardware) and a served model's prompt logprobs (openai; generation parity only where it gives none).
CELL_BACKENDS = ("trtllm", "openai")
# What the session measures: a stored record is reused only if these match.
MEASURE_KEYS = ("prompts", "answer_tokens", "generate_tokens", "prefix_k", "reference")


def settings_with(spec, prompts=None, answer_tokens=None, generate_tokens=None):
    """Return the matrix's AccuracySpec with the command line's overrides, checked."""
    changes = {k: v for k, v in (("prompts", prompts), ("answer_tokens", answer_tokens),
                                 ("generate_tokens", generate_tokens)) if v is not None}
    if "generate_tokens" in changes and spec.prefix_k > changes["generate_tokens"]:
        changes["prefix_k"] = changes["generate_tokens"]
    out = replace(spec, **changes)
    out.check()
    return out


def plan_accuracy(matrix, all_cells, settings) -> list[tuple]:
    """Return [(cell, its baseline cell or None for a baseline's own session)], baselines first; BenchInputError
    for a selection that cannot be measured (before any work)."""
    from bench.backends.declaration import tensor_parallel_size
    from bench.spec.baseline import accuracy_baseline
    from bench.workloads.references import has_answers

    if not matrix.cells:
        raise BenchInputError("no cell to measure: the selection (--only) matches nothing")
    pairs, baselines = [], {}
    for cell in matrix.cells:
        base = accuracy_baseline(cell, all_cells, matrix.baseline)
        if base.backend not in LOGIT_BACKENDS:
            raise BenchInputError(
                f"baseline {base.label}: bench accuracy reads the baseline's logits in process, from backends "
                f"{list(LOGIT_BACKENDS)}; make an hf cell of the same model the baseline (baseline = {{ backend = \"hf\", ... }})")
        if cell.backend not in LOGIT_BACKENDS + CELL_BACKENDS:
            raise BenchInputError(
                f"{cell.label}: backend {cell.backend!r} is not measured by bench accuracy (it measures "
                f"{list(LOGIT_BACKENDS + CELL_BACKENDS)}): narrow with --only backend=hf")
        for c in (cell, base):
            if c.backend in ("hf", "trtllm") and tensor_parallel_size(c.options_dict) > 1:
                raise BenchInputError(
                    f"{c.label}: tensor_parallel_size={tensor_parallel_size(c.options_dict)} runs as several ranks (torchrun, MPI); an "
                    "accuracy session loads its models in one process: measure a tensor_parallel_size = 1 cell of the "
                    "same precision (the numerics it checks are the same)")
        if settings.reference == "dataset" and not has_answers(cell.workload):
            raise BenchInputError(
                f"workload {cell.workload.name!r} (source {cell.workload.source!r}) has no reference answers and "
                "[accuracy] reference = 'dataset' allows no fallback: use a sharegpt workload, or set reference = "
                "'auto' (the baseline's own greedy continuation is then the reference)")
        baselines.setdefault(base.cell_id, base)
        if cell.cell_id != base.cell_id:
            pairs.append((cell, base))
    return [(b, None) for b in baselines.values()] + pairs


def accuracy_matrix(matrix, all_cells, settings, store_path: Path, *, redo: bool = False, timeout: float = 1800,
                    printer=print, parallel: int = 1) -> tuple[list, int]:
    """Measure every selected cell against its baseline; return (the Accuracy records, how many failed).

    Per baseline: its session (unless its record and Reference are stored), then one session per
    build key of the cells still to measure (the module docstring says which); `parallel` sessions at
    a time (`accuracy_groups`). Each baseline's lines are printed once it and those before it are done.
    """
    from bench.accuracy.text import accuracy_text
    from bench.checks import check_number
    from bench.interrupts import sigterm_as_ctrl_c
    from bench.machine.failures import first_line
    from bench.results import query
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    check_number(timeout, "--timeout", above=0, hint="seconds per cell before its session is killed")
    check_parallel(parallel, "--parallel")
    plan = plan_accuracy(matrix, all_cells, settings)
    store_path = query.check_store_path(store_path, must_exist=False)
    stored = query.accuracies(query.load([store_path])) if store_path.exists() else []
    context = new_context("accuracy", matrix=matrix.name, baseline=matrix.baseline)
    records, failed = [], 0

    def said(base, group, done) -> None:
        nonlocal failed
        for cell, _ in group:
            record = done[cell.cell_id]
            records.append(record)
            if not record.ok:
                failed += 1
                print(f"{cell.label}: {record.status}: {first_line(record.error)} (whole text in {store_path})",
                      file=sys.stderr)
            else:
                printer(accuracy_text(cell, record))

    groups = [(base, [(base, None)] + [(c, b) for c, b in plan if b is not None and b.cell_id == base.cell_id])
              for base in [c for c, b in plan if b is None]]
    # SIGTERM (`timeout`, a job's end) as Ctrl-C: every running session's process group is killed, what is stored stays.
    with sigterm_as_ctrl_c(), ResultStore(store_path).writer() as store:
        accuracy_groups(groups, stored, matrix, settings, context, redo, timeout, store, printer, parallel, said)
    print(f"accuracy records: {store_path}", file=sys.stderr)
    return records, failed


def check_parallel(value, what: str) -> int:
    """Return how many accuracy sessions may run at once, checked (a positive integer); BenchInputError naming the fix."""
    from bench.checks import check_number

    check_number(value, what, integer=True, minimum=1,
                 hint="how many accuracy sessions run at once (1: one after another, the default)")
    return value


def measure_key(settings, base) -> dict:
    """Return what a stored record must match to be reused: its baseline and the session's settings."""
    return {"baseline": base.cell_id if base is not None else None,
            **{k: getattr(settings, k) for k in MEASURE_KEYS}}


def reference_dir(matrix_name: str, base, settings) -> Path:
    """Return the folder of a baseline's Reference for these settings (results/accuracy/<matrix>/<cell>/<settings>)."""
    from bench.spec.cells import short_hash

    return (Path("results") / "accuracy" / matrix_name / base.cell_id / short_hash(measure_key(settings, None))).resolve()


def _latest(records):
    return max(records, key=lambda r: (r.context.started_at or 0, r.ended_at or 0)) if records else None


def accuracy_group(base, group: list, stored: list, matrix, settings, context, redo: bool, timeout: float, store,
                   printer) -> dict:
    """Return {cell_id: Accuracy record} for a baseline and the cells measured against it, every new record stored
    (its sessions one after another: `accuracy_groups` of this one group)."""
    done: dict = {}
    accuracy_groups([(base, group)], stored, matrix, settings, context, redo, timeout, store, printer, 1,
                    lambda _base, _group, got: done.update(got))
    return done


@dataclass
class _Group:
    """One baseline and the cells measured against it: its Reference's folder, the stored records each cell may reuse
    or compare with, the records so far, and how many of its sessions have not ended."""

    base: object
    pairs: list  # [(cell, its baseline or None)], the baseline first
    folder: Path
    earlier: dict  # cell_id -> its stored ok records of the same key
    done: dict = field(default_factory=dict)  # cell_id -> its Accuracy record
    left: int = 0  # sessions not ended (a re-run counts again)


def _prepare(base, group: list, stored: list, matrix, settings, redo: bool, printer) -> tuple[_Group, list]:
    """Return (the group, its sessions [(mode, cells)], the baseline's first): what the store holds is reused, the rest
    measured. The baseline's session comes first (unless reused); the cells of its build key ride along in it, the
    others get a session per build key (one each for trtllm and served cells)."""
    from bench.accuracy.reference import Reference

    g = _Group(base, group, reference_dir(matrix.name, base, settings), {})
    reference = None
    for cell, b in group:
        key = measure_key(settings, b)
        g.earlier[cell.cell_id] = [r for r in stored if r.cell_id == cell.cell_id and r.accuracy.get("key") == key and r.ok]
    if not redo and g.earlier[base.cell_id]:
        try:
            reference = Reference.open(g.folder)
        except BenchInputError as exc:
            printer(f"{base.label}: stored, but its reference cannot be used ({exc}): measured again")
        else:
            g.done[base.cell_id] = _latest(g.earlier[base.cell_id])
            printer(f"{base.label}: stored {g.done[base.cell_id].context.label} (--redo measures it again)")
    todo = []
    for cell, _b in group[1:]:
        prior = [r for r in g.earlier[cell.cell_id]
                 if reference is not None and r.accuracy.get("reference_sha256") == reference.meta.get("tensors_sha256")]
        if prior and not redo:
            g.done[cell.cell_id] = _latest(prior)
            printer(f"{cell.label}: stored {g.done[cell.cell_id].context.label} (--redo measures it again)")
        else:
            todo.append(cell)
    planned = sessions(base, todo, measure_baseline=base.cell_id not in g.done)
    g.left = len(planned)
    return g, planned


def accuracy_groups(groups: list, stored: list, matrix, settings, context, redo: bool, timeout: float, store, printer,
                    parallel: int = 1, on_group=None) -> None:
    """Measure each baseline's group [(base, [(cell, baseline or None)])], `parallel` sessions at a time, every new
    record stored; on_group(base, group, {cell_id: record}) is called for each group in plan order, as soon as it and
    the groups before it are done.

    The schedule is bench.execution.session_pool's: a group's baseline session first, then its other sessions; groups
    side by side; a session that ran out of memory beside another is run again alone (`_again_alone`) and its records say
    so; each record says how many other sessions ran beside its own (`concurrent_sessions`).
    """
    from bench.accuracy import early
    from bench.execution.session_pool import Pool, run_pool, session_size
    from bench.machine.failures import first_line
    from bench.results import query

    prepared = [_prepare(base, group, stored, matrix, settings, redo, printer) for base, group in groups]
    said = [0]  # groups handed to on_group, in plan order
    step_start = time.time()

    def flush() -> None:
        while said[0] < len(prepared) and prepared[said[0]][0].left == 0:
            g = prepared[said[0]][0]
            said[0] += 1
            if on_group is not None:
                on_group(g.base, g.pairs, g.done)

    made: dict[str, tuple] = {}  # cell_id -> (its early session's capture folder, sessions beside it, its GPU peak)

    def start(task):
        g, (mode, cells, _note) = prepared[task.group][0], task.payload
        base = g.base
        if mode == "capture":
            return _start_session(mode, base, cells, matrix, settings, g.folder, timeout * len(cells),
                                  specs=early.capture_specs(matrix, base, cells, settings, context))
        if mode == "cells" and base.cell_id in g.done and not g.done[base.cell_id].ok:
            now = time.time()
            session = {"status": "error", "error": f"its baseline {base.label} failed: {g.done[base.cell_id].error}",
                       "_started": now, "_ended": now}
            _store(g, task, session, settings, context, store, stored)
            g.left -= 1
            flush()
            return None
        captures = {} if redo else usable_captures(matrix.name, cells, settings, printer)
        captures.update({c.cell_id: made[c.cell_id][0] for c in cells if c.cell_id in made})
        return _start_session(mode, base, cells, matrix, settings, g.folder, timeout * (1 + len(cells)), captures)

    def ended(task, session: dict, again) -> None:
        """--parallel above 1: a line on stderr as each session ends (bench.accuracy.text.session_ended)."""
        if parallel > 1:
            from bench.accuracy.text import session_ended

            print(session_ended(task.payload, prepared[task.group][0].base, session, len(task.beside), again,
                                time.time() - step_start), file=sys.stderr, flush=True)

    def finish(task, session: dict):
        g = prepared[task.group][0]
        if task.payload[0] == "capture":  # no record: its pair scores what it captured, or measures what it did not
            ended(task, session, None)
            for cell in task.payload[1]:
                got = (session.get("cells") or {}).get(cell.cell_id) or session
                if got.get("status") == "ok":
                    made[cell.cell_id] = (got["folder"], len(task.beside), session.get("peak_memory_bytes"))
                else:
                    printer(f"{cell.label}: its early capture failed ({got.get('status')}: "
                            f"{first_line(got.get('error'))}): measured in its session instead")
            return None
        again = _again_alone(task.payload, session, len(task.beside)) if task.may_run_again else None
        ended(task, session, again)  # before _store takes the session's times
        if again is not None:  # what did not run out of memory stands: stored now (a whole session's OOM: nothing)
            g.left += 1
            failed = {c.cell_id for c in again[1]} | ({g.base.cell_id} if again[0] == "baseline" else set())
            _store(g, task, session, settings, context, store, stored, leave_out=failed, made=made)
        else:
            _store(g, task, session, settings, context, store, stored, made=made)
        g.left -= 1
        flush()
        return again

    pool = []  # per group: (its baseline's session, the gate, or None), [its other sessions]; each (mode, cells, note)
    sizes: dict[int, float | None] = {}  # id(payload) -> the memory its session is expected to hold, or None
    peaks = query.session_peaks(stored)
    for g, planned in prepared:
        payloads = [(mode, cells, None) for mode, cells in planned]
        gated = bool(payloads) and payloads[0][0] == "baseline"
        firsts = []  # (an early session's payload, the index among the others of the session that scores its captures)
        if gated and parallel > 1:
            for j, (mode, cells, _) in enumerate(payloads[1:]):
                usable = {} if redo else usable_captures(matrix.name, cells, settings, lambda _line: None)
                todo = [c for c in early.capturable(g.base, cells, settings) if c.cell_id not in usable]
                if mode == "cells" and todo:
                    firsts.append((("capture", todo, None), j))
        for p in payloads + [e for e, _ in firsts]:
            ids = ([g.base.cell_id] if p[0] == "baseline" else []) + [c.cell_id for c in p[1]]
            sizes[id(p)] = session_size([peaks.get(i) for i in ids])
        pool.append((payloads[0], payloads[1:], firsts) if gated else (None, payloads))
    flush()  # groups all of whose cells are stored
    capacity = shared_memory([g.base for g, _ in prepared]) if parallel > 1 else None
    schedule = Pool(pool, parallel, capacity, lambda p: sizes.get(id(p)))
    run_pool(schedule, start, finish)
    if schedule.held:
        unknown = sum(t.early and t.size is None for t in schedule.held)
        printer(f"memory: {len(schedule.held)} session(s) waited for others to end: their sessions' stored peaks and "
                f"those running did not fit the GPU's {capacity / 1e9:.0f} GB (bench accuracy --parallel)"
                + (f"; {unknown} of them early, of no known size, while two sessions of no known size ran" if unknown
                   else ""))


def shared_memory(cells) -> float | None:
    """Return the memory of the one GPU the sessions of these cells share (NVML's total, bytes), or None: CPU cells,
    cells on several devices, or NVML cannot say (the schedule then holds nothing back for memory)."""
    from bench.machine.environment import gpu_info, nvml_device

    devices = {c.device for c in cells}
    if len(devices) != 1 or not next(iter(devices)).startswith("cuda"):
        return None
    total = gpu_info(nvml_device(next(iter(devices)))).get("gpu_memory_bytes")
    return float(total) if isinstance(total, int) and total > 0 else None


def _again_alone(payload: tuple, session: dict, beside: int) -> tuple | None:
    """Return (mode, cells, why) of the session to run again alone, where what this one measured beside `beside` other
    sessions depended on their memory, else None: the whole session where it ran out of memory (bench.machine.failures
    classified it) or where the free memory cut its baseline's noise-floor batch (`batch_cut_by_memory`: the twin's
    tokens then saw other padding than alone); else the cells of it that ran out of memory. A baseline whose own
    figures stand is not measured again: its cells go to a session of their own ("cells", the same build key, against
    its Reference)."""
    from bench.machine.failures import first_line

    mode, cells, _note = payload
    floors = ((session.get("baseline") or {}).get("generation_floor") or {}).values() if mode == "baseline" else ()
    cut = [f.get("what") for f in floors if isinstance(f, dict) and f.get("batch_cut_by_memory")]
    if session.get("status") == "oom":
        again, why, error = (mode, cells), "out of memory", session.get("error")
    elif session.get("status") == "ok" and cut:
        again, why, error = (mode, cells), "its noise floor's greedy batch cut by the free memory", cut[0]
    elif session.get("status") == "ok":
        oom = [c for c in cells if ((session.get("cells") or {}).get(c.cell_id) or {}).get("status") == "oom"]
        if not oom:
            return None
        again, why, error = ("cells", oom), "out of memory", session["cells"][oom[0].cell_id].get("error")
    else:
        return None
    note = {"reason": f"{why} while {beside} other session(s) ran beside it: run again alone",
            "concurrent_sessions": beside, "first_error": first_line(error), "first_log": session.get("log")}
    return (*again, note)


def _store(g: _Group, task, session: dict, settings, context, store, stored: list, leave_out=frozenset(),
           made: dict | None = None) -> None:
    """Build, store and keep the records of a session's cells (and its baseline's, in a baseline session), less those
    left out (to be run again alone): each says how many sessions ran beside its own (or beside the early session that
    captured it, where more: made, {cell_id: (folder, sessions beside it, its peak)}) and, for a re-run, why. A cell
    scored from an early capture keeps that session's GPU peak (its scoring session holds none): the memory rule's
    size of its early session next time."""
    mode, cells, rerun = task.payload
    made = made or {}
    session = dict(session)
    started, ended = session.pop("_started"), session.pop("_ended")
    out = [(g.base, None)] if mode == "baseline" else []
    for cell, b, figures in _figures(session, out + [(c, g.base) for c in cells]):
        if cell.cell_id in leave_out:
            continue
        _folder, beside, peak = made[cell.cell_id] if cell.cell_id in made and figures.get("capture") else (0, 0, 0)
        record = _record(cell, b, figures, {**session, "peak_memory_bytes": peak} if peak else session, settings, g.folder,
                         g.earlier[cell.cell_id], context, started, ended, concurrent=max(len(task.beside), beside),
                         rerun=rerun)
        store.append(record)
        stored.append(record)
        g.done[cell.cell_id] = record


def sessions(base, cells: list, measure_baseline: bool = True) -> list[tuple[str, list]]:
    """Return the sessions that measure `cells` against `base`: [(mode, cells)], the baseline's first.

    The baseline's session ("baseline") writes its Reference and measures the hf cells of its own
    build key with the model it loaded; every other build key gets a session ("cells") that loads
    it once for its cells; a trtllm or served cell gets one of its own.
    """
    key_hash = base.build_key().key_hash

    def rides_along(c) -> bool:
        return measure_baseline and c.backend == "hf" and c.build_key().key_hash == key_hash

    out: list[tuple[str, list]] = [("baseline", [c for c in cells if rides_along(c)])] if measure_baseline else []
    by_key: dict = {}
    for c in cells:
        if not rides_along(c):
            by_key.setdefault(c.build_key().key_hash if c.backend == "hf" else c.cell_id, []).append(c)
    return out + [("cells", group) for group in by_key.values()]


def usable_captures(matrix_name: str, cells: list, settings, printer) -> dict[str, str]:
    """Return {cell_id: capture folder} of the cells captured for these settings by this checkout's commit (`bench run
    --accuracy-capture`, bench.execution.accuracy_capture, or an early session, bench.accuracy.early): scored from the
    capture instead of loaded again. A capture that is there but cannot be used is said, and its cell measured in the
    session."""
    from bench.execution.accuracy_capture import Capture, capture_dir
    from bench.machine.environment import project_commit

    out, code = {}, project_commit()
    for cell in cells:
        folder = capture_dir(matrix_name, cell.cell_id, settings)
        if cell.backend != "hf" or not folder.exists():
            continue
        try:
            Capture.open(folder, cell.cell_id, settings, check_digest=False, code=code)  # the session checks the digest
        except BenchInputError as exc:
            printer(f"{cell.label}: its capture is not used ({exc}): measured in the session")
            continue
        out[cell.cell_id] = str(folder)
    return out


def _start_session(mode: str, base, cells: list, matrix, settings, folder: Path, timeout: float,
                   captures: dict | None = None, specs: dict | None = None) -> _Running:
    """Start one accuracy session (bench.execution.launcher.start_session) and return it, running."""
    from bench.execution.launcher import start_session
    from bench.execution.supervisor import session_preload
    from bench.machine.memory_cap import ENV_VAR
    from bench.workloads.references import accuracy_workload, answers_path
    from bench.workloads.workload import cached_workload

    wl, wl_file, answers = accuracy_workload(base.workload, settings)
    speed = {c.cell_id: str(Path(cached_workload(c.workload, Path("workloads/cache"))[1]).resolve())
             for c in [base, *cells]}
    folder.mkdir(parents=True, exist_ok=True)
    name = "baseline" if mode == "baseline" else \
        f"{mode}-{cells[0].build_key().key_hash if cells[0].backend == 'hf' else cells[0].cell_id}"
    job = {"mode": mode, "baseline": base.to_dict(), "cells": [c.to_dict() for c in cells],
           "engines_dir": str(Path("engines").resolve()), "workload_file": str(Path(wl_file).resolve()),
           "answers_file": str(answers_path(wl_file).resolve()) if answers is not None else None,
           "speed_workload_files": speed, "reference_dir": str(folder), "settings": settings.to_dict(),
           "captures": captures or {}, "capture_specs": specs or {}}
    job_file, result_file, log_path = folder / f"{name}.job.json", folder / f"{name}.json", folder / f"{name}.log"
    job_file.write_text(json.dumps(job, indent=1))
    started = time.time()
    # No memory cap: the baseline's session holds its fp32 twin to measure the noise floor; the matrix's
    # gpu_memory_gb is for the speed run, and a cell is measured at its own batch size (docs/guide/accuracy.md).
    run = start_session([sys.executable, "-m", SESSION, str(job_file), str(result_file)], result_file, log_path,
                        timeout=timeout, what="accuracy session", drop_env=(ENV_VAR,),
                        preload=session_preload([base, *cells], SESSION))
    return _Running(run, {"log": str(log_path), "_started": started, "workload": wl.summary()})


class _Running:
    """A running accuracy session, as bench.execution.session_pool polls it: its result dict (its figures, or its
    failure, with when it started and ended) once it has ended."""

    def __init__(self, run, info: dict):
        self.run, self.info = run, info

    def poll(self) -> dict | None:
        out = self.run.poll()
        if out is None:
            return None
        session = out.result if out.status == "ok" else {"status": out.status, "error": out.error}
        return {**session, **self.info, "_ended": time.time()}

    def kill(self) -> None:
        self.run.kill()


def _figures(session: dict, pairs: list):
    """Yield (cell, its baseline or None, its figures) of a session's result, a failed session failing each cell."""
    for cell, b in pairs:
        if session.get("status") != "ok":
            figures = {"status": session["status"], "error": session.get("error")}
        else:
            figures = session["baseline"] if b is None else session["cells"].get(cell.cell_id)
            figures = figures or {"status": "error", "error": "the session returned no figures for this cell"}
        yield cell, b, figures


def _record(cell, b, figures: dict, session: dict, settings, folder: Path, earlier: list, context, started, ended, *,
            concurrent: int = 0, rerun: dict | None = None):
    """Return the Accuracy record of one cell's figures: the verdict judged here against the Reference's floors.

    concurrent: how many other sessions ran beside its session (its seconds are then not a solo time); rerun: why its
    session is a re-run alone (an out-of-memory beside others), or None."""
    from bench.accuracy.figures import differing_tokens
    from bench.accuracy.reference import META
    from bench.accuracy.verdict import judge
    from bench.results.records import new_record

    speed_n = (b or cell).workload.num_requests
    prompts_note = (f"the speed run's first {settings.prompts} prompts" if settings.prompts <= speed_n else
                    f"the speed run's {speed_n} prompts and the next {settings.prompts - speed_n} of the same sampling "
                    f"(seed {(b or cell).workload.seed})")
    acc: dict = {"key": measure_key(settings, b), "prompts_note": prompts_note,
                 "baseline": b.to_dict() if b is not None else None, "baseline_cell_id": (b or cell).cell_id,
                 "settings": settings.to_dict(), "log": session.get("log"), "reference_dir": str(folder),
                 "concurrent_sessions": concurrent}
    if session.get("peak_memory_bytes"):  # the session process's GPU peak: the size its next session is expected to be
        acc["session_peak_bytes"] = session["peak_memory_bytes"]
    if rerun is not None:
        acc["rerun_alone"] = rerun
    outcome = {"status": figures["status"], "metrics": None, "error": figures.get("error"), "started_at": started,
               "ended_at": ended}
    if figures["status"] == "ok":
        meta = json.loads((folder / META).read_text())
        acc.update({k: figures.get(k) for k in ("reference", "prompts", "sequences", "reference_digest", "parity",
                                                "floor", "generation_floor", "generation", "determinism", "greedy",
                                                "greedy_ids", "greedy_digest", "load_s", "measure_s", "random_weights",
                                                "answer_positions", "static_cache_len", "compile")})
        acc["reference_sha256"] = meta.get("tensors_sha256")
        acc["measured_through"] = figures.get("measured_through", "the cell's own runtime (its batch function)")
        if figures.get("timed_static_cache_len"):  # an accuracy prompt the speed run did not have was longer
            acc["timed_static_cache_len"] = figures["timed_static_cache_len"]
            acc["measured_through"] += (f", its static cache grown to {figures['static_cache_len']} tokens (the timed "
                                        f"pass: {figures['timed_static_cache_len']}) to hold prompts the speed run did "
                                        "not have")
        # "logits": full distributions; "logprobs-top-k": a server's prompt logprobs (KL a lower bound);
        # "generation": generation parity only. parity_reason says why, parity_method how.
        acc["mode"] = figures.get("mode", "logits")
        for k in ("parity_reason", "parity_method", "served_model", "logits_source", "generation_compared", "capture",
                  "capture_refused", "score_s", "phases_s"):
            if figures.get(k):
                acc[k] = figures[k]
        prior = [r for r in earlier if r.accuracy.get("greedy") is not None]
        if prior:  # reproduction across processes: the latest earlier record of the same cell and settings
            last = _latest(prior)
            acc["determinism_across_processes"] = {"previous_run_id": last.context.run_id,
                                                   **differing_tokens(last.accuracy["greedy"], figures["greedy"])}
        if b is not None:
            acc["floor_of_baseline"] = meta.get("floor")
            acc["generation_floor_of_baseline"] = meta.get("generation_floor")
            acc["verdict"] = judge(figures["parity"], meta.get("floor"), settings.thresholds(), figures.get("generation"),
                                   real_reference=figures["reference"] == "dataset",
                                   random_weights=figures["random_weights"],
                                   generation_floor=meta.get("generation_floor")).to_dict()
        outcome["metrics"] = accuracy_metrics(acc)
    outcome["extra"] = {"accuracy": finite_or_none(acc)}
    return new_record("accuracy", cell, outcome, context=context, workload=session.get("workload") or {},
                      environment=session.get("environment") or {})


def finite_or_none(value):
    """Return value with every non-finite float replaced by None (a record is JSON; NaN is not, and must not be lost)."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def accuracy_metrics(acc: dict) -> dict:
    """Return the record's flat metrics: the figures tables and figures read."""
    import math

    from bench.accuracy.verdict import floor_of

    p = acc["parity"]
    m = {k: p.get(k) for k in ("tokens", "kl_mean", "kl_p99", "top1", "top1_lower", "top5", "ppl_base", "ppl_cell",
                               "delta_ppl", "nonfinite")} if p else {}
    floor_kl, floor_top1 = floor_of(acc.get("floor_of_baseline") or acc.get("floor"))
    if p and p.get("kl_mean") is not None and floor_kl and math.isfinite(floor_kl) and acc.get("floor_of_baseline") is not None:
        m["kl_floor_ratio"] = p["kl_mean"] / floor_kl
        m["top1_floor_ratio"] = p["top1"] / floor_top1 if floor_top1 else None
    g = acc.get("generation")
    if g:
        m["identical_prefix_rate"] = g["identical_prefix_rate"]
        m["mean_common_prefix"] = g.get("mean_common_prefix")
        if g.get("text_rouge1_delta_points") is not None:
            m["text_rouge1_delta_points"] = g["text_rouge1_delta_points"]
        if g.get("rouge_vs_base"):
            m.update(rouge1_vs_base=g["rouge_vs_base"]["rouge1"], rougeL_vs_base=g["rouge_vs_base"]["rougeL"],
                     rouge1_vs_reference=g["rouge_vs_reference"]["rouge1"], rouge1_delta_points=g["rouge1_delta_points"])
    m["determinism_differing_tokens"] = acc["determinism"]["differing_tokens"]
    return m
