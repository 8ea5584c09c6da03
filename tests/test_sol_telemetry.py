"""Speed-of-light arithmetic and telemetry summaries, against hand-computed numbers."""

import pytest

from bench.backends import speed_of_light as sol
from bench.machine import telemetry
from bench.metrics import efficiency_metrics
from bench.models import QWEN_7B_SHAPE, kv_bytes_per_token


def test_kv_bytes_per_token_qwen7b_bf16():
    # 2 (K,V) x 32 layers x 32 kv heads x 128 head dim x 2 bytes = 524288 = 512 KiB
    assert kv_bytes_per_token(QWEN_7B_SHAPE, 2) == 524288
    gqa = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "num_hidden_layers": 2}
    assert kv_bytes_per_token(gqa, 4) == 2 * 2 * 2 * 32 * 4
    assert kv_bytes_per_token({**gqa, "head_dim": 64}, 2) == 2 * 2 * 2 * 64 * 2  # an explicit head_dim wins


def test_a_step_streams_every_weight_but_an_untied_embedding_table():
    emb = QWEN_7B_SHAPE["vocab_size"] * QWEN_7B_SHAPE["hidden_size"] * 2  # bf16: 1.24 GB
    assert sol.streamed_weight_bytes(15_000_000_000, emb, tied=False) == 15_000_000_000 - emb
    assert sol.streamed_weight_bytes(15_000_000_000, emb, tied=True) == 15_000_000_000  # read as the output head


def test_decode_step_and_batch_bound_by_hand():
    assert sol.decode_step_bytes(1000, 10, [3, 5]) == 1000 + 80
    # One request, 2 in / 3 out: prefill reads 1000; step 1 reads 1000 + 10*3; step 2 1000 + 10*4.
    assert sol.batch_lower_bound_s([(2, 3)], 1000, 10, 100.0) == pytest.approx((1000 + 1030 + 1040) / 100)
    # Two rows, outputs 1 and 3: the short row is done after prefill and is not read again.
    assert sol.batch_lower_bound_s([(4, 1), (2, 3)], 1000, 10, 1.0) == pytest.approx(1000 + 1030 + 1040)
    assert sol.run_lower_bound_s([[(2, 3)], [(2, 3)]], 1000, 10, 100.0) == pytest.approx(2 * 30.7)
    assert sol.batch_lower_bound_s([], 1000, 10, 1.0) == 0.0


def sol_tokens_per_s(weight_bytes, kv_per_token, context_len, batch, bandwidth_bytes_s):
    """Decode speed-of-light in output tokens/s for `batch` rows at one context length."""
    return batch / (sol.decode_step_bytes(weight_bytes, kv_per_token, [context_len] * batch) / bandwidth_bytes_s)


def test_sol_tokens_per_s_matches_the_probe_figure():
    # Qwen-7B shape in bf16 at 4.28 TB/s, batch 1, context 256: about 275 tok/s.
    from bench.models import resolve_model

    w = resolve_model("qwen-7b-shape").num_parameters * 2
    rate = sol_tokens_per_s(w, 524288, 256, 1, 4.28e12)
    assert 265 < rate < 285  # the figure, every weight counted
    # What a step reads: less the 1.24 GB embedding table; at the H200's 4.24 TB/s, about 296 tok/s.
    emb = QWEN_7B_SHAPE["vocab_size"] * QWEN_7B_SHAPE["hidden_size"] * 2
    streamed = sol.streamed_weight_bytes(w, emb, tied=False)
    assert streamed == pytest.approx(14.20e9, rel=1e-3)
    assert sol_tokens_per_s(streamed, 524288, 256, 1, 4.24e12) == pytest.approx(296, abs=1)
    assert sol_tokens_per_s(100, 0, 0, 4, 1000.0) == pytest.approx(40.0)


def test_copy_bandwidth_file_names_host_and_gpu(tmp_path):
    p = sol.copy_bandwidth_file(tmp_path, "GPU-1234/ab c")
    assert p.parent == tmp_path and "GPU-1234_ab_c" in p.name


def test_efficiency_metrics():
    m = efficiency_metrics(1000, 10.0, 500.0, 7.5)
    assert m == {"tokens_per_joule": 2.0, "sol_pct": 75.0}
    assert efficiency_metrics(1000, 10.0, None, None) == {"tokens_per_joule": None, "sol_pct": None}


def test_summarize_samples_counter_and_fallback():
    samples = [(0.0, 100.0, 2e9, 1500.0), (1.0, 300.0, 5e9, 1700.0), (2.0, 300.0, 4e9, 1980.0)]
    s = telemetry.summarize_samples(samples, energy_mj=500_000.0, window_s=2.0)
    assert s["energy_j"] == 500.0 and s["avg_power_w"] == 250.0
    assert s["peak_nvml_memory_gb"] == 5.0 and s["sm_clock_mhz_median"] == 1700.0
    # No counter: trapezoid over the power samples = (100+300)/2 + (300+300)/2 = 500 J.
    s = telemetry.summarize_samples(samples, energy_mj=None, window_s=2.0)
    assert s["energy_j"] == 500.0
    empty = telemetry.summarize_samples([], None, 1.0)
    assert empty["energy_j"] is None and empty["avg_power_w"] is None and empty["sm_clock_mhz_median"] is None


def test_sampler_on_cpu_is_all_null():
    with telemetry.Sampler("cpu") as s:
        pass
    assert s.summary == telemetry.NULL_SUMMARY and s.timeline is None


def test_nvml_index_honours_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert telemetry.nvml_index("cuda") == 0 and telemetry.nvml_index("cuda:2") == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert telemetry.nvml_index("cuda:1") == 5 and telemetry.nvml_index("cuda:2") is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert telemetry.nvml_index("cuda") == "GPU-abc"
    assert telemetry.nvml_index("cpu") is None


def test_downsample_keeps_ends():
    assert telemetry.downsample(list(range(10)), 4) == [0, 3, 6, 9]
    assert telemetry.downsample([1, 2], 5) == [1, 2]


def test_gpu_info_names_the_physical_gpu(monkeypatch):
    """The environment record says which board ran (NVML's UUID), not only its model."""
    import sys
    from types import SimpleNamespace

    from bench.machine.environment import gpu_info

    fake = SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=150754820096),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetUUID=lambda h: b"GPU-5a76b6e0-dff7-7eaa-b352-20619d6d2fa2",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = gpu_info(0)
    assert info["gpu_uuid"] == "GPU-5a76b6e0-dff7-7eaa-b352-20619d6d2fa2"
    assert info["gpu_name"] == "NVIDIA H200" and info["compute_capability"] == "9.0"
