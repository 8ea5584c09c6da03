"""Runs capacity probes through the worker machinery and stores every measured pass as a `capacity-probe` record.

A probe is the configuration's cell at one load (`probe_cell`: request_rate or max_concurrency
set as the backend's option, or max_batch_size), measured as the matrix would: `runs` fresh
worker processes (bench.execution.supervisor), each with its warm-up and `trials` passes.
Each pass becomes one record (bench.results.records.new_record, kind capacity-probe) carrying
the `bench capacity` invocation's run context and extra.capacity = {axis, value, slo}. The
worst pass decides whether the probe met the SLO (bench.capacity.search.judge).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.capacity.search import ProbeResult, judge
from bench.errors import BenchInputError

# The openai backend's per-request goodput bounds, set from the SLO so each pass reports goodput.
GOODPUT_OPTIONS = {"ttft": "slo_ttft_ms", "tpot": "slo_tpot_ms", "e2el": "slo_e2el_ms"}


def check_axis(cell, axis: str) -> None:
    """Raise BenchInputError when the cell's backend cannot be loaded along `axis`."""
    from bench.backends.registry import backend_class

    if axis == "max_batch_size":
        return
    if axis not in backend_class(cell.backend).options:
        raise BenchInputError(f"capacity axis {axis!r} is an option backend {cell.backend!r} does not have; "
                              f"use --axis max_batch_size (closed loop), or a serving backend (openai) for {axis}")


def probe_cell(cell, axis: str, value, slo: dict):
    """Return the cell at load `value` along `axis`, with the SLO's per-request goodput bounds where the backend takes them."""
    from bench.backends.registry import backend_class

    declared = backend_class(cell.backend).options
    options = cell.options_dict
    # A per-request bound for goodput: the tightest of the SLO's bounds on that latency.
    for name, bound in slo.items():
        option = GOODPUT_OPTIONS[name.split("_")[0]]
        if option in declared:
            options[option] = min(bound, options.get(option) or bound)
    if axis == "max_batch_size":
        return replace(cell, max_batch_size=int(value), options=tuple(sorted(options.items())))
    options[axis] = value
    return replace(cell, options=tuple(sorted(options.items())))


@dataclass
class CapacityRunner:
    """A `probe(value)` callable for one configuration: runs and stores every pass of every probe."""

    base_cell: object  # bench.spec.cells.Cell
    axis: str
    slo: dict
    store_path: Path
    runs: int = 1
    trials: int = 1
    warmup: int = 1
    engines_dir: Path = Path("engines")
    workload_cache: Path = Path("workloads/cache")
    timeout_s: float = 600.0
    build_timeout_s: float = 1800.0
    gpu_memory_gb: float | None = None
    context: object = None  # bench.results.records.RunContext of the `bench capacity` invocation
    search: dict | None = None  # the search's settings (lower, upper, tolerance, strategy), stored with each probe

    def __post_init__(self):
        from bench.results.records import new_context

        check_axis(self.base_cell, self.axis)
        if self.context is None:
            self.context = new_context("capacity", gpu_memory_gb=self.gpu_memory_gb, runs=self.runs,
                                       trials=self.trials, warmup=self.warmup)

    def __call__(self, value) -> ProbeResult:
        from bench.machine.failures import first_line
        from bench.results.store import ResultStore

        started = time.perf_counter()
        cell = probe_cell(self.base_cell, self.axis, value, self.slo)
        store = ResultStore(self.store_path)
        oks, failures, busy = [], [], []
        for run in range(self.runs):
            for record in self._run(cell, run, value):
                store.append(record)
                if record.status == "ok":
                    oks.append(record.metrics or {})
                    busy.append(record.busy_reasons)  # bench.machine.host_load's rule, as `bench run` applies it
                else:
                    failures.append(f"{record.status}: {first_line(record.error)}")
        result = judge(value, oks, failures, self.slo, busy)
        return replace(result, seconds=time.perf_counter() - started)

    def _run(self, cell, run: int, value) -> list:
        """Return the records of one fresh worker process measuring the probe cell."""
        from bench.execution.supervisor import GroupItem, GroupJob
        from bench.machine.memory_cap import env_for
        from bench.results.records import new_record
        from bench.runner.matrix import run_probe_group
        from bench.workloads.workload import cached_workload

        workload, wl_file = cached_workload(cell.workload, Path(self.workload_cache))
        key = cell.build_key()
        job = GroupJob(
            build_key=key, items=[GroupItem(cell, list(range(self.trials)), str(wl_file))],
            engines_dir=Path(self.engines_dir), warmup=self.warmup, build_timeout_s=self.build_timeout_s,
            cell_timeout_s=self.timeout_s, log_dir=Path(self.store_path).parent / "logs",
            log_prefix=f"{Path(self.store_path).stem}-capacity-{key.key_hash}", env=env_for(self.gpu_memory_gb),
        )
        state, results = run_probe_group(job, key)
        target = {"axis": self.axis, "value": value, "slo": dict(self.slo), **({"search": self.search} if self.search else {})}
        return [new_record("capacity-probe", cell, {**r, "extra": {**(r.get("extra") or {}), "capacity": target}},
                           context=self.context, run=run, workload=workload.summary(), build=state["build"],
                           environment=state["env"]) for r in results]
