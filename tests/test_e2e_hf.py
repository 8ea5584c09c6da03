"""A real (tiny, random-weight) Qwen2 model through the whole pipeline on the CPU."""

import pytest

from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix


@pytest.mark.slow
def test_hf_tiny_matrix_exact_output_lengths(tmp_path):
    m = parse_matrix({
        "backends": ["hf"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1, 3],
        "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 1,
        "options": {"attn_implementation": ["sdpa"], "cache": ["dynamic", "static"]},
        "workload": {"w": {"num_requests": 5, "max_input_len": 64, "max_total_len": 128, "max_output_len": 12}},
    })
    store = tmp_path / "s.jsonl"
    summary = run_matrix(m, store, show_progress=False)
    assert summary.statuses == {"ok": 4}, list(ResultStore(store).records())[0].get("error")
    for r in ResultStore(store).records():
        met = r["metrics"]
        assert met["total_output_tokens"] == met["expected_output_tokens"] == r["workload"]["output_tokens"]
        assert met["ttft_mean_ms"] > 0 and met["output_throughput"] > 0
        assert len(r["samples"]) == 5
