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


# The Qwen-7B shape in bf16, by hand: vocab 151936 x hidden 4096 x 2 B = 1,244,659,712 B per embedding table
# (the input table and the untied LM head alike); per layer q/k/v 3 x 4096^2 + 3 x 4096 bias, o 4096^2, MLP
# 3 x 4096 x 11008, two norms 2 x 4096 = 202,395,648 parameters; 32 layers + 2 tables + the final norm's 4096
# = 7,721,324,544 parameters = 15,442,649,088 B. A row of the table: 4096 x 2 = 8192 B. KV: 2 x 32 layers x
# 32 heads x 128 x 2 B = 524,288 B (512 KiB) per token.
EMBEDDING = 151936 * 4096 * 2
QWEN7B = sol.WeightBytes(stored=15_442_649_088, embedding_table=EMBEDDING, embedding_row=8192, tied=False)
KV = 524_288


def test_the_qwen7b_shape_by_hand():
    from bench.models import resolve_model

    assert EMBEDDING == 1_244_659_712  # 1.245 GB
    assert resolve_model("qwen-7b-shape").num_parameters * 2 == QWEN7B.stored
    assert kv_bytes_per_token(QWEN_7B_SHAPE, 2) == KV
    # a step reads every weight but the input table: 15,442,649,088 - 1,244,659,712
    assert QWEN7B.streamed == 14_197_989_376


def test_a_step_reads_embedding_rows_not_the_table_the_head_whole_and_the_kv_cache():
    # batch 1 at context 256: weights 14,197,989,376 + one row 8192 + 256 x 524,288 = 134,217,728 of KV
    assert sol.decode_step_bytes(QWEN7B, KV, [256]) == 14_197_989_376 + 8192 + 134_217_728 == 14_332_215_296
    # batch 8 at context 1024: 8 rows and 8 x 1024 tokens of KV (4,294,967,296 B): the KV cache is 23 % of the step
    assert sol.decode_step_bytes(QWEN7B, KV, [1024] * 8) == 14_197_989_376 + 65_536 + 4_294_967_296
    # a tied table is read whole as the head, and its rows by the lookup
    tied = sol.WeightBytes(stored=1000, embedding_table=400, embedding_row=4, tied=True)
    assert tied.streamed == 1000 and sol.decode_step_bytes(tied, 10, [3, 5]) == 1000 + 2 * 4 + 80
    # what the bound was before: every stored byte (15.44 GB) and no KV cache, 8.4 % below what batch 1 reads at 256
    assert QWEN7B.stored / sol.decode_step_bytes(QWEN7B, KV, [256]) == pytest.approx(1.0775, abs=1e-4)


def test_batch_bound_by_hand():
    w = sol.WeightBytes(stored=1100, embedding_table=100, embedding_row=1, tied=False)  # streams 1000
    # One request, 2 in / 3 out: prefill reads 1000 + 2 rows; step 1 reads 1000 + 1 + 10*3; step 2 1000 + 1 + 10*4.
    assert sol.batch_lower_bound_s([(2, 3)], w, 10, 100.0) == pytest.approx((1002 + 1031 + 1041) / 100)
    # Two rows, outputs 1 and 3: the short row is done after prefill and is not read again.
    assert sol.batch_lower_bound_s([(4, 1), (2, 3)], w, 10, 1.0) == pytest.approx(1006 + 1031 + 1041)
    assert sol.run_lower_bound_s([[(2, 3)], [(2, 3)]], w, 10, 100.0) == pytest.approx(2 * 30.74)
    assert sol.batch_lower_bound_s([], w, 10, 1.0) == 0.0


def test_step_bound_and_sol_pct_at_the_h200_bandwidth():
    b = sol.step_bound(QWEN7B, KV, [256], 4.24e12)
    assert b["bytes"] == 14_332_215_296 and b["kv_bytes"] == 134_217_728 and b["embedding_row_bytes"] == 8192
    assert b["time_us"] == pytest.approx(3380.24, abs=0.01)  # 14.33 GB at 4.24 TB/s: about 296 tok/s at batch 1
    assert 1e6 / b["time_us"] == pytest.approx(295.8, abs=0.1)
    assert sol.step_bound(QWEN7B, KV, [256], None)["time_us"] is None
    assert sol.sol_pct(3.38e-3, 5.0e-3) == pytest.approx(67.6)
    assert sol.sol_pct(3.38e-3, 3.0e-3) > 100  # impossible: the reports flag it
    assert sol.sol_pct(None, 1.0) is None and sol.sol_pct(1.0, 0.0) is None


def test_model_weight_bytes_of_a_real_model():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from bench.models import resolve_model

    untied = {**resolve_model("qwen-tiny").config, "tie_word_embeddings": False, "vocab_size": 1000}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**untied), dtype=torch.float32)
    w = sol.model_weight_bytes(model)
    assert w.stored == sum(p.numel() for p in model.parameters()) * 4
    assert w.embedding_table == 1000 * 128 * 4 and w.embedding_row == 128 * 4 and not w.tied
    assert w.streamed == w.stored - 1000 * 128 * 4  # the LM head (also 1000 x 128) stays in


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


def test_a_figure_above_its_bound_is_flagged_impossible_in_the_speedup_table():
    import pandas as pd

    from bench.report.render import render_rows, to_markdown
    from bench.report.tables import speedup_table

    base = {"store": "s", "model": "m", "device": "cuda", "workload": "w", "options": "{}", "gpu_name": None,
            "commit": None, "error": None, "started_at": 0.0, "schema_version": 1, "status": "ok", "trial": 0,
            "backend": "hf", "request_throughput": 0.1, "output_throughput": 50.0}
    rows = [{**base, "cell_id": "a", "precision": "bf16", "max_batch_size": 1, "sol_pct": 61.0},
            {**base, "cell_id": "b", "precision": "int4", "max_batch_size": 1, "sol_pct": 123.4}]
    t = speedup_table(pd.DataFrame(rows))["w"]
    headers, cells = render_rows(t)
    col = headers.index("% SOL")
    assert [r[col] for r in cells] == ["61", "123 ✗ impossible"]  # never printed plain
    (warning,) = [w for w in t.warnings if "% SOL" in w]
    assert warning.startswith("hf/int4/bs1 on w: % SOL 123 is above 100 %") and "timing or accounting bug" in warning
    assert "⚠ hf/int4/bs1 on w: % SOL 123" in to_markdown({"w": t})


def test_the_kernel_section_puts_each_profiled_step_against_its_bound():
    from bench.report.bounds import sol_text, step_bound_markdown
    from bench.results.records import parse

    def rec(cell_id, step_ms, tool="torch", roofline=None):
        bound = sol.step_bound(QWEN7B, KV, [256], 4.24e12)
        return parse({"schema_version": 2, "kind": "profile", "status": "ok", "cell_id": cell_id,
                      "cell": {"backend": "hf", "precision": "bf16", "max_batch_size": 1},
                      "extra": {"tool": tool, "profile": {"tool": tool, "step_ms": step_ms, "step_bound": bound,
                                                          "roofline_total": roofline or {}}}})

    text = step_bound_markdown([rec("a", 5.0), rec("b", 3.0), rec("c", None, "ncu", {"duration_us": 6760.5})])
    assert "| hf/bf16/bs1 (torch) | 14332.2 | 3380.2 | 5000.0 (the unprofiled decode step) | 68 |" in text
    assert "| hf/bf16/bs1 (torch) | 14332.2 | 3380.2 | 3000.0 (the unprofiled decode step) | 113 ✗ impossible |" in text
    assert "| hf/bf16/bs1 (ncu) | 14332.2 | 3380.2 | 6760.5 (ncu's kernel time of the step) | 50 |" in text
    assert "is impossible: a timing or accounting bug" in text
    assert step_bound_markdown([rec("a", None)]) == ""  # no step time to hold against the bound
    assert sol_text(None) == sol_text(float("nan")) == "" and sol_text(100.0) == "100"
