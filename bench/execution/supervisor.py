"""Parent side of a build group: runs `bench.execution.worker` in a subprocess with timeouts.

The parent never touches the GPU. It starts a worker for a build group, reads its events with
a deadline (build timeout until the build is done, then a per-cell timeout), and turns every
outcome into per-(cell, trial) outcomes: results the worker reported, `timeout` for a hang (the
worker is killed), `oom`/`error` for a worker that died (classified by failures.py). A hang or
a death ends its cell (one record; the cell's other trials are skipped, as the worker skips
them after a failure), and a fresh worker takes the group's next cells.

Each worker process writes its stderr to a file of its own (`<log_dir>/<prefix>-<time>-<n>.log`,
created new, never appended to by another process), so a death is classified from that
process's exit status and output only, never from what an earlier worker printed.

A tensor-parallel group of a backend that launches ranks (hf) runs its worker as one process
per GPU under torchrun; the job then travels in a file beside the log, and rank 0 reports.
Executors run several groups at once, each from its own thread: `stop` ends a group's worker
at once (Ctrl-C, or another group's failure) and supervise_group raises GroupStopped.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.machine.failures import classify_exit, killed_by_sigkill

# How long a worker may take to exit after its last event before it is killed.
EXIT_GRACE_S = 30.0


@dataclass
class GroupItem:
    cell: object  # bench.spec.cells.Cell
    trials: list[int]
    workload_file: str


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
    # {"artifact": path, "retune_on_mismatch": bool, "tuning_build": k, "export_dir": path}
    engine: dict = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)  # the files this job's workers wrote, in order

    def new_log(self):
        """Return (path, open binary file) of a log file no other process has written: created here, exclusively."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in itertools.count(len(self.logs) + 1):
            path = self.log_dir / f"{self.log_prefix}-{stamp}-{n}.log"
            try:
                fh = open(path, "xb")
            except FileExistsError:
                continue
            self.logs.append(path)
            return path, fh
        raise AssertionError("unreachable")  # pragma: no cover

    def payload(self, items: list[GroupItem]) -> dict:
        return {
            "build_key": self.build_key.to_dict(),
            "engines_dir": str(self.engines_dir),
            "settings": {"warmup": self.warmup},
            "engine": self.engine,
            "cells": [{"cell": it.cell.to_dict(), "trials": it.trials, "workload_file": it.workload_file} for it in items],
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


def _run_worker(job: GroupJob, items: list[GroupItem], pending: set, on_event, stop=None) -> bool:
    """Run one worker over items. Return True if the group cannot go on (failure in the build)."""
    log_path, log = job.new_log()
    # The worker imports the same `bench` as this process, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath, **job.env,
           "BENCH_PARENT_PID": str(os.getpid())}  # the worker dies with this process (worker._die_with_parent)
    command = [sys.executable, "-m", "bench.execution.worker"]
    payload = json.dumps(job.payload(items)).encode()
    ranks = worker_ranks(job.build_key)
    if ranks > 1:  # torchrun's ranks share no stdin: the job goes in a file beside the log
        job_file = log_path.with_suffix(".job.json")
        job_file.write_bytes(payload)
        command += ["--ranks", str(ranks), str(job_file)]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        start_new_session=True,  # Ctrl-C reaches the parent only; the parent stops the worker
    )
    oom_kills = oom_kill_counter()  # the kernel OOM killer's count when the worker started
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
                kill_group(proc)
                if not built:
                    message = f"timeout: the build/load exceeded {job.build_timeout_s:g} s; worker killed; log {log_path}"
                    for cell_id, trial in sorted(pending):
                        _synth(on_event, pending, cell_id, trial, "timeout", message)
                    return True
                # A hang would hang again: it ends its cell, and a fresh worker takes the next one.
                message = f"timeout: no progress within {job.cell_timeout_s:g} s; worker killed; log {log_path}"
                end_cell(on_event, pending, items, current, "timeout", message)
                return False
            if event is None:  # the worker exited
                _wait_or_kill(proc)
                if not pending:
                    return False
                log.flush()
                tail = _tail(log_path)  # this process's own output, nobody else's
                evidence = None
                if killed_by_sigkill(proc.returncode):
                    evidence = oom_kill_evidence(oom_kills, oom_kill_counter())
                    message = "worker killed by SIGKILL (" + (evidence or _no_oom_evidence(oom_kills)) + ")"
                else:
                    message = f"worker exited with status {proc.returncode}"
                status = classify_exit(proc.returncode, tail, evidence)
                message += f"; log {log_path}"
                if fatal:  # the worker classified its own failure: keep its status and traceback
                    status, message = fatal["status"], f"{message}: {fatal['error']}"
                else:
                    message += f"\n{tail}"
                if not built:
                    for cell_id, trial in sorted(pending):
                        _synth(on_event, pending, cell_id, trial, status, "build/load: " + message)
                    return True
                end_cell(on_event, pending, items, current, status, message)
                return False
            kind = event.get("event")
            if kind == "built":
                built = True
            elif kind == "start":
                current = (event["cell_id"], event["trial"])
            elif kind == "result":
                pending.discard((event["cell_id"], event["trial"]))
                current = None
            elif kind == "skipped":
                pending.difference_update((event["cell_id"], t) for t in event["trials"])
            elif kind == "fatal" and not built:
                for cell_id, trial in sorted(pending):
                    _synth(on_event, pending, cell_id, trial, event["status"], "build/load: " + event["error"])
                on_event(event)
                return True
            elif kind == "fatal":
                fatal = event
            # Every event is progress: the clock restarts (build, warm-up, then each trial).
            deadline = time.monotonic() + job.cell_timeout_s
            on_event(event)
    except BaseException:  # Ctrl-C, a stop, or a failing callback: stop the worker now
        kill_group(proc)
        raise
    finally:
        if proc.poll() is None:
            _wait_or_kill(proc)
        log.close()


def _next_cell(items: list[GroupItem], pending: set) -> list[tuple[str, int]]:
    """Return the pending (cell_id, trial)s of the first cell not yet finished."""
    for it in items:
        left = [(it.cell.cell_id, t) for t in it.trials if (it.cell.cell_id, t) in pending]
        if left:
            return left
    return []


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


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started with start_new_session=True and every process of its group; wait for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _wait_or_kill(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        kill_group(proc)


def oom_kill_counter() -> tuple[str, int] | None:
    """Return (file, count) of the kernel OOM killer's kills in this process's memory cgroup, or None if unreadable.

    Workers inherit the parent's cgroup. The count is hierarchical: a kill of any process in
    the cgroup (or below) raises it. cgroup v2: memory.events; v1: memory.oom_control.
    """
    root = Path("/sys/fs/cgroup")
    v2, v1 = None, None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if controllers == "":
                v2 = rel.lstrip("/")
            elif "memory" in controllers.split(","):
                v1 = rel.lstrip("/")
    except (OSError, ValueError):
        pass
    candidates = [root / v2 / "memory.events"] if v2 else []
    candidates.append(root / "memory.events")  # a container's namespace root
    if v1:
        candidates.append(root / "memory" / v1 / "memory.oom_control")
    candidates.append(root / "memory" / "memory.oom_control")
    for path in candidates:
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return str(path), int(value)
        except (OSError, ValueError):
            continue
    return None


def oom_kill_evidence(before: tuple[str, int] | None, after: tuple[str, int] | None) -> str | None:
    """Return a sentence naming the evidence that the kernel's OOM killer acted between two counts, or None."""
    if before is None or after is None or before[0] != after[0] or after[1] <= before[1]:
        return None
    return f"the kernel's OOM killer: oom_kill in {after[0]} rose from {before[1]} to {after[1]} while it ran"


def _no_oom_evidence(before: tuple[str, int] | None) -> str:
    if before is None:
        return "no cgroup OOM-kill counter readable here, so not attributed to the kernel's OOM killer"
    return f"not the kernel's OOM killer: oom_kill in {before[0]} did not rise"


def _tail(path: Path, n_bytes: int = 3000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n_bytes))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
