"""trtllm backend: pure checks, and contract runs against the stand-in tensorrt_llm (tests/fake_tensorrt_llm).

The stand-in enforces TensorRT-LLM 1.2's keyword names and records every call; nothing here
has run on a GPU or with the real TensorRT-LLM.
"""

import json
from pathlib import Path

import pytest

from bench.backends import trtllm as T
from bench.errors import BenchInputError
from bench.execution.environment import installed_version, major_minor
from bench.spec import parse_matrix

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
    with pytest.raises(RuntimeError, match="nvcr.io/nvidia/tensorrt-llm/release:1.2.0"):
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
        T.check_fp8_capability("8.6")
    T.check_fp8_capability("9.0")
    T.check_fp8_capability(None)


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
    from bench.workloads.workload import Request

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
    assert T._kv_bytes_per_token("qwen-7b-shape") == 524288  # 2 * 32 layers * 32 heads * 128 * 2 bytes


def test_presets_parse_without_tensorrt_llm():
    from bench.spec import load_matrix

    m = load_matrix("trtllm-qwen7b-reference", preset=True)
    precisions = {c.precision for c in m.cells if c.backend == "trtllm"}
    assert precisions == {"fp16", "int8-wo", "int4-wo"}
    assert {c.backend for c in m.cells} == {"hf", "trtllm"}
    assert {c.workload.name for c in m.cells} == {"sharegpt-2048", "sharegpt-1024"}


@pytest.fixture
def fake_trtllm(tmp_path, monkeypatch):
    """Put the stand-in on the worker's PYTHONPATH; return the path of its call log."""
    import os

    log = tmp_path / "trtllm-calls.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(FAKE) + os.pathsep + os.environ["PYTHONPATH"])
    monkeypatch.setenv("FAKE_TRTLLM_LOG", str(log))
    return log


def _calls(log: Path, event: str) -> list[dict]:
    if not log.exists():
        return []
    return [c for c in map(json.loads, log.read_text().splitlines()) if c["event"] == event]


@pytest.mark.slow
def test_engine_end_to_end_builds_once_then_reuses(tmp_path, fake_trtllm):
    from bench.execution.matrix import run_matrix
    from bench.results.store import ResultStore

    m = _matrix(precisions=["fp16", "int8-wo"], max_batch_sizes=[2])
    store = tmp_path / "s.jsonl"
    summary = run_matrix(m, store, show_progress=False, engines_dir=tmp_path / "engines")
    recs = list(ResultStore(store).records())
    assert summary.statuses == {"ok": 2}, recs[0].get("error")
    builds = _calls(fake_trtllm, "build")
    assert sorted(((b["build_config"]["max_batch_size"], b["quant_config"] and b["quant_config"]["quant_algo"]) for b in builds),
                  key=str) == [(2, "W8A16"), (2, None)]
    assert all(b["build_config"]["max_input_len"] == 16 and b["build_config"]["max_seq_len"] == 32 for b in builds)
    assert all(b["dtype"] == "float16" for b in builds)
    saves = _calls(fake_trtllm, "save")
    assert all(Path(s["engine_dir"], "rank0.engine").is_file() for s in saves) and len(saves) == 2
    gens = _calls(fake_trtllm, "generate_async")
    sp = gens[0]["sampling"]
    assert sp["max_tokens"] == sp["min_tokens"] == 5 and sp["ignore_eos"] and gens[0]["streaming"]
    for r in recs:
        assert r["metrics"]["total_output_tokens"] == r["metrics"]["expected_output_tokens"] == 15
        assert r["build"]["cached"] is False and r["build"]["engine_bytes"] > 0
    # Same keys again: the saved engines are loaded, nothing is rebuilt.
    fake_trtllm.unlink()
    summary = run_matrix(m, store, redo=True, show_progress=False, engines_dir=tmp_path / "engines")
    assert summary.statuses == {"ok": 2}
    assert _calls(fake_trtllm, "build") == [] and len(_calls(fake_trtllm, "load_engine")) == 2
    assert all(r["build"]["cached"] for r in list(ResultStore(store).records())[2:])


@pytest.mark.slow
def test_engine_build_oom_is_an_oom_row_and_leaves_no_engine(tmp_path, fake_trtllm, monkeypatch):
    from bench.execution.matrix import run_matrix
    from bench.results.store import ResultStore

    monkeypatch.setenv("FAKE_TRTLLM_OOM", "build")
    store = tmp_path / "s.jsonl"
    run_matrix(_matrix(max_batch_sizes=[1]), store, show_progress=False, engines_dir=tmp_path / "engines")
    (rec,) = ResultStore(store).records()
    assert rec["status"] == "oom", rec.get("error")
    assert not list((tmp_path / "engines").rglob("rank0.engine"))
    monkeypatch.setenv("FAKE_TRTLLM_OOM", "run")
    store2 = tmp_path / "s2.jsonl"
    run_matrix(_matrix(max_batch_sizes=[1]), store2, show_progress=False, engines_dir=tmp_path / "engines")
    (rec,) = ResultStore(store2).records()
    assert rec["status"] == "oom", rec.get("error")


@pytest.mark.slow
def test_pytorch_runtime_passes_runtime_batch_size(tmp_path, fake_trtllm, monkeypatch):
    from bench.execution.matrix import run_matrix

    monkeypatch.setenv("BENCH_GPU_MEMORY_GB", "")
    m = _matrix(max_batch_sizes=[2], options={"runtime": "pytorch"})
    summary = run_matrix(m, tmp_path / "s.jsonl", show_progress=False, engines_dir=tmp_path / "engines")
    assert summary.statuses == {"ok": 1}
    (llm,) = _calls(fake_trtllm, "torch_llm")
    assert llm["kwargs"]["max_batch_size"] == 2 and llm["kwargs"]["max_seq_len"] == 32 and llm["dtype"] == "float16"
    assert llm["kwargs"]["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9
    assert _calls(fake_trtllm, "build") == []


def test_calibrated_build_uses_workload_prompts(tmp_path, monkeypatch):
    """int8-sq: QuantConfig names the SmoothQuant plugin algo and CalibConfig points at a local dataset."""
    import sys

    monkeypatch.syspath_prepend(str(FAKE))
    for name in [m for m in sys.modules if m.startswith("tensorrt_llm")]:
        monkeypatch.delitem(sys.modules, name)
    from bench.spec import BuildKey
    from bench.workloads.workload import Request, Workload

    wl = Workload("w", [Request(f"r{i}", (1, 2, 3), 4) for i in range(5)], {}, "t")
    wl_file = tmp_path / "w.json"
    wl_file.write_text(wl.to_json())
    monkeypatch.setattr(T, "write_calibration_set", _fake_calib_writer)
    key = BuildKey("trtllm", "qwen-tiny", "int8-sq", "cuda", tuple(sorted(
        {"runtime": "engine", "engine_dir": "", "max_num_tokens": 0, "calib_requests": 3, "nvtx": True,
         "free_gpu_memory_fraction": 0.9}.items())), 4, 16, 32)
    kw = T.engine_llm_kwargs(key, tmp_path, tmp_path, [str(wl_file)])
    assert kw["quant_config"].quant_algo.value == "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN"
    assert kw["calib_config"].calib_batches == 3 and kw["calib_config"].calib_max_seq_length == 16
    assert (Path(kw["calib_config"].calib_dataset) / "train.jsonl").read_text().count("\n") == 3
    assert kw["build_config"].profiling_verbosity == "detailed"
    fp8 = T.engine_llm_kwargs(BuildKey(**{**key.__dict__, "precision": "fp8"}), tmp_path, tmp_path, [str(wl_file)])
    assert fp8["quant_config"].kv_cache_quant_algo.value == "FP8"


def _fake_calib_writer(calib_dir, model_dir, workload_files, n):
    # The real one decodes with the model's tokenizer (transformers); the count and layout are what matter.
    from bench.workloads.workload import Workload

    calib_dir.mkdir(parents=True, exist_ok=True)
    reqs = Workload.from_json(Path(workload_files[0]).read_text()).requests[:n]
    (calib_dir / "train.jsonl").write_text("".join(json.dumps({"text": str(r.prompt_ids)}) + "\n" for r in reqs))
    return calib_dir
