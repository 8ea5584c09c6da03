"""Executors: where build groups run, several at once, while the parent alone writes the store.

A matrix run is a set of chains, one per build group: the group's run round 0, then its
round 1, ... (a round of a group starts after its previous round, so a cell whose run failed
is not started again). The scheduler here starts every ready round the executor has room for,
in (round, matrix order), each in a thread of its own; every thread hands its events to this
(the parent's main) thread through one queue, so records are written by one thread of one
process. Ctrl-C, or any failure in the parent, sets one stop event that ends every group's
worker, on this machine or on a Ray node, before the exception goes on.

Two executors: `local` (bench.execution.executors.local: worker subprocesses on this machine,
one per GPU of `devices` at a time, CUDA_VISIBLE_DEVICES per worker) and `ray`
(bench.execution.executors.ray_cluster: one Ray actor per group round, asking for the GPUs the
group needs, running the same supervisor on whichever node Ray places it).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from bench.execution.supervisor import GroupJob, GroupStopped

# How long the parent waits for threads to end their workers after a stop before it gives up.
STOP_GRACE_S = 30.0


@dataclass
class GroupRun:
    """One build group's run round: the job to run, the GPUs it needs, and who hears its events."""

    job: GroupJob
    gpus: int  # GPUs the group's worker needs (its tensor-parallel size; 0 for CPU cells)
    on_event: Callable[[dict], None]  # called in the parent's main thread only
    label: str = ""  # where it runs (the executor's describe), for the progress display


def gpus_needed(build_key) -> int:
    """Return the GPUs a build group's worker takes: its tensor-parallel size on CUDA, 0 on a CPU."""
    from bench.backends.declaration import tensor_parallel_size

    return tensor_parallel_size(build_key.options) if build_key.device.startswith("cuda") else 0


def make_executor(settings, keys):
    """Return the executor the run settings name, checked against what the build groups need (before any run)."""
    needs = [gpus_needed(k) for k in keys]
    if settings.executor == "ray":
        from bench.execution.executors.ray_cluster import RayExecutor

        return RayExecutor(settings.ray_address, needs)
    from bench.execution.executors.local import LocalExecutor

    return LocalExecutor(settings.devices, needs)


_DONE = object()


def run_chains(executor, chains: list[Callable[[int], GroupRun | None]], rounds: int, progress=None) -> None:
    """Run every chain's rounds 0..rounds-1 on the executor, as many groups at once as it has room for.

    `chains[i](k)` returns group i's round k (None: nothing to run in that round). Events reach
    each GroupRun's on_event in this thread. Returns when every round has ended; on any
    exception (Ctrl-C included) every running group is stopped first, then it propagates.
    """
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    next_round = [0] * len(chains)
    waiting: dict[int, GroupRun] = {}  # made but not yet placed (no room): kept, chains[i](k) has effects
    running: dict[int, tuple[threading.Thread, GroupRun, object]] = {}

    def work(i: int, run: GroupRun, placement) -> None:
        try:
            executor.run(run, placement, lambda event: events.put((i, event)), stop)
            events.put((i, _DONE))
        except GroupStopped:
            events.put((i, _DONE))
        except BaseException as exc:  # handed to the main thread, which stops the others and raises it
            events.put((i, exc))

    def start_ready() -> None:
        progressed = True
        while progressed:
            progressed = False
            for k, i in sorted((next_round[i], i) for i in range(len(chains)) if i not in running and next_round[i] < rounds):
                run = waiting.pop(i, None) or chains[i](k)
                if run is None:
                    next_round[i] += 1
                    progressed = True
                    break
                placement = executor.acquire(run)
                if placement is None:  # no room now: a smaller group further on may still fit
                    waiting[i] = run
                    continue
                run.label = executor.describe(placement)
                thread = threading.Thread(target=work, args=(i, run, placement), name=f"group-{i}-round-{k}", daemon=True)
                running[i] = (thread, run, placement)
                thread.start()

    try:
        start_ready()
        while running:
            try:
                i, event = events.get(timeout=0.5)  # a timeout keeps Ctrl-C prompt
            except queue.Empty:
                continue
            thread, run, placement = running[i]
            if event is _DONE:
                thread.join()
                del running[i]
                executor.release(placement)
                next_round[i] += 1
                if progress is not None:
                    progress.idle(run.label)
                start_ready()
            elif isinstance(event, BaseException):
                raise event
            else:
                run.on_event(event)
        if waiting:  # the executor's own checks make this unreachable; never skip work silently
            raise RuntimeError(f"the {executor.name} executor has no room for {len(waiting)} build group(s) even when idle")
    except BaseException:
        stop.set()
        for thread, _, _ in list(running.values()):
            thread.join(timeout=STOP_GRACE_S)
        raise
    finally:
        executor.close()
