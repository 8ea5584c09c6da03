"""Parent side of a build group: runs `bench.worker` in a subprocess with timeouts.

The parent never touches the GPU. It starts a worker for a build group, reads its events with
a deadline (build timeout until the build is done, then a per-cell timeout), and turns every
outcome into per-(cell, trial) outcomes: results the worker reported, `timeout` for a hang (the
worker is killed), `oom`/`error` for a worker that died (classified by failures.py). After a
death or a hang, a fresh worker takes the group's remaining cells.
"""

from __future__ import annotations

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

from bench.failures import classify_exit

# How long a worker may take to exit after its last event before it is killed.
EXIT_GRACE_S = 30.0


@dataclass
class GroupItem:
    cell: object  # bench.spec.Cell
    trials: list[int]
    workload_file: str


@dataclass
class GroupJob:
    build_key: object  # bench.spec.BuildKey
    items: list[GroupItem]
    engines_dir: Path
    warmup: int
    build_timeout_s: float
    cell_timeout_s: float
    log_path: Path
    env: dict = field(default_factory=dict)  # extra environment variables for the worker

    def payload(self, items: list[GroupItem]) -> dict:
        return {
            "build_key": self.build_key.to_dict(),
            "engines_dir": str(self.engines_dir),
            "settings": {"warmup": self.warmup},
            "cells": [{"cell": it.cell.to_dict(), "trials": it.trials, "workload_file": it.workload_file} for it in items],
        }


def run_group(job: GroupJob, on_event: Callable[[dict], None]) -> None:
    """Run the group's cells in worker subprocesses; call on_event for every worker event and
    for every synthesized failure result, until every (cell, trial) has an outcome."""
    pending = {(it.cell.cell_id, t) for it in job.items for t in it.trials}
    items = list(job.items)
    while items:
        died_in_build = _run_worker(job, items, pending, on_event)
        if died_in_build:
            return
        items = [it for it in items if any((it.cell.cell_id, t) in pending for t in it.trials)]
        for it in items:
            it.trials = [t for t in it.trials if (it.cell.cell_id, t) in pending]


def _run_worker(job: GroupJob, items: list[GroupItem], pending: set, on_event) -> bool:
    """Run one worker over items. Return True if the group cannot go on (failure in the build)."""
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(job.log_path, "ab")
    # The worker imports the same `bench` as this process, installed or not.
    root = str(Path(__file__).resolve().parent.parent)
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath, **job.env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        start_new_session=True,  # Ctrl-C reaches the parent only; the parent stops the worker
    )
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
        proc.stdin.write(json.dumps(job.payload(items)).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass

    built = False
    current: tuple[str, int] | None = None  # (cell_id, trial) being measured
    fatal: dict | None = None  # what the worker said before dying, if it said anything
    deadline = time.monotonic() + job.build_timeout_s
    try:
        while True:
            try:
                event = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                _kill(proc)
                if not built:
                    message = f"timeout: the build/load exceeded {job.build_timeout_s:g} s; worker killed"
                    for cell_id, trial in sorted(pending):
                        _synth(on_event, pending, cell_id, trial, "timeout", message)
                    return True
                # A hang costs the cell that hung only (during warm-up: all its trials).
                message = f"timeout: no progress within {job.cell_timeout_s:g} s; worker killed"
                for cell_id, trial in [current] if current else _next_cell(items, pending):
                    _synth(on_event, pending, cell_id, trial, "timeout", message)
                return False
            if event is None:  # the worker exited
                _wait_or_kill(proc)
                if not pending:
                    return False
                tail = _tail(job.log_path)
                status = classify_exit(proc.returncode, tail)
                message = f"worker exited with status {proc.returncode}"
                if status == "oom" and proc.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
                    message += " (SIGKILL: likely the kernel's OOM killer)"
                if fatal:  # the worker classified its own failure: keep its status and traceback
                    status, message = fatal["status"], f"{message}: {fatal['error']}"
                else:
                    message += f"\n{tail}"
                if not built:
                    for cell_id, trial in sorted(pending):
                        _synth(on_event, pending, cell_id, trial, status, "build/load: " + message)
                    return True
                for cell_id, trial in [current] if current else _next_cell(items, pending):
                    _synth(on_event, pending, cell_id, trial, status, message)
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
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or a failing callback: stop the worker now
        _kill(proc)
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


def _synth(on_event, pending: set, cell_id: str, trial: int, status: str, message: str) -> None:
    pending.discard((cell_id, trial))
    on_event({"event": "result", "cell_id": cell_id, "trial": trial, "status": status, "error": message,
              "synthesized": True, "ended_at": time.time()})


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _wait_or_kill(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill(proc)


def _tail(path: Path, n_bytes: int = 3000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n_bytes))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
