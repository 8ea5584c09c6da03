"""asv suite: the harness's own hot paths (workload building, result loading, reports, compare).

These run on any machine in milliseconds to seconds and catch the harness itself getting
slower: tokenizing a ShareGPT slice, loading a store of a few hundred records into a frame,
building the speedup table and the full report (tables + dashboard), comparing two stores.

They are timed in CPU time of the benchmark process (asv's `timer` attribute), not wall time:
the work is single-process Python, and on a shared machine wall time mostly measures the other
processes (time_load_frame read 29 ms and 19 ms for one code under load; docs/guide/regressions.md).
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path


def write_store(path: Path, cells: int = 32, runs: int = 3, slowdown: float = 1.0) -> Path:
    """Write a store of cells x runs fake-backend records, one trial per run (real metrics from the virtual clock)."""
    from bench.backends.fake.backend import FakeLoaded
    from bench.metrics import pass_metrics, request_samples
    from bench.results.records import RunContext, new_record
    from bench.results.store import ResultStore
    from bench.spec.cells import WorkloadSpec
    from bench.workloads.request import Request

    store = ResultStore(path)
    requests = [Request(f"r{i}", tuple(range(16 + i % 8)), 8 + i % 5) for i in range(32)]
    wl = WorkloadSpec(name="syn", source="synthetic", input_len=16, output_len=8).to_dict()
    env = {"cpu": "asv", "torch": "x", "transformers": "y", "gpu_name": None, "gpu_count": 0, "driver": None,
           "commit": "0" * 40, "dirty": False}
    context = RunContext(run_id=f"asv-{path.stem}", command="asv", matrix="asv", commit="0" * 40, dirty=False,
                         runs=runs, trials=1, started_at=0.0)
    loaded = FakeLoaded({})
    for c in range(cells):
        precision = ("bf16", "fp16", "fp32", "int8")[c % 4]
        bs = 2 ** (c // 4)
        cell = {"backend": "fake" if c else "hf", "model": "qwen-tiny", "precision": "bf16" if c == 0 else precision,
                "max_batch_size": bs, "device": "cpu", "workload": wl, "options": {"noise": 0.02}}
        for run in range(runs):
            out = loaded.run(requests, bs, {"noise": 0.02, "slowdown": slowdown, "seed": c})
            outcome = {"cell_id": f"{c:016x}", "trial": 0, "status": "ok",
                       "metrics": pass_metrics(out.timings, out.started, out.ended),
                       "samples": request_samples(out.timings), "extra": out.extra,
                       "started_at": float(run), "ended_at": float(run) + 1}
            store.append(new_record("measurement", copy.deepcopy(cell), outcome, context=context, run=run,
                                    environment=env))
    return path


class Workload:
    """Tokenize and sample a ShareGPT slice (the dataset itself is loaded once in setup)."""

    timeout = 600
    timer = time.process_time

    def setup(self):
        from bench.spec.cells import WorkloadSpec
        from bench.workloads.workload import build_workload

        self.spec = WorkloadSpec(name="asv", num_requests=32, max_input_len=256, max_total_len=512, max_output_len=32)
        build_workload(self.spec)  # warm: package data, tokenizer ranks

    def time_build_workload(self):
        from bench.workloads.workload import build_workload

        build_workload(self.spec)


class Store:
    """Load a 96-record store; build the speedup table and the whole report; compare two stores."""

    timeout = 600
    timer = time.process_time

    def setup(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-asv-")
        root = Path(self.tmp.name)
        self.base = write_store(root / "base.jsonl")
        self.head = write_store(root / "head.jsonl", slowdown=1.02)
        self.out = root / "report"
        self.frame = _load_frame(self.base)

    def teardown(self):
        self.tmp.cleanup()

    def time_load_frame(self):
        _load_frame(self.base)

    def peakmem_load_frame(self):
        _load_frame(self.base)

    def time_speedup_table(self):
        from bench.report.render import to_markdown
        from bench.report.tables import speedup_table

        to_markdown(speedup_table(self.frame))

    def time_build_report(self):
        from bench.report.build import build_report

        build_report([self.base], self.out)

    def time_compare(self):
        from bench.results.compare import compare_stores

        compare_stores(self.base, self.head)


def _load_frame(store):
    """Return the results frame the reports use (store -> typed records -> chosen rows -> bench.report.data)."""
    from bench.report.data import report_data
    from bench.results import query

    return report_data(query.select(query.load([store])).records).frame
