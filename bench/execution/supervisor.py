"""Parent side of a build group: runs `bench.execution.worker` in a subprocess with timeouts.

The parent never touches the GPU. It starts a worker for a build group, reads its events with
a deadline (build timeout until the build is done, then a per-cell timeout), and turns every
outcome into per-(cell, trial) outcomes: results the worker reported, `timeout` for a hang (the
worker is killed), `oom`/`error` for a worker that died (classified by failures.py). A hang or
a death ends its cell (one record; the cell's other trials are skipped, as the worker skips
them after a failure), and a fresh worker takes the group's next cells.

Workers start, die and are judged through bench.execution.launcher, as every cell's process:
each writes its stderr to a file of its own (`<log_dir>/<prefix>-<time>-<n>.log`, created new,
never appended to by another process), so a death is classified from that process's exit status
and output only, never from what an earlier worker printed. What is the supervisor's own: the
event stream, the progress timeouts, and turning a hang or a death into its cell's outcome.

A worker is a fork of the invocation's zygote (bench.execution.zygote: the backend's runtime
imported once), except a tensor-parallel group of a backend that launches ranks (hf), which runs
its worker as one process per GPU under torchrun (the job then travels in a file beside the log,
and rank 0 reports), a job that asks for fresh processes (`zygote = False`: the Ray executor), a
backend not in FORKED_BACKENDS, and whatever the launcher cannot fork.
Executors run several groups at once, each from its own thread: `stop` ends a group's worker
at once (Ctrl-C, or another group's failure) and supervise_group raises GroupStopped.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.execution import launcher
from bench.machine.cores import DEFAULT_POLICY

# How long a worker may take to exit after its last event before it is killed.
EXIT_GRACE_S = 30.0
# Backends whose workers are forked from the zygote. Not trtllm: TensorRT-LLM starts MPI and CUDA when
# imported, runs in its own environment, and has never run forked.
FORKED_BACKENDS = ("hf", "fake", "openai")


@dataclass
class GroupItem:
    cell: object  # bench.spec.cells.Cell
    trials: list[int]
    workload_file: str
    accuracy_capture: dict | None = None  # after its trials, capture its accuracy inputs (bench.execution.accuracy_capture)
    # after the process's last timed pass, profile a window of it (bench.execution.profile_window.timed_window_job)
    profile_window: dict | None = None


@dataclass
class GroupJob:
    build_key: object  # bench.spec.cells.BuildKey
    items: list[GroupItem]
    engines_dir: Path
    warmup: int
    build_timeout_s: float
    cell_timeout_s: float
    log_dir: Path  # each worker process gets a new file here, named after log_prefix
    log_prefix: str
    env: dict = field(default_factory=dict)  # extra environment variables for the worker
    # What the worker does with its engine (bench.execution.worker.install_artifact / export_artifact):
    # {"artifact": path, "digest": its trusted digest, "retune_on_mismatch": bool, "tuning_build": k, "export_dir": path}
    engine: dict = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)  # the files this job's workers wrote, in order
    zygote: bool = True  # fork its workers from the invocation's zygote where the launcher can (False: fresh processes)
    cores: str = DEFAULT_POLICY  # the cores each cell's trials run on (bench.machine.cores: the run setting `cores`)
    order: str = "cells"  # the order of a process's trials (the run setting `order`: bench.spec.cells.RunSettings)

    def new_log(self):
        """Return (path, open binary file) of a log file no other process has written: created here, exclusively."""
        path, fh = launcher.new_log(self.log_dir, self.log_prefix, first=len(self.logs) + 1)
        self.logs.append(path)
        return path, fh

    def payload(self, items: list[GroupItem]) -> dict:
        return {
            "build_key": self.build_key.to_dict(),
            "engines_dir": str(self.engines_dir),
            "settings": {"warmup": self.warmup, **({"cores": self.cores} if self.cores != DEFAULT_POLICY else {}),
                         **({"order": self.order} if self.order != "cells" else {})},
            "engine": self.engine,
            "cells": [{"cell": it.cell.to_dict(), "trials": it.trials, "workload_file": it.workload_file,
                       **({"accuracy_capture": it.accuracy_capture} if it.accuracy_capture else {}),
                       **({"profile_window": it.profile_window} if it.profile_window else {})} for it in items],
        }


class GroupStopped(Exception):
    """The group's worker was stopped from outside (the executor's stop event): its cells have no outcome."""


# How often a supervisor waiting for its worker looks at its stop event.
STOP_POLL_S = 0.2


def supervise_group(job: GroupJob, on_event: Callable[[dict], None], stop: threading.Event | None = None) -> None:
    """Run the group's cells in worker subprocesses; call on_event for every worker event and
    for every synthesized failure result, until every (cell, trial) has an outcome.

    Raise GroupStopped (the worker killed) as soon as `stop` is set."""
    pending = {(it.cell.cell_id, t) for it in job.items for t in it.trials}
    items = list(job.items)
    while items:
        if stop is not None and stop.is_set():
            raise GroupStopped()
        died_in_build = _run_worker(job, items, pending, on_event, stop)
        if died_in_build:
            return
        items = [it for it in items if any((it.cell.cell_id, t) in pending for t in it.trials)]
        for it in items:
            it.trials = [t for t in it.trials if (it.cell.cell_id, t) in pending]


def worker_ranks(build_key) -> int:
    """Return how many processes one worker of this build key is: its tensor-parallel size if the backend launches ranks."""
    from bench.backends.declaration import tensor_parallel_size
    from bench.backends.registry import backend_config

    tp = tensor_parallel_size(build_key.options)
    return tp if tp > 1 and backend_config(build_key.backend).launches_ranks else 1


def worker_preload(job: GroupJob, ranks: int) -> tuple[str, ...] | None:
    """Return what the zygote imports before forking this job's worker (its backend's runtime module), or None: fresh."""
    from bench.backends.registry import BACKENDS

    backend = job.build_key.backend
    if ranks > 1 or not job.zygote or backend not in FORKED_BACKENDS:
        return None  # (BENCH_ZYGOTE=0 is the launcher's to say, in the worker's log: bench.execution.zygote.not_forkable)
    return (BACKENDS[backend][1].split(":")[0],)


def session_preload(cells: list, module: str) -> tuple[str, ...] | None:
    """What the zygote imports before forking a session of these cells (accuracy, parity, profile): the hf runtime,
    the cells' other runtimes and the session's module; None (a fresh process) where a cell's backend is not one
    whose workers are forked (FORKED_BACKENDS: not trtllm). A served cell's session (openai) computes the baseline's
    side with torch as an hf one does, so it is forked too: a fresh process paid torch's and transformers' imports
    again (about 4 s a session on a 2-core CPU)."""
    from bench.backends.registry import BACKENDS

    if any(c.backend not in FORKED_BACKENDS for c in cells):
        return None
    runtimes = dict.fromkeys(BACKENDS[b][1].split(":")[0] for b in ("hf", *(c.backend for c in cells)))
    return (*runtimes, module)


def _run_worker(job: GroupJob, items: list[GroupItem], pending: set, on_event, stop=None) -> bool:
    """Run one worker over items. Return True if the group cannot go on (failure in the build)."""
    log_path, log = job.new_log()
    command = [sys.executable, "-m", "bench.execution.worker"]
    payload = json.dumps(job.payload(items)).encode()
    ranks = worker_ranks(job.build_key)
    if ranks > 1:  # torchrun's ranks share no stdin: the job goes in a file beside the log
        job_file = log_path.with_suffix(".job.json")
        job_file.write_bytes(payload)
        command += ["--ranks", str(ranks), str(job_file)]
    proc = launcher.start(command, log, launcher.child_env(job.env), events=True, preload=worker_preload(job, ranks))
    oom_kills = launcher.oom_kill_counter()  # the kernel OOM killer's count when the worker started
    events: queue.Queue = queue.Queue()

    def reader():
        for line in proc.stdout:
            try:
                events.put(json.loads(line))
            except json.JSONDecodeError:
                continue
        events.put(None)

    threading.Thread(target=reader, daemon=True).start()
    try:
        if ranks == 1:
            proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:
        pass

    built = False
    current: tuple[str, int] | None = None  # (cell_id, trial) being measured
    # (event kind, cell_id) of the step after a cell's trials that runs (an accuracy capture, a profile window): a hang or
    # a death there fails no trial (they are stored), it is that step's outcome
    after: tuple[str, str] | None = None
    windows_done: set[str] = set()  # cells whose profile window has an outcome
    failed_cells: set[str] = set()  # cells with a failed trial: the worker profiles no window of theirs
    fatal: dict | None = None  # what the worker said before dying, if it said anything
    deadline = time.monotonic() + job.build_timeout_s
    try:
        while True:
            if stop is not None and stop.is_set():
                raise GroupStopped()
            try:
                wait = max(0.0, deadline - time.monotonic())
                event = events.get(timeout=wait if stop is None else min(wait, STOP_POLL_S))
            except queue.Empty:
                if time.monotonic() < deadline:
                    continue
                launcher.kill_group(proc)
                if not built:
                    message = f"timeout: the build/load exceeded {job.build_timeout_s:g} s; worker killed; log {log_path}"
                    for cell_id, trial in sorted(pending):
                        _synth(on_event, pending, cell_id, trial, "timeout", message)
                    return True
                # A hang would hang again: it ends its cell, and a fresh worker takes the next one.
                message = f"timeout: no progress within {job.cell_timeout_s:g} s; worker killed; log {log_path}"
                if after is not None:  # its results are stored: only that step is lost, said as its outcome
                    _after_trials_lost(on_event, after, "timeout", message)
                    windows_done.add(after[1])
                _windows_lost(on_event, _windows_left(items, pending, windows_done, failed_cells), "timeout", message)
                if after is None:
                    end_cell(on_event, pending, items, current, "timeout", message)
                return False
            if event is None:  # the worker exited
                launcher.wait_or_kill(proc, EXIT_GRACE_S)
                if not pending and after is None and not _windows_left(items, pending, windows_done, failed_cells):
                    return False
                log.flush()
                died = launcher.death(proc.returncode, log_path, oom_kills)
                status, message = died.status, f"worker {died.text}; log {log_path}"
                if fatal:  # the worker classified its own failure: keep its status and traceback
                    status, message = fatal["status"], f"{message}: {fatal['error']}"
                else:
                    message += f"\n{died.tail}"
                if not built:
                    for cell_id, trial in sorted(pending):
                        _synth(on_event, pending, cell_id, trial, status, "build/load: " + message)
                    return True
                if after is not None:
                    _after_trials_lost(on_event, after, status, message)
                    windows_done.add(after[1])
                _windows_lost(on_event, _windows_left(items, pending, windows_done, failed_cells), status, message)
                if after is None:
                    end_cell(on_event, pending, items, current, status, message)
                return False
            kind = event.get("event")
            if kind == "built":
                built = True
            elif kind in ("start", "warmup"):  # a cell's warm-up (blamed for a hang there), then each trial
                current = (event["cell_id"], event["trial"])
            elif kind == "result":
                pending.discard((event["cell_id"], event["trial"]))
                current = None
                if event.get("status") != "ok":
                    failed_cells.add(event["cell_id"])
            elif kind == "skipped":
                pending.difference_update((event["cell_id"], t) for t in event["trials"])
            elif kind == "fatal" and not built:
                for cell_id, trial in sorted(pending):
                    _synth(on_event, pending, cell_id, trial, event["status"], "build/load: " + event["error"])
                on_event(event)
                return True
            elif kind == "fatal":
                fatal = event
            elif kind in ("accuracy_capture", "profile_window"):
                after = (kind, event["cell_id"]) if event.get("phase") == "start" else None
                if kind == "profile_window" and event.get("phase") == "done":
                    windows_done.add(event["cell_id"])
            # Every event is progress: the clock restarts (build, warm-up, then each trial).
            deadline = time.monotonic() + job.cell_timeout_s
            on_event(event)
    except BaseException:  # Ctrl-C, a stop, or a failing callback: stop the worker now
        launcher.kill_group(proc)
        raise
    finally:
        if proc.poll() is None:
            launcher.wait_or_kill(proc, EXIT_GRACE_S)
        log.close()


def _next_cell(items: list[GroupItem], pending: set) -> list[tuple[str, int]]:
    """Return the pending (cell_id, trial)s of the first cell not yet finished."""
    for it in items:
        left = [(it.cell.cell_id, t) for t in it.trials if (it.cell.cell_id, t) in pending]
        if left:
            return left
    return []


def _after_trials_lost(on_event, after: tuple[str, str], status: str, message: str) -> None:
    """A worker that hung or died in a step after a cell's trials (its accuracy capture, its profile window): that
    step's outcome, never a failed trial (its trials are stored; `bench accuracy` measures the cell in a session). A
    fresh worker takes the cells still to run."""
    kind, cell_id = after
    on_event({"event": kind, "cell_id": cell_id, "phase": "done", "status": status, "error": message,
              "synthesized": True})


def _windows_left(items: list[GroupItem], pending: set, windows_done: set, failed_cells: set) -> list[str]:
    """Return the cells whose profile window a worker still owes: asked for, trials all done and ok, no outcome yet."""
    return [it.cell.cell_id for it in items if it.profile_window and it.cell.cell_id not in windows_done
            and it.cell.cell_id not in failed_cells and not any((it.cell.cell_id, t) in pending for t in it.trials)]


def _windows_lost(on_event, cells: list[str], status: str, message: str) -> None:
    """The windows a worker that hung or died had yet to profile (they come after every cell's trials): each its
    outcome, so the run says which cells have no window of that process."""
    for cell_id in cells:
        on_event({"event": "profile_window", "cell_id": cell_id, "phase": "done", "status": status,
                  "error": f"not profiled: the worker ended first ({message})", "synthesized": True})


def end_cell(on_event, pending: set, items: list[GroupItem], current, status: str, message: str) -> None:
    """Record one failure for the cell a dead or hung worker was in, and skip that cell's other trials.

    The cell is the one whose trial was being measured (`current`), else the first unfinished
    one (the worker died or hung in its warm-up). As in the worker: a failed trial ends its cell.
    """
    if current is None:
        left = _next_cell(items, pending)
        if not left:
            return
        current = left[0]
    cell_id, trial = current
    _synth(on_event, pending, cell_id, trial, status, message)
    rest = [t for it in items if it.cell.cell_id == cell_id for t in it.trials if (cell_id, t) in pending]
    if rest:
        pending.difference_update((cell_id, t) for t in rest)
        on_event({"event": "skipped", "cell_id": cell_id, "trials": rest, "synthesized": True})


def _synth(on_event, pending: set, cell_id: str, trial: int, status: str, message: str) -> None:
    pending.discard((cell_id, trial))
    on_event({"event": "result", "cell_id": cell_id, "trial": trial, "status": status, "error": message,
              "synthesized": True, "ended_at": time.time()})
