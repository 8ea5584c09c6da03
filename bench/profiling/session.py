"""The profiling worker: loads one hf cell, warms up, times and profiles a short fixed window.

Runs in its own process (`python -m bench.profiling.session JOB.json RESULT.json`), like the
measurement worker, so the `bench profile` parent never touches the GPU and nsys can wrap
exactly this process. The window is the first batch of the cell's workload (max_batch_size
requests) cut to `decode_steps` + 1 new tokens: one prefill and `decode_steps` decode steps.

Order: warm-up windows (kernel selection, allocator growth, compilation), one unprofiled
window (its wall time is the reference), then the profiled window with ranges:
- tool "torch": record_function ranges + torch.profiler -> KernelTable + Chrome trace here;
- tool "nsys": NVTX ranges, cudaProfilerStart/Stop around the window; the parent reads the
  report nsys writes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path


def window_requests(requests, max_batch_size: int, decode_steps: int, batches: int = 1) -> list:
    """Return the window's requests: the first batches*max_batch_size, each cut to decode_steps + 1 tokens."""
    if decode_steps < 1:
        raise ValueError("decode_steps must be >= 1")
    chosen = list(requests)[: max_batch_size * batches]
    return [dataclasses.replace(r, output_len=decode_steps + 1) for r in chosen]


def wall(fn, cuda: bool) -> float:
    """Return fn's wall time in seconds, the device synchronised before and after."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def run_session(job: dict) -> dict:
    """Return the session's result: wall times, the KernelTable (torch tool) and file paths."""
    import torch

    from bench.backends import backend_class
    from bench.profiling.nvtx import ModuleRanges, RangeStack
    from bench.spec import BuildKey, Cell
    from bench.workloads.workload import Workload, batches

    key = BuildKey.from_dict(job["build_key"])
    cell = Cell.from_dict(job["cell"])
    backend = backend_class(key.backend)()
    loaded = backend.load(backend.build(key, Path(job["engines_dir"])))
    model = getattr(loaded, "model", None)
    if model is None:
        raise RuntimeError(f"backend {key.backend!r} exposes no torch model to put ranges on")
    workload = Workload.from_json(Path(job["workload_file"]).read_text())
    reqs = window_requests(workload.requests, cell.max_batch_size, job["decode_steps"], job.get("batches", 1))
    chunks = batches(reqs, cell.max_batch_size, cell.options_dict.get("batching", "dataset"))
    cuda = loaded.device.type == "cuda" if hasattr(loaded, "device") else torch.cuda.is_available()
    tool = job["tool"]
    out_dir = Path(job["out_dir"])

    def window(ranges=None):
        for i, chunk in enumerate(chunks):
            if ranges is None:
                loaded.run(chunk, cell.max_batch_size, cell.options_dict)
            else:
                with ranges.batch(i):
                    loaded.run(chunk, cell.max_batch_size, cell.options_dict)

    def timed(fn) -> float:
        return wall(fn, cuda)

    for _ in range(job.get("warmup", 1)):
        window()
    unprofiled_s = timed(window)
    stack = RangeStack(record_function=tool == "torch", nvtx=tool == "nsys" and cuda)
    result = {"tool": tool, "unprofiled_window_s": unprofiled_s, "cuda": cuda,
              "window": {"requests": len(reqs), "batches": len(chunks), "decode_steps": job["decode_steps"],
                         "prompt_tokens": [r.input_len for r in reqs]}}
    with ModuleRanges(model, job["patterns"], stack=stack) as ranges:
        result["ranges_matched"] = len(ranges.targets)
        if tool == "torch":
            from bench.profiling.torch_collector import profile_call

            holder = {}

            def profiled():
                holder["s"] = timed(lambda: window(ranges))

            table, trace = profile_call(profiled, cuda=cuda, labels=stack.labels, trace_path=out_dir / "trace.json",
                                        meta={"cell_id": cell.cell_id, "label": cell.label})
            result["profiled_window_s"] = holder["s"]
            table.save(out_dir / "kernel_table.json")
            result["kernel_table"] = str(out_dir / "kernel_table.json")
            result["trace"] = str(trace)
        elif tool == "nsys":
            if not cuda:
                raise RuntimeError("the nsys tool profiles CUDA kernels: this cell does not run on a GPU")
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            try:
                result["profiled_window_s"] = timed(lambda: window(ranges))
            finally:
                torch.cuda.cudart().cudaProfilerStop()
        else:
            raise ValueError(f"unknown tool {tool!r}")
    from bench.execution.environment import fingerprint

    result["environment"] = fingerprint(key.device)
    if stack.depth:
        raise RuntimeError(f"{stack.depth} range(s) left open after the window")
    loaded.close()
    return result


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    result = run_session(job)
    Path(argv[1]).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
