"""Synthetic result records in the store's shape: a fixed matrix for golden tables, browser tests and
the dashboard benchmark. Deterministic for a seed; the numbers are made up and labelled so
(environment host 'synthetic'), never published as measurements.
"""

from __future__ import annotations

import hashlib
import json
import random

from bench import CELL_ID_VERSION
from bench.results.records import RunContext, new_record


def _cell_id(cell: dict) -> str:
    blob = json.dumps({"cell": cell, "schema_version": CELL_ID_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def synthetic_records(
    *,
    workloads=(("sharegpt", None, None), ("fixed-128-128", 128, 128)),
    backends=("hf", "trtllm"),
    precisions=("bf16", "int8", "int4"),
    batch_sizes=(1, 2, 4, 8, 16, 32),
    trials: int = 3,
    requests: int = 32,
    seed: int = 0,
    model: str = "Qwen/Qwen-7B-Chat",
    telemetry: bool = True,
    gpu_name: str = "NVIDIA H200",
    gpu_memory_gb: dict | None = None,
) -> list:
    """Return typed records for every workload x backend x precision x batch size x trial; hf bf16 OOMs at bs >= 32.

    All records share one synthetic run context (one run of `trials` trials per cell);
    gpu_memory_gb: {backend: cap} puts those backends' cells under a memory cap.
    """
    rng = random.Random(seed)
    env = {"host": "synthetic", "gpu_name": gpu_name, "gpu_count": 1, "driver": "570.00", "cuda": "13.0",
           "torch": "2.11.0", "transformers": "5.17.0", "tensorrt_llm": "1.0.0", "torchao": None,
           "python": "3.12.0", "cpu": "synthetic CPU", "commit": "0123456789abcdef0123", "dirty": False,
           "gpu_memory_bytes": 143_771_000_000}
    speed = {"hf": 1.0, "trtllm": 3.0, "vllm": 2.5, "sglang": 2.6}
    prec_speed = {"bf16": 1.0, "int8": 1.4, "int4": 1.9, "fp16": 1.0, "fp32": 0.6}
    out, t0 = [], 1_790_000_000.0
    contexts = {}

    def context(backend: str) -> RunContext:
        cap = (gpu_memory_gb or {}).get(backend)
        if cap not in contexts:
            contexts[cap] = RunContext(run_id=f"synthetic-{seed}", command="synthetic", matrix="synthetic",
                                       commit=env["commit"], dirty=False, gpu_memory_gb=cap, runs=1, trials=trials,
                                       warmup=1, started_at=t0)
        return contexts[cap]

    for wl_name, in_len, out_len in workloads:
        wl = {"name": wl_name, "source": "synthetic" if in_len else "sharegpt", "input_len": in_len, "output_len": out_len,
              "num_requests": requests, "max_input_len": None if in_len else 1024, "max_output_len": None if in_len else 2048}
        lens = [(in_len or rng.randint(8, 1000), out_len or rng.randint(2, 600)) for _ in range(requests)]
        for backend in backends:
            for precision in precisions:
                for bs in batch_sizes:
                    cell = {"backend": backend, "model": model, "precision": precision, "max_batch_size": bs,
                            "device": "cuda", "options": {}, "workload": wl}
                    cid = _cell_id(cell)
                    oom = backend == "hf" and precision == "bf16" and bs >= 32
                    for trial in range(trials):
                        t0 += 60
                        rec = {"cell_id": cid, "trial": trial, "started_at": t0, "ended_at": t0 + 30}
                        summary = {"name": wl_name, "num_requests": requests,
                                   "total_input_tokens": sum(i for i, _ in lens),
                                   "total_output_tokens": sum(o for _, o in lens)}

                        def made(rec, cell=cell, summary=summary, backend=backend):
                            return new_record("measurement", cell, rec, context=context(backend), workload=summary,
                                              environment=env)

                        if oom:
                            rec.update(status="oom", metrics=None, samples=[], extra={},
                                       error="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
                            out.append(made(rec))
                            break  # the worker skips an OOM cell's other trials
                        tok_s = 40.0 * speed[backend] * prec_speed[precision] * bs ** 0.8 * (1 + rng.gauss(0, 0.02))
                        total_out = sum(o for _, o in lens)
                        duration = total_out / tok_s
                        step_ms = 1000.0 * bs / tok_s
                        samples = []
                        for i, (n_in, n_out) in enumerate(lens):
                            ttft = n_in * 0.05 * (1 + rng.random()) + step_ms
                            samples.append({"id": f"r{i}", "in": n_in, "out": n_out, "ttft_ms": ttft,
                                            "e2el_ms": ttft + (n_out - 1) * step_ms * (1 + 0.1 * rng.random()), "error": None})
                        ttfts = sorted(s["ttft_ms"] for s in samples)
                        # decode phase: the window less each batch's prefill (its slowest first token)
                        prefill_s = sum(max(s["ttft_ms"] for s in samples[i:i + bs]) for i in range(0, len(samples), bs))
                        decode_tok_s = (total_out - requests) / (duration - prefill_s / 1000)
                        metrics = {"completed": requests, "failed": 0, "duration_s": duration,
                                   "total_input_tokens": sum(i for i, _ in lens), "total_output_tokens": total_out,
                                   "request_throughput": requests / duration, "output_throughput": tok_s,
                                   "decode_throughput": decode_tok_s,
                                   "ttft_median_ms": ttfts[len(ttfts) // 2], "ttft_p99_ms": ttfts[-1],
                                   "tpot_median_ms": step_ms, "tpot_p99_ms": step_ms * 1.1,
                                   "e2el_p99_ms": max(s["e2el_ms"] for s in samples),
                                   "peak_memory_gb": 16.0 / prec_speed[precision] + 0.5 * bs,
                                   "tokens_per_joule": tok_s / 500.0, "sol_pct": min(95.0, 8.0 * speed[backend] * bs ** 0.5)}
                        extra = {"peak_memory_bytes": int(metrics["peak_memory_gb"] * 1e9)}
                        if telemetry:
                            extra["telemetry"] = [{"t_s": k * duration / 10, "power_w": 300 + 20 * bs ** 0.5 + rng.random() * 10,
                                                   "memory_gb": metrics["peak_memory_gb"] * min(1.0, 0.5 + k / 10)}
                                                  for k in range(11)]
                        rec.update(status="ok", metrics=metrics, samples=samples, extra=extra, error=None)
                        out.append(made(rec))
    return out


def write_store(path, records: list) -> None:
    """Write typed records as a JSON Lines store (one line each), replacing the file."""
    from pathlib import Path

    from bench.results.store import ResultStore

    Path(path).unlink(missing_ok=True)
    store = ResultStore(path)
    for rec in records:
        store.append(rec)
