"""asv suite: the harness's key cells, tracked as lower-is-better values across commits.

asv treats every value as "bigger is worse", so nothing here returns tokens/s: each cell gives
milliseconds per output token (the inverse of output throughput), the median E2E time per
request, and peak memory (the device's on a GPU, the worker's RSS on the CPU). Values are the
median over the matrix's trials (warm-up excluded), measured once per asv run in setup_cache
by the real harness (bench.runner.matrix.run_matrix: worker subprocesses, the result store).

Which cells: BENCH_ASV_MATRIX=cpu (default) runs the CPU default model (hf backend, qwen-tiny)
on a tiny ShareGPT slice; BENCH_ASV_MATRIX=gpu runs the Qwen-7B-shaped model in bf16 at batch 1
and 8 on 8 prompts (in an existing environment on the GPU machine: scripts/asv_existing.py).
BENCH_ASV_ENGINES=PATH (an artifact of `bench build` or a folder of them, one per build key of
the chosen matrix) makes ModelCell load those engines instead of compiling and tuning in each
commit's run, so a compiled, tuned cell's verdict compares code, not two tuning draws
(docs/guide/hf-backend.md, "Engines as artifacts"); an artifact from another torch, Triton, GPU or
driver fails setup_cache with the difference named.
`FakeCell` is the harness's own canary on the fake backend's virtual clock (deterministic: a
change means the timing accounting changed); BENCH_ASV_FAKE_SLOWDOWN / BENCH_ASV_FAKE_NOISE
plant a regression in it (the planted-regression test uses them).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CPU_MATRIX = {
    "name": "asv-cpu", "backends": ["hf"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
    "max_batch_sizes": [1, 4], "workloads": ["asv-tiny"], "trials": 3, "warmup": 1, "timeout_s": 600,
    "workload": {"asv-tiny": {"source": "sharegpt", "num_requests": 8, "seed": 0, "max_input_len": 128,
                              "max_total_len": 256, "max_output_len": 16}},
}
# Sized for one H200 session: bf16 at batch 1 and 8, 8 ShareGPT prompts with answers fixed at 64
# tokens, so a commit's four passes per cell take minutes, not the preset's hours.
GPU_MATRIX = {
    "name": "asv-gpu", "backends": ["hf"], "model": "qwen-7b-shape", "device": "cuda", "precisions": ["bf16"],
    "max_batch_sizes": [1, 8], "workloads": ["asv-sharegpt"], "trials": 3, "warmup": 1, "timeout_s": 1200,
    "workload": {"asv-sharegpt": {"source": "sharegpt", "num_requests": 8, "seed": 0, "max_input_len": 1024,
                                  "max_total_len": 2048, "output_len": 64}},
}
FAKE_MATRIX = {
    "name": "asv-fake", "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
    "max_batch_sizes": [1, 4], "workloads": ["asv-syn"], "trials": 3, "warmup": 1, "timeout_s": 120,
    "workload": {"asv-syn": {"source": "synthetic", "num_requests": 16, "input_len": 32, "output_len": 16}},
}


def _cpu_or_gpu_data() -> dict:
    which = os.environ.get("BENCH_ASV_MATRIX", "cpu")
    if which not in ("cpu", "gpu"):
        raise ValueError(f"BENCH_ASV_MATRIX must be 'cpu' or 'gpu', got {which!r}")
    return GPU_MATRIX if which == "gpu" else CPU_MATRIX


def _cpu_or_gpu_matrix():
    from bench.spec.matrix import parse_matrix
    from bench.spec.narrow import narrow

    matrix = parse_matrix(_cpu_or_gpu_data())
    engines = os.environ.get("BENCH_ASV_ENGINES")
    return narrow(matrix, engines=[engines]) if engines else matrix


def _fake_matrix():
    from bench.spec.matrix import parse_matrix

    data = dict(FAKE_MATRIX)
    data["options"] = {
        "slowdown": float(os.environ.get("BENCH_ASV_FAKE_SLOWDOWN", "1.0")),
        "noise": float(os.environ.get("BENCH_ASV_FAKE_NOISE", "0.0")),
    }
    return parse_matrix(data)


def measure(matrix, keep_store: str | Path | None = None) -> dict[str, dict[str, float]]:
    """Return {cell label without options: {ms_per_output_token, e2el_median_ms, peak_memory_gb}}.

    The figures are those `bench report` prints for the same records (bench.results.query: the
    run's rows, each the mean of its runs' means): ms per output token is 1000 / output tok/s.
    keep_store (or BENCH_ASV_STORE_DIR): where the result store is kept, so `bench report` and
    `bench compare` can read the very records asv tracked.
    """
    import shutil

    from bench.results import query
    from bench.runner.matrix import run_matrix

    keep_dir = keep_store or os.environ.get("BENCH_ASV_STORE_DIR")
    with tempfile.TemporaryDirectory(prefix="bench-asv-") as tmp:
        store = Path(tmp) / f"{matrix.name}.jsonl"
        run_matrix(matrix, store, engines_dir=Path(tmp) / "engines", workload_cache=Path(tmp) / "wl",
                   show_progress=False, command="asv")
        rows = query.select(query.measurements(query.load([store]))).rows
        if keep_dir:
            Path(keep_dir).mkdir(parents=True, exist_ok=True)
            shutil.copy(store, Path(keep_dir) / store.name)
    out = {}
    for row in rows:
        if not row.ok_records:
            continue
        c = row.cell
        tok_s = row.spread("output_throughput").value
        # device memory where the backend reports it (GPU, fake), else the worker's peak RSS
        memory = row.spread("peak_memory_gb") or row.spread("peak_host_rss_gb")
        out[f"{c['precision']}/bs{c['max_batch_size']}"] = {
            "ms_per_output_token": 1000.0 / tok_s,
            "e2el_median_ms": row.spread("e2el_median_ms").value,
            "peak_memory_gb": memory.value,
        }
    return out


def _labels(data: dict) -> list[str]:
    """Return measure()'s cell labels for a matrix given as data (no include/exclude rules).

    Computed without importing bench, so discovery works against any commit's tree; an old
    `bench` that cannot run a cell fails in setup_cache, one benchmark at a time."""
    return [f"{p}/bs{b}" for p in data["precisions"] for b in data["max_batch_sizes"]]


def _value(cache: dict, cell: str, key: str) -> float:
    # A cell that did not produce an ok result (OOM on a GPU) has no value: asv records n/a.
    return cache[cell][key] if cell in cache else float("nan")


class _CellTracks:
    """What asv tracks for every cell (lower is better); asv skips this class: its name starts with _."""

    param_names = ["cell"]

    def track_ms_per_output_token(self, cache, cell):
        return _value(cache, cell, "ms_per_output_token")

    track_ms_per_output_token.unit = "ms/token"

    def track_e2el_median_ms(self, cache, cell):
        return _value(cache, cell, "e2el_median_ms")

    track_e2el_median_ms.unit = "ms"


class ModelCell(_CellTracks):
    """The CPU default model's (or the GPU preset's) cells through the whole harness."""

    timeout = 1800
    params = _labels(_cpu_or_gpu_data())

    def setup_cache(self):
        return measure(_cpu_or_gpu_matrix())

    def track_peak_memory_gb(self, cache, cell):
        return _value(cache, cell, "peak_memory_gb")

    track_peak_memory_gb.unit = "GB"


class FakeCell(_CellTracks):
    """The fake backend (virtual clock): a deterministic canary and the planted-regression target."""

    timeout = 300
    params = _labels(FAKE_MATRIX)

    def setup_cache(self):
        return measure(_fake_matrix())
