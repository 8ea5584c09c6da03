"""trtllm backend: pure checks, and runs through the real worker/runner path against the stand-in.

The stand-in (tests/fake_tensorrt_llm) is rebuilt from TensorRT-LLM 1.2.1's source and records
every call; nothing here has run on a GPU or with the real TensorRT-LLM. In-process contract
tests of the backend against the stand-in are in test_trtllm_standin.py.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.backends.trtllm import backend as T
from bench.backends.trtllm import config as trtllm_config
from bench.errors import BenchInputError
from bench.machine.environment import installed_version, major_minor
from bench.spec.matrix import parse_matrix

FAKE = Path(__file__).parent / "fake_tensorrt_llm"


def _matrix(**over):
    data = {
        "backends": ["trtllm"], "model": "qwen-tiny", "precisions": ["fp16"], "max_batch_sizes": [1, 2],
        "workloads": ["w"], "device": "cuda", "trials": 1, "warmup": 1,
        "workload": {"w": {"source": "synthetic", "num_requests": 3, "input_len": 8, "output_len": 5,
                           "max_input_len": 16, "max_total_len": 32}},
    }
    data.update(over)
    return parse_matrix(data)


def test_version_checks_name_what_to_install(monkeypatch):
    monkeypatch.setattr(T, "installed_version", lambda *dists: None)
    with pytest.raises(RuntimeError, match="nvcr.io/nvidia/tensorrt-llm/release:1.2.1"):
        T.require_tensorrt_llm("engine")
    assert T.require_tensorrt_llm("engine", version="1.2.0rc5") == "1.2.0rc5"
    assert T.require_tensorrt_llm("engine", version="0.21.0") == "0.21.0"
    with pytest.raises(RuntimeError, match="runtime = 'pytorch'"):
        T.require_tensorrt_llm("engine", version="1.3.0rc1")
    assert T.require_tensorrt_llm("pytorch", version="1.3.0")
    with pytest.raises(RuntimeError, match="PyTorch runtime"):
        T.require_tensorrt_llm("pytorch", version="0.21.0")


def test_major_minor_reads_release_candidates_local_builds_and_bare_majors():
    assert major_minor("1.2.0rc5") == (1, 2) and major_minor("0.21.0") == (0, 21)
    assert major_minor("2.13.0+cpu") == (2, 13) and major_minor("2.6a0") == (2, 6) and major_minor("5") == (5, 0)
    assert installed_version("surely-not-installed-dist", "pytest") == installed_version("pytest") is not None
    assert installed_version("surely-not-installed-dist") is None


def test_validation_refuses_bad_cells_before_any_run():
    with pytest.raises(BenchInputError, match="PyTorch runtime"):
        _matrix(precisions=["int8-sq"], options={"runtime": "pytorch"})
    with pytest.raises(BenchInputError, match="needs an NVIDIA GPU"):
        _matrix(device="cpu")
    # Requests longer than the engine's limits are refused before any run, with the numbers (the
    # workload's own check catches them first; a prebuilt engine's limits: test_prebuilt_engine_smaller_than_cell_is_refused).
    with pytest.raises(BenchInputError, match="input_len 40 exceeds max_input_len 16"):
        _matrix(workload={"w": {"source": "synthetic", "num_requests": 1, "input_len": 40, "output_len": 5,
                                "max_input_len": 16, "max_total_len": 64}})
    with pytest.raises(BenchInputError, match="input_len \\+ output_len = 30 exceeds max_total_len 24"):
        _matrix(workload={"w": {"source": "synthetic", "num_requests": 1, "input_len": 10, "output_len": 20,
                                "max_input_len": 16, "max_total_len": 24}})
    with pytest.raises(BenchInputError, match="needs calibration"):
        _matrix(precisions=["int8-sq"])
    with pytest.raises(BenchInputError, match="Ada"):
        trtllm_config.check_fp8_capability("8.6")
    trtllm_config.check_fp8_capability("9.0")
    trtllm_config.check_fp8_capability(None)


def test_unsupported_architecture(tmp_path):
    d = tmp_path / "bert"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
    with pytest.raises(BenchInputError, match="BertForMaskedLM"):
        _matrix(model=str(d))


def test_prebuilt_engine_smaller_than_cell_is_refused(tmp_path):
    eng = tmp_path / "eng"
    eng.mkdir()
    (eng / "rank0.engine").write_bytes(b"x")
    (eng / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 1, "max_input_len": 16, "max_seq_len": 32}}))
    with pytest.raises(BenchInputError, match="built for max_batch_size 1.*needs max_batch_size 2"):
        _matrix(options={"engine_dir": str(eng)})
    (eng / "rank0.engine").unlink()  # only config.json: a failed build
    with pytest.raises(BenchInputError, match="no rank0.engine"):
        _matrix(max_batch_sizes=[1], options={"engine_dir": str(eng)})


def test_request_and_batch_limits():
    from bench.workloads.request import Request

    limits = {"max_batch_size": 4, "max_input_len": 10, "max_seq_len": 20}
    T.check_requests([Request("a", (1,) * 10, 10)], 4, limits)
    with pytest.raises(BenchInputError, match="above the engine's max_batch_size 4"):
        T.check_requests([], 8, limits)
    with pytest.raises(BenchInputError, match="11 prompt \\+ 5 output tokens exceed"):
        T.check_requests([Request("b", (1,) * 11, 5)], 1, limits)


def test_kv_cache_limits_from_memory_cap():
    assert T.kv_cache_limits(gpu_memory_gb=None, total_memory_bytes=None, weight_bytes=1, kv_bytes_per_token=1) == {
        "free_gpu_memory_fraction": 0.9}
    # 24 GB cap, 15.4 GB weights, 2 GB overhead, 512 KiB per token -> (24 - 15.4 - 2) GB / 524288 B
    kv = T.kv_cache_limits(gpu_memory_gb=24, total_memory_bytes=80e9, weight_bytes=int(15.4e9),
                           kv_bytes_per_token=524288, free_gpu_memory_fraction=0.9)
    assert kv == {"free_gpu_memory_fraction": 0.9, "max_tokens": int(6.6e9 // 524288)}
    with pytest.raises(BenchInputError, match="no room for a KV cache"):
        T.kv_cache_limits(gpu_memory_gb=16, total_memory_bytes=80e9, weight_bytes=int(15.4e9), kv_bytes_per_token=524288)
    with pytest.raises(BenchInputError, match="more than the GPU has"):
        T.kv_cache_limits(gpu_memory_gb=100, total_memory_bytes=80e9, weight_bytes=1, kv_bytes_per_token=1)
    assert T._kv_bytes_per_token("qwen-7b-shape", "fp16") == 524288  # 2 * 32 layers * 32 heads * 128 * 2 bytes


def test_engine_max_num_tokens_follows_the_builders_clamp():
    assert T.engine_max_num_tokens(0, 1, 4096) == 4096  # 8192 clamped to max_batch_size x max_seq_len
    assert T.engine_max_num_tokens(0, 64, 4096) == 8192
    assert T.engine_max_num_tokens(2048, 64, 4096) == 2048
    with pytest.raises(BenchInputError, match="max_num_tokens=512 is below the workload's max_input_len 1024"):
        trtllm_config.check_max_num_tokens_option(512, 1024)
    trtllm_config.check_max_num_tokens_option(0, 1024)


def test_presets_parse_without_tensorrt_llm():
    from bench.spec.matrix import load_matrix

    m = load_matrix("trtllm-qwen7b-reference", preset=True)
    precisions = {c.precision for c in m.cells if c.backend == "trtllm"}
    assert precisions == {"fp16", "int8-wo", "int4-wo"}
    assert {c.backend for c in m.cells} == {"hf", "trtllm"}
    assert {c.workload.name for c in m.cells} == {"sharegpt-2048", "sharegpt-1024"}


# Qwen's vocabulary size: the workloads' qwen-7b-chat ids must have rows (a smaller vocab_size is refused before a run).
TINY_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 512, "eos_token_id": 0, "torch_dtype": "float16"}


def _local_model(root: Path, config: dict | None = None) -> Path:
    """A model directory with config.json and a placeholder weights file (the stand-in reads no weights)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config or TINY_QWEN2))
    (root / "model.safetensors").write_bytes(b"")
    return root


@pytest.fixture
def fake_trtllm(tmp_path, monkeypatch):
    """Put the stand-in on the worker's PYTHONPATH; return a helper to configure it and read its call log."""
    import os

    log = tmp_path / "trtllm-calls.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(FAKE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("FAKE_TRTLLM_LOG", str(log))
    monkeypatch.delenv("BENCH_GPU_MEMORY_GB", raising=False)

    class Fake:
        model = _local_model(tmp_path / "tiny")

        def configure(self, **cfg):
            monkeypatch.setenv("FAKE_TRTLLM_CONFIG", json.dumps(cfg))

        def calls(self, event: str) -> list[dict]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [c for c in map(json.loads, lines) if c["event"] == event]

        def reset(self):
            log.unlink(missing_ok=True)

    fake = Fake()
    fake.configure()
    return fake


def test_engine_end_to_end_builds_once_then_reuses(tmp_path, fake_trtllm):
    from bench.results.store import ResultStore
    from bench.runner.matrix import run_matrix

    m = _matrix(model=str(fake_trtllm.model), precisions=["int8-wo"], max_batch_sizes=[2])
    store = tmp_path / "s.jsonl"
    summary = run_matrix(m, store, show_progress=False, engines_dir=tmp_path / "engines")
    recs = list(ResultStore(store).records())
    assert summary.statuses == {"ok": 1}, recs[0].get("error")
    (build,) = fake_trtllm.calls("build")
    assert build["quant_config"]["quant_algo"] == "W8A16" and build["dtype"] == "float16"
    assert {k: build["build_config"][k] for k in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens")} == {
        "max_batch_size": 2, "max_input_len": 16, "max_seq_len": 32, "max_num_tokens": 64}
    assert len(fake_trtllm.calls("llm_init")) == 1  # the LLM that built the engine also measured it
    (save,) = fake_trtllm.calls("save")
    assert Path(save["engine_dir"], "rank0.engine").is_file()
    sp = fake_trtllm.calls("generate_async")[0]["sampling"]
    assert sp["max_tokens"] == sp["min_tokens"] == 5 and sp["ignore_eos"] and sp["return_perf_metrics"]
    (rec,) = recs
    assert rec["metrics"]["total_output_tokens"] == rec["metrics"]["expected_output_tokens"] == 15
    assert rec["build"]["cached"] is False and rec["build"]["engine_bytes"] > 0
    assert [e["cached_tokens"] for e in rec["extra"]["engine_request_timing"]] == [0, 0, 0]
    # Same key again: the saved engine is loaded with its own limits, nothing is rebuilt.
    fake_trtllm.reset()
    summary = run_matrix(m, store, redo=True, show_progress=False, engines_dir=tmp_path / "engines")
    assert summary.statuses == {"ok": 1}
    assert fake_trtllm.calls("build") == [] and len(fake_trtllm.calls("load_engine")) == 1
    (executor,) = fake_trtllm.calls("executor")
    assert executor["max_num_tokens"] == 64 and executor["kv_cache_config"]["enable_block_reuse"] is False
    assert list(ResultStore(store).records())[-1]["build"]["cached"] is True


def test_engine_build_oom_is_an_oom_row_and_leaves_no_engine(tmp_path, fake_trtllm):
    """1.2.1 reports a build OOM as AssertionError('Engine building failed...') with the reason in the log."""
    from bench.results.store import ResultStore
    from bench.runner.matrix import run_matrix

    fake_trtllm.configure(fail="build_oom")
    store = tmp_path / "s.jsonl"
    run_matrix(_matrix(model=str(fake_trtllm.model), max_batch_sizes=[1]), store, show_progress=False,
               engines_dir=tmp_path / "engines")
    (rec,) = ResultStore(store).records()
    assert rec["status"] == "oom", rec.get("error")
    assert "Engine building failed, please check the error log." in rec["error"] and "OutOfMemory" in rec["error"]
    assert not list((tmp_path / "engines").rglob("rank0.engine"))
    fake_trtllm.configure(fail="run_oom")
    store2 = tmp_path / "s2.jsonl"
    run_matrix(_matrix(model=str(fake_trtllm.model), max_batch_sizes=[1]), store2, show_progress=False,
               engines_dir=tmp_path / "engines")
    (rec,) = ResultStore(store2).records()
    assert rec["status"] == "oom", rec.get("error")


def test_pytorch_runtime_passes_runtime_batch_size(tmp_path, fake_trtllm):
    from bench.runner.matrix import run_matrix

    m = _matrix(model=str(fake_trtllm.model), max_batch_sizes=[2], options={"runtime": "pytorch"})
    summary = run_matrix(m, tmp_path / "s.jsonl", show_progress=False, engines_dir=tmp_path / "engines")
    assert summary.statuses == {"ok": 1}
    (llm,) = fake_trtllm.calls("torch_llm")
    assert llm["max_batch_size"] == 2 and llm["max_seq_len"] == 32 and llm["dtype"] == "float16"
    assert llm["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9
    assert llm["kv_cache_config"]["enable_block_reuse"] is False
    assert fake_trtllm.calls("build") == []


def test_calibration_set_is_written_for_the_modelopt_flow(tmp_path, monkeypatch):
    """int8-sq: W8A8_SQ_PER_CHANNEL (MODELOPT_FLOW_QUANTIZATIONS) and a local train split with a text column."""
    import sys

    monkeypatch.syspath_prepend(str(FAKE))
    for name in [m for m in sys.modules if m.startswith("tensorrt_llm")]:
        monkeypatch.delitem(sys.modules, name)
    from bench.spec.cells import BuildKey
    from bench.workloads.request import Request
    from bench.workloads.workload import Workload

    wl = Workload("w", [Request(f"r{i}", (1, 2, 3), 4) for i in range(5)], {}, "t")
    wl_file = tmp_path / "w.json"
    wl_file.write_text(wl.to_json())
    monkeypatch.setattr(T, "write_calibration_set", _fake_calib_writer)
    key = BuildKey("trtllm", "qwen-tiny", "int8-sq", "cuda", tuple(sorted(
        {"runtime": "engine", "engine_dir": "", "max_num_tokens": 0, "calib_requests": 3, "nvtx": True,
         "free_gpu_memory_fraction": 0.9}.items())), 4, 16, 32)
    kw = T.engine_llm_kwargs(key, tmp_path, tmp_path, [str(wl_file)])
    assert kw["quant_config"].quant_algo.value == "W8A8_SQ_PER_CHANNEL"
    assert kw["quant_config"]._requires_modelopt_quantization
    assert kw["calib_config"].calib_batches == 3 and kw["calib_config"].calib_max_seq_length == 16
    assert (Path(kw["calib_config"].calib_dataset) / "train.jsonl").read_text().count("\n") == 3
    assert kw["build_config"].profiling_verbosity == "detailed" and kw["build_config"].max_num_tokens == 128
    assert kw["trust_remote_code"] is False
    fp8 = T.engine_llm_kwargs(BuildKey(**{**key.__dict__, "precision": "fp8"}), tmp_path, tmp_path, [str(wl_file)])
    assert fp8["quant_config"].kv_cache_quant_algo.value == "FP8"
    with pytest.raises(RuntimeError, match="takes for a Hub dataset name"):
        T.engine_llm_kwargs(key, tmp_path, tmp_path / "cnn_dailymail-runs", [str(wl_file)])


def _fake_calib_writer(calib_dir, model_dir, workload_files, n):
    # The real one decodes with the model's tokenizer (transformers; covered in test_trtllm_standin.py).
    from bench.workloads.workload import Workload

    calib_dir.mkdir(parents=True, exist_ok=True)
    reqs = Workload.from_json(Path(workload_files[0]).read_text()).requests[:n]
    (calib_dir / "train.jsonl").write_text("".join(json.dumps({"text": str(r.prompt_ids)}) + "\n" for r in reqs))
    return calib_dir


def test_reference_preset_runs_end_to_end_against_the_standin(tmp_path, fake_trtllm):
    """Every cell of trtllm-qwen7b-reference validates; a slice of its trtllm cells runs with sensible latencies.

    The slice (max_batch_size 4, sharegpt-1024, 8 requests of 16 output tokens, 1 trial) keeps the
    CPU run short; the model is the preset's qwen-7b-shape, whose checkpoint folder is pre-seeded
    with its config.json (the stand-in never reads weights; a real run writes 15 GB there).
    """
    from bench.models import resolve_model
    from bench.results.store import ResultStore
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import load_matrix
    from bench.spec.narrow import narrow, with_workload

    step_ms = 5.0
    fake_trtllm.configure(step_ms=step_ms)
    preset = load_matrix("trtllm-qwen7b-reference", preset=True)  # parse_matrix validates every cell
    assert {c.precision for c in preset.cells if c.backend == "trtllm"} == {"fp16", "int8-wo", "int4-wo"}
    engines = tmp_path / "engines"
    _local_model(engines / "hf-checkpoints" / "qwen-7b-shape", resolve_model("qwen-7b-shape").config)
    m = narrow(preset, only={"backend": "trtllm", "max_batch_size": "4", "workload": "sharegpt-1024"},
               requests=8, trials=1, runs=1)  # one process each: the preset asks 2
    m = replace(m, cells=tuple(with_workload(c, output_len=16) for c in m.cells))
    assert len(m.cells) == 3
    summary = run_matrix(m, tmp_path / "s.jsonl", show_progress=False, engines_dir=engines,
                         workload_cache=tmp_path / "wl")
    recs = list(ResultStore(tmp_path / "s.jsonl").records())
    assert summary.statuses == {"ok": 3}, [r.get("error") for r in recs]
    assert {b["quant_config"]["quant_algo"] for b in fake_trtllm.calls("build")} == {None, "W8A16", "W4A16"}
    for rec in recs:
        met = rec["metrics"]
        assert met["completed"] == 8 and met["total_output_tokens"] == 8 * 16
        # Tokens one step apart; 8 requests through 4 slots: the second wave waits ~16 steps.
        assert 0.8 * step_ms < met["itl_median_ms"] < 3 * step_ms, met
        assert 0.8 * step_ms < met["tpot_median_ms"] < 3 * step_ms, met
        assert step_ms <= met["ttft_p99_ms"] < 60 * step_ms, met
        assert met["e2el_median_ms"] >= 15 * step_ms, met
        # Each request's TTFT as the harness saw it, against the engine's own.
        engine = {e["request_id"]: e["engine_ttft_s"] for e in rec["extra"]["engine_request_timing"]}
        gaps = sorted(s["ttft_ms"] - 1000 * engine[s["id"]] for s in rec["samples"])
        assert 0 <= gaps[0] and gaps[len(gaps) // 2] < 10, gaps
