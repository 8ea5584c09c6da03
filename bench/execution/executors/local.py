"""The local executor: worker subprocesses on this machine, one build group per GPU of `devices` at a time.

Without `devices`, one group runs at a time on the cells' own device, as the harness always
did. With `devices = ["cuda:0", "cuda:1", ...]` (or "all"), each running group holds the GPUs
it needs (its tensor-parallel size) and its worker sees only those, through
CUDA_VISIBLE_DEVICES; its cells run on device "cuda" (= the worker's first visible GPU). The
names mean what they mean to torch in this process: cuda:N is the N-th GPU this process sees
(after any CUDA_VISIBLE_DEVICES the user set), so the worker is given that same entry.
"""

from __future__ import annotations

import os
import socket

from bench.errors import BenchInputError
from bench.execution.supervisor import supervise_group
from bench.machine.devices import cuda_ordinal


def resolve_pool(devices: tuple[str, ...], gpu_count: int | None = None) -> list[tuple[str, str]]:
    """Return [(name, CUDA_VISIBLE_DEVICES entry)] for the pool; BenchInputError for a GPU this machine lacks.

    gpu_count: how many GPUs NVML sees (None: ask NVML). A machine where NVML sees none (a CPU
    machine, the fake backend's tests) accepts explicit names and refuses "all".
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",") if e.strip()] if visible and visible.strip() else None
    if gpu_count is None:
        from bench.machine.environment import gpu_info

        info = gpu_info(0)
        if info.get("nvml_error") and not info.get("gpu_count"):
            raise BenchInputError(f"devices = {list(devices)} needs NVML to find the GPUs, but it failed: "
                                  f"{info['nvml_error']}")
        gpu_count = info.get("gpu_count") or 0
    if devices == ("all",):
        n = len(entries) if entries is not None else gpu_count
        if not n:
            raise BenchInputError("devices = 'all', but NVML sees no GPU on this machine: run on a GPU machine, or list "
                                  "devices = ['cuda:0', ...] explicitly")
        devices = tuple(f"cuda:{i}" for i in range(n))
    pool = []
    for name in devices:
        n = cuda_ordinal(name)
        if entries is not None:
            if n >= len(entries):
                raise BenchInputError(f"devices names {name}, but this process sees {len(entries)} GPU(s) "
                                      f"(CUDA_VISIBLE_DEVICES={visible!r})")
            pool.append((name, entries[n]))
        else:
            if gpu_count and n >= gpu_count:
                raise BenchInputError(f"devices names {name}, but this machine has {gpu_count} GPU(s): "
                                      f"cuda:0 ... cuda:{gpu_count - 1}")
            pool.append((name, str(n)))
    return pool


class LocalExecutor:
    name = "local"

    def __init__(self, devices: tuple[str, ...], needs: list[int], gpu_count: int | None = None):
        self.pool = resolve_pool(devices, gpu_count) if devices else None
        self.free = list(self.pool) if self.pool else [None]  # without devices: one slot, no GPU chosen
        most = max(needs, default=0)
        if self.pool and most > len(self.pool):
            raise BenchInputError(f"a build group asks for {most} GPUs (tensor_parallel_size), but devices has "
                                  f"{len(self.pool)}: list more devices or lower tensor_parallel_size")

    def acquire(self, run):
        """Return the GPUs (or the one slot) the run gets now, or None if they are taken."""
        need = max(1, run.gpus) if self.pool else 1
        if len(self.free) < need:
            return None
        taken, self.free = self.free[:need], self.free[need:]
        return taken

    def release(self, placement) -> None:
        self.free.extend(placement)
        if self.pool:
            order = {name: i for i, (name, _) in enumerate(self.pool)}
            self.free.sort(key=lambda d: order[d[0]])  # lowest GPUs first: neighbours for tensor parallelism

    def describe(self, placement) -> str:
        return ",".join(name for name, _ in placement) if self.pool else ""

    def run(self, run, placement, emit, stop) -> None:
        """Run one group round in worker subprocesses on the placement's GPUs; emit its events."""
        info = {"executor": "local", "host": socket.gethostname()}
        if self.pool:
            visible = ",".join(entry for _, entry in placement)
            run.job.env = {**run.job.env, "CUDA_VISIBLE_DEVICES": visible}
            info.update(devices=[name for name, _ in placement], cuda_visible_devices=visible)
        emit({"event": "placement", "placement": info})
        supervise_group(run.job, emit, stop)

    def close(self) -> None:
        pass
