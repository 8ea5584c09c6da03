"""Runs OOM probes through the worker machinery and stores each one as a result record.

A probe is a cell (bench.oom.search.probe_cell) run by bench.execution.supervisor like any other, with warmup 0 and
one trial: an OOM is classified by bench.machine.failures, a worker that dies is replaced, and each
probe is stored as an OomProbe record (bench.results.records.new_record) carrying the `bench
oom` invocation's run context and extra.probe = the worst case it stands for. Stored probes
are reused (same cell, trial, cap and environment) unless `redo`, so a re-run of `bench oom`
costs nothing.

Each probe is a worker process of its own, forked from the invocation's zygote (bench.execution.zygote:
torch and transformers imported once per `bench oom`, not per probe); its record's `build.startup`
says so. A probe compiles only where its cell does (compile != off): the compiled step's CUDA-graph
pool is part of the peak it measures (docs/guide/oom.md); with warmup 0 nothing else runs before its
one pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from bench.oom.search import Boundary, ProbeOutcome, probe_cell, search_boundary


@dataclass
class ProbeRunner:
    """A `probe(batch_size)` callable for one (cell, lengths, cap); stores every probe it runs."""

    base_cell: object  # bench.spec.cells.Cell: backend, model, precision, device, options
    max_input_len: int
    max_output_len: int
    store_path: Path
    decode_steps: int = 4
    gpu_memory_gb: float | None = None
    engines_dir: Path = Path("engines")
    workload_cache: Path = Path("workloads/cache")
    timeout_s: float = 600.0
    build_timeout_s: float = 1800.0
    redo: bool = False
    matrix_name: str = "oom"
    context: object = None  # bench.results.records.RunContext of the `bench oom` invocation

    def __post_init__(self):
        from bench.results.records import new_context

        self._trials: dict[str, int] = {}  # cell_id -> probes of it in this search
        if self.context is None:
            self.context = new_context("oom", matrix=self.matrix_name, gpu_memory_gb=self.gpu_memory_gb, warmup=0)

    def __call__(self, batch_size: int) -> ProbeOutcome:
        from bench.results import query
        from bench.results.store import ResultStore

        cell = probe_cell(self.base_cell, batch_size, self.max_input_len, self.max_output_len, self.decode_steps)
        trial = self._trials.get(cell.cell_id, 0)
        self._trials[cell.cell_id] = trial + 1
        store = ResultStore(self.store_path)
        if not self.redo and store.path.exists():
            for rec in query.probes(query.load([store.path])):
                if (rec.cell_id == cell.cell_id and rec.trial == trial and rec.status in ("ok", "oom")
                        and rec.gpu_memory_gb == self.gpu_memory_gb):
                    return _outcome(batch_size, rec, 0.0, reused=True)
        started = time.perf_counter()
        record = self._run(cell, trial)
        store.append(record)
        return _outcome(batch_size, record, time.perf_counter() - started)

    def _run(self, cell, trial: int):
        from bench.execution.supervisor import GroupItem, GroupJob
        from bench.machine.memory_cap import env_for
        from bench.results.records import new_record
        from bench.runner.matrix import run_probe_group
        from bench.workloads.workload import cached_workload

        workload, wl_file = cached_workload(cell.workload, Path(self.workload_cache))
        key = cell.build_key()
        job = GroupJob(
            build_key=key, items=[GroupItem(cell, [trial], str(wl_file))], engines_dir=Path(self.engines_dir),
            warmup=0, build_timeout_s=self.build_timeout_s, cell_timeout_s=self.timeout_s,
            log_dir=Path(self.store_path).parent / "logs", log_prefix=f"{Path(self.store_path).stem}-oom-{key.key_hash}",
            env=env_for(self.gpu_memory_gb),
        )
        state, results = run_probe_group(job, key)
        outcome = dict(results[-1])
        outcome["extra"] = {**(outcome.get("extra") or {}), "probe": {
            "max_input_len": self.max_input_len, "max_output_len": self.max_output_len,
            "decode_steps": min(self.decode_steps, self.max_output_len), "batch_size": cell.max_batch_size,
        }}
        return new_record("oom-probe", cell, outcome, context=self.context, workload=workload.summary(),
                          build=state["build"], environment=state["env"])


def _outcome(batch_size: int, record, seconds: float, reused: bool = False) -> ProbeOutcome:
    peak = record.metric("peak_memory_gb")
    if peak is None and record.extra.get("peak_memory_bytes_at_failure") is not None:
        peak = record.extra["peak_memory_bytes_at_failure"] / 1e9
    return ProbeOutcome(batch_size, record.status, peak, seconds, reused, record.error)


def find_boundary(runner: ProbeRunner, lower: int, upper: int, strategy: str = "grow", confirm: bool = True) -> Boundary:
    """Return the boundary for the runner's (cell, lengths, cap), every probe stored as it ran."""
    return search_boundary(runner, lower, upper, strategy=strategy, confirm=confirm)
