"""Which cores a GPU worker's trials run on (the run setting `cores`): as the scheduler places them, or the fastest now.

A host-bound step (eager decode at batch 1: the GPU waits on Python's launches) runs as fast as the core its
thread is on. On the H100 machines lent on 2026-12-07 the same pure-Python loop (bench.machine.host_load's probe)
took 1.1-1.4 ms on ten of the 16 vCPUs and 1.8-2.4 ms on the other six (a neighbour on the physical core, below the
VM). A fresh process lands on whichever core the scheduler picks: on such a machine that morning the five processes of
one eager 7B cell ran its step in 26.4-42.1 ms and no regression between cells could be judged.

`cores = "fastest"` (a matrix setting, `bench run --cores fastest`): after each cell's warm-up (a compile's worker
pool sizes itself to the cores it may use, so it keeps them all) and before its first trial, the worker times the
probe loop on every core it may use, one at a time, and pins all its threads to those within FAST_WITHIN of the
fastest. On a host whose cores run alike that is every core, and nothing changes. A core that slows down during the
trials still slows them: the runs' host probes (taken in the trials' process, on its pinned cores) say so as before.
The record of every trial carries what was probed and chosen (`extra.cores`). CPU cells are refused: a CPU backend
computes on every core, and fewer cores would be a different machine, not a steadier one.

It is made for slow cores that stay slow (a hybrid CPU's efficiency cores, a core serving interrupts). On those H100
machines it did not help: which vCPUs were slow changed within seconds of the choice, and the one run with it
spread the eager cells' processes by 9-48 % (docs/measurements/2026-12-07-h100-planted-pinned-cores.md).
"""

from __future__ import annotations

import os
import statistics

from bench.machine.host_load import host_probe_times

POLICIES = ("scheduled", "fastest")  # the values of the run setting `cores`
DEFAULT_POLICY = POLICIES[0]  # as the OS places the threads: nothing is done
# The cores kept: those whose probe took at most this multiple of the fastest's (the H100's two groups of vCPUs
# differed by 1.5-2x; cores of one group by up to 15 % between probes).
FAST_WITHIN = 1.2
PROBE_REPEATS = 3  # probe loops per core (each 1-2 ms): 16 cores take about 0.1 s


def allowed_cores() -> set[int] | None:
    """Return the cores this process may run on, or None where the platform cannot say (no sched_getaffinity)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def probe_cores(cores: set[int], repeats: int = PROBE_REPEATS) -> dict[int, float]:
    """Return {core: median ms of the probe loop with this thread pinned there}; this thread's affinity is restored."""
    mine = os.sched_getaffinity(0)
    out = {}
    try:
        for core in sorted(cores):
            os.sched_setaffinity(0, {core})
            out[core] = statistics.median(host_probe_times(repeats))
    finally:
        os.sched_setaffinity(0, mine)
    return out


def fastest(probes: dict[int, float], within: float = FAST_WITHIN) -> list[int]:
    """Return the cores whose probe took at most `within` times the fastest's (at least one), in order."""
    best = min(probes.values())
    return sorted(c for c, ms in probes.items() if ms <= within * best)


def pin_process(cores: set[int]) -> None:
    """Pin every thread of this process to `cores` (a thread's affinity is its own: CUDA's and torch's threads too)."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def apply(policy: str, cores: set[int] | None) -> dict | None:
    """Apply the run setting `cores` to this process before a cell's trials; return what the record keeps, or None.

    cores: the cores the process could use when it started (allowed_cores()), so that each cell chooses again among
    all of them; None or a single core: nothing to choose. "scheduled": nothing is done (the default)."""
    if policy == DEFAULT_POLICY or not cores or len(cores) < 2:
        return None if policy == DEFAULT_POLICY else {"policy": policy, "pinned": sorted(cores or ()), "probe_ms": {}}
    try:
        probes = probe_cores(cores)
    except OSError as exc:  # a core taken away since the process started (a cgroup's cpuset changed): run as scheduled
        return {"policy": policy, "pinned": [], "probe_ms": {}, "error": f"could not probe the cores: {exc}"}
    chosen = fastest(probes)
    pin_process(set(chosen))
    return {"policy": policy, "pinned": chosen, "probe_ms": {str(c): round(ms, 3) for c, ms in probes.items()}}
