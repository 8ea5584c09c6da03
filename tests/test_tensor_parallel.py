"""Tensor parallelism: hf through transformers' tp_plan under torchrun (one process per rank; on CPU through gloo);
trtllm through tensor_parallel_size in the LLM API's build and runtime (against the stand-in tensorrt_llm)."""

import sys
from pathlib import Path

import pytest

from bench.backends.hf import config as hf_config
from bench.errors import BenchInputError
from bench.execution.supervisor import worker_ranks
from bench.models import resolve_model
from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.cells import BuildKey
from bench.spec.matrix import parse_matrix

FAKE_TRTLLM = Path(__file__).parent / "fake_tensorrt_llm"


def matrix(backend="hf", precision="fp32", device="cpu", **options):
    return parse_matrix({
        "backends": [backend], "model": "qwen-tiny", "precisions": [precision], "max_batch_sizes": [2],
        "workloads": ["w"], "device": device, "options": options, "trials": 1, "warmup": 1, "build_timeout_s": 600,
        "timeout_s": 300, "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}},
    })


def test_validation_refuses_what_tensor_parallelism_cannot_run(monkeypatch):
    with pytest.raises(BenchInputError, match="does not divide model 'qwen-tiny''s num_attention_heads=4: .* use one of 1, 2$"):
        matrix(tensor_parallel_size=3)
    with pytest.raises(BenchInputError, match="num_key_value_heads=2"):  # 4 query heads, but 2 KV heads
        matrix(tensor_parallel_size=4)
    with pytest.raises(BenchInputError, match="positive integer"):
        matrix(tensor_parallel_size=0)
    with pytest.raises(BenchInputError, match="compile='reduce-overhead'"):
        matrix(device="cuda", precision="bf16", tensor_parallel_size=2, cache="static", compile="reduce-overhead")
    real = hf_config.util.find_spec
    monkeypatch.setattr(hf_config.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(BenchInputError, match="needs accelerate"):
        matrix(tensor_parallel_size=2)


def test_only_hf_launches_one_process_per_rank():
    assert worker_ranks(matrix(tensor_parallel_size=2).cells[0].build_key()) == 2
    assert worker_ranks(matrix().cells[0].build_key()) == 1
    assert worker_ranks(matrix(backend="fake", precision="bf16", tensor_parallel_size=2).cells[0].build_key()) == 1


@pytest.mark.slow
def test_hf_tensor_parallel_on_cpu_under_torchrun(tmp_path):
    """Two gloo ranks of qwen-tiny: the cell measures, rank 0 reports, every output length checked."""
    pytest.importorskip("accelerate")
    m = matrix(tensor_parallel_size=2)
    summary = run_matrix(m, tmp_path / "s.jsonl", show_progress=False)
    recs = list(ResultStore(tmp_path / "s.jsonl").records())
    assert summary.statuses == {"ok": 1}, [r.get("error") for r in recs]
    r = recs[0]
    assert r["metrics"]["completed"] == 2 and r["metrics"]["output_len_mismatches"] == 0
    assert r["extra"]["tensor_parallel_size"] == 2 and r["environment"]["tensor_parallel_gpus"] == ["cpu", "cpu"]
    # the whole model's bytes (fp32), not one rank's shard
    assert r["extra"]["weight_bytes"] >= resolve_model("qwen-tiny").num_parameters * 4
    logs = list((tmp_path / "logs").glob("*.job.json"))
    assert len(logs) == 1  # torchrun's ranks read the job from a file beside the log


def test_trtllm_builds_and_runs_with_tensor_parallel_size(monkeypatch, tmp_path):
    from bench.backends.trtllm import backend as T

    monkeypatch.syspath_prepend(str(FAKE_TRTLLM))
    for name in [m for m in sys.modules if m.startswith("tensorrt_llm")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(BenchInputError, match="num_attention_heads=4"):
        matrix(backend="trtllm", precision="fp16", device="cuda", tensor_parallel_size=3)
    opts = {"runtime": "engine", "engine_dir": "", "max_num_tokens": 0, "calib_requests": 3, "nvtx": False,
            "free_gpu_memory_fraction": 0.9}
    key = BuildKey("trtllm", "qwen-tiny", "fp16", "cuda", tuple(sorted({**opts, "tensor_parallel_size": 2}.items())), 4, 16, 32)
    assert T.engine_llm_kwargs(key, tmp_path, tmp_path, [])["tensor_parallel_size"] == 2
    one = BuildKey("trtllm", "qwen-tiny", "fp16", "cuda", tuple(sorted(opts.items())), 4, 16, 32)
    assert "tensor_parallel_size" not in T.engine_llm_kwargs(one, tmp_path, tmp_path, [])
    import tensorrt_llm

    seen = {}
    real = tensorrt_llm.LLM.__init__

    def spy(self, model, *args, **kwargs):
        seen.update(kwargs)
        real(self, model, *args, **kwargs)

    monkeypatch.setattr(tensorrt_llm.LLM, "__init__", spy)
    pytorch_key = BuildKey(**{**key.__dict__, "options": tuple(sorted({**opts, "runtime": "pytorch", "tensor_parallel_size": 2}.items()))})
    import json

    from bench.models import resolve_model

    (tmp_path / "config.json").write_text(json.dumps(resolve_model("qwen-tiny").config))  # the stand-in reads it
    T.TRTLLMLoaded({"key": pytorch_key.to_dict(), "runtime": "pytorch", "model_dir": str(tmp_path)})
    assert seen["tensor_parallel_size"] == 2
