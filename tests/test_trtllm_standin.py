"""trtllm backend against the stand-in rebuilt from TensorRT-LLM 1.2.1's source, in this process.

Each test here would have caught one of the problems a review found (docs/guide/trtllm.md):
late stream reading, the KV cache reusing replayed prompts, calibration that cannot read the local
folder, a build-time executor outside the memory cap, a reload with 1.2.1's default limits,
the fp8 KV budget, remote code, an architecture missing from the engine path. Timings come
from the stand-in's executor thread (one iteration = `step_ms`), so they are checked against
that known step and against the engine's own timestamps (return_perf_metrics).
"""

import json
import statistics
import sys
from pathlib import Path

import pytest

from bench.backends.trtllm import backend as T
from bench.errors import BenchInputError
from bench.spec.matrix import parse_matrix
from bench.workloads.request import Request
from bench.workloads.workload import Workload

FAKE = Path(__file__).parent / "fake_tensorrt_llm"
# Qwen's vocabulary size: the workloads' qwen-7b-chat ids must have rows (a smaller vocab_size is refused before a run).
TINY_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 512, "eos_token_id": 0, "torch_dtype": "float16"}


def local_model(root: Path, name: str = "tiny", **config) -> Path:
    """Write a model directory with config.json and a placeholder weights file (the stand-in reads no weights)."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({**TINY_QWEN2, **config}))
    (d / "model.safetensors").write_bytes(b"")
    return d


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """Import the stand-in tensorrt_llm in this process; return a function that sets its config and reads its log."""
    monkeypatch.syspath_prepend(str(FAKE))
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_TRTLLM_LOG", str(log))
    monkeypatch.delenv("BENCH_GPU_MEMORY_GB", raising=False)

    class Standin:
        def configure(self, **cfg):
            monkeypatch.setenv("FAKE_TRTLLM_CONFIG", json.dumps(cfg))

        def calls(self, event):
            lines = log.read_text().splitlines() if log.exists() else []
            return [c for c in map(json.loads, lines) if c["event"] == event]

    s = Standin()
    s.configure()
    return s


def _cell(model: Path, max_batch_size: int, precision: str = "fp16", **options):
    m = parse_matrix({
        "backends": ["trtllm"], "model": str(model), "precisions": [precision], "max_batch_sizes": [max_batch_size],
        "workloads": ["w"], "device": "cuda", "options": options,
        "workload": {"w": {"source": "synthetic", "num_requests": 4, "input_len": 8, "output_len": 6,
                           "max_input_len": 64, "max_total_len": 128}},
    })
    (cell,) = m.cells
    return cell


def _measure(backend, cell, requests, engines: Path, passes: int = 1):
    loaded = backend.load(backend.build(cell.build_key(), engines))
    try:
        return [loaded.run(requests, cell.max_batch_size, cell.options_dict) for _ in range(passes)]
    finally:
        loaded.close()


def _requests(n: int, input_len: int = 8, output_len: int = 6, same_prompt: bool = False):
    return [Request(f"r{i}", tuple(range(1, input_len + 1)) if same_prompt else tuple((i * 7 + j) % 60 + 1
                    for j in range(input_len)), output_len) for i in range(n)]


def test_concurrent_streams_are_timed_when_tokens_arrive(tmp_path, standin):
    """TTFT/ITL/E2E of every request match the executor's step time and its own timestamps.

    Read late (the sequential reader this replaces), requests 2..N drain queued steps back to
    back: ITL ~ 0 and a harness TTFT whole steps after the engine's. Figures are compared with
    the engine's own (return_perf_metrics), which a loaded machine stretches alike; pooled
    figures are held to a few ms, single requests to a fraction of a step.
    """
    step_ms = 30.0
    standin.configure(step_ms=step_ms)
    model = local_model(tmp_path)
    for max_batch_size in (4, 2):
        (out,) = _measure(T.TRTLLMBackend(), _cell(model, max_batch_size), _requests(4), tmp_path / "engines")
        engine = {e["request_id"]: e for e in out.extra["engine_request_timing"]}
        all_itl, ttft_gaps, tpot_gaps = [], [], []
        for t in out.timings:
            assert t.output_len == 6 and len(t.token_times) == 6
            e = engine[t.request_id]
            engine_tpot_ms = 1000 * (e["engine_e2e_s"] - e["engine_ttft_s"]) / 5
            assert engine_tpot_ms > step_ms - 1  # the executor's iterations are never shorter than a step
            itl_ms = [1000 * (b - a) for a, b in zip(t.token_times, t.token_times[1:], strict=False)]
            all_itl += itl_ms
            assert abs(statistics.median(itl_ms) - engine_tpot_ms) < 0.3 * step_ms, (t.request_id, itl_ms, e)
            # The harness clock starts before generate_async, the engine's at its arrival: the
            # harness may only add the submission overhead.
            ttft_ms, e2e_ms = 1000 * (t.token_times[0] - t.start), 1000 * (t.end - t.start)
            ttft_gaps.append(ttft_ms - 1000 * e["engine_ttft_s"])
            tpot_gaps.append((e2e_ms - ttft_ms) / 5 - engine_tpot_ms)
            assert 0 <= ttft_gaps[-1] < step_ms, (max_batch_size, t.request_id, ttft_ms, e)
            assert 0 <= e2e_ms - 1000 * e["engine_e2e_s"] < step_ms, (max_batch_size, t.request_id, e2e_ms, e)
        assert 0.8 * step_ms < statistics.median(all_itl) < 2 * step_ms, all_itl
        assert statistics.median(ttft_gaps) < 5, (max_batch_size, ttft_gaps)
        assert statistics.median(abs(g) for g in tpot_gaps) < 2, (max_batch_size, tpot_gaps)
        if max_batch_size == 2:
            # In-flight batching: requests 3 and 4 wait for a free slot (6 steps), then one step more.
            for rid in ("r2", "r3"):
                assert engine[rid]["engine_queue_s"] * 1000 > 5 * step_ms - 10
                assert engine[rid]["engine_ttft_s"] * 1000 > 6 * step_ms - 10


def test_block_reuse_is_off_so_replayed_prompts_are_recomputed(tmp_path, standin):
    model = local_model(tmp_path)
    requests = _requests(4, input_len=60, same_prompt=True)  # one full 32-token block each
    passes = _measure(T.TRTLLMBackend(), _cell(model, 4), requests, tmp_path / "engines", passes=2)
    (executor,) = standin.calls("executor")
    assert executor["kv_cache_config"]["enable_block_reuse"] is False
    for out in passes:
        assert [e["cached_tokens"] for e in out.extra["engine_request_timing"]] == [0, 0, 0, 0]
        assert [e["kv_reused_blocks"] for e in out.extra["engine_request_timing"]] == [0, 0, 0, 0]

    # Control: 1.2.1's default KvCacheConfig (block reuse on) serves the second pass from cache.
    from tensorrt_llm._tensorrt_engine import LLM
    from tensorrt_llm.llmapi import SamplingParams

    engine_dir = next((tmp_path / "engines").glob("*/engine"))
    llm = LLM(model=str(engine_dir), skip_tokenizer_init=True)
    try:
        params = SamplingParams(max_tokens=2, end_id=0, ignore_eos=True)
        cached = [llm.generate_async(list(r.prompt_ids), sampling_params=params).result().cached_tokens
                  for r in requests[:2]]
    finally:
        llm.shutdown()
    assert cached[0] == 0 and cached[1] == 32


def test_int8_sq_calibrates_from_the_local_folder(tmp_path, standin):
    """W8A8_SQ_PER_CHANNEL (modelopt flow) reads engines/<key>/calib; the *_PLUGIN flow could not."""
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    model = local_model(tmp_path)
    words = [f"w{i}" for i in range(64)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(str(model))
    requests = [Request(f"r{i}", tuple(range(i + 1, i + 9)), 4) for i in range(5)]
    wl_file = tmp_path / "w.json"
    wl_file.write_text(Workload("w", requests, {}, "t").to_json())

    backend = T.TRTLLMBackend()
    backend.workload_files = [str(wl_file)]
    cell = _cell(model, 2, precision="int8-sq", calib_requests=3)
    _measure(backend, cell, requests[:2], tmp_path / "engines")
    (build,) = standin.calls("build")
    assert build["quant_config"]["quant_algo"] == "W8A8_SQ_PER_CHANNEL"
    calib_dir = Path(build["calib_config"]["calib_dataset"])
    assert calib_dir == tmp_path / "engines" / cell.build_key().key_hash / "calib"
    assert build["calib_config"]["calib_batches"] == 3 and build["calib_config"]["calib_max_seq_length"] == 64
    (calib,) = standin.calls("calibrate")
    assert calib["flow"] == "modelopt" and calib["samples"] == 3
    from transformers import AutoTokenizer

    decode = AutoTokenizer.from_pretrained(str(model)).decode
    assert calib["texts"] == [decode(list(r.prompt_ids)) for r in requests[:3]]
    assert calib["texts"][0] != calib["texts"][1]

    # The plugin SmoothQuant algorithm goes through the older flow, which cannot read that folder.
    from tensorrt_llm.models.modeling_utils import QuantConfig, quantize
    from tensorrt_llm.quantization.mode import QuantAlgo

    with pytest.raises(KeyError):
        quantize(model, QuantConfig(quant_algo=QuantAlgo.W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN),
                 type("Calib", (), {"calib_dataset": str(calib_dir)})())


def test_memory_cap_reaches_the_build_and_nothing_is_loaded_twice(tmp_path, standin, monkeypatch):
    monkeypatch.setenv("BENCH_GPU_MEMORY_GB", "3")
    model = local_model(tmp_path)
    cell = _cell(model, 2)
    _measure(T.TRTLLMBackend(), cell, _requests(2), tmp_path / "engines")
    expected = T.kv_cache_limits(gpu_memory_gb=3.0, total_memory_bytes=None,
                                 weight_bytes=T._weight_bytes(str(model), "fp16"),
                                 kv_bytes_per_token=T._kv_bytes_per_token(str(model), "fp16"))
    assert expected["max_tokens"] > 0
    (init,) = standin.calls("llm_init")  # one LLM: it built the engine and ran the measurement
    assert len(standin.calls("build")) == 1 and len(standin.calls("executor")) == 1
    (executor,) = standin.calls("executor")
    assert executor["kv_cache_config"]["max_tokens"] == expected["max_tokens"]
    assert executor["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9
    assert executor["kv_capacity_tokens"] == expected["max_tokens"]
    # The executor runs with the engine's own limits, not 1.2.1's runtime default of 8192 tokens.
    engine = executor["engine_build_config"]
    assert engine["max_num_tokens"] == 2 * 128 == executor["max_num_tokens"]
    assert executor["max_batch_size"] == engine["max_batch_size"] == 2


def test_reload_passes_the_engines_own_limits(tmp_path, standin):
    model = local_model(tmp_path)
    cell = _cell(model, 2)
    _measure(T.TRTLLMBackend(), cell, _requests(2), tmp_path / "engines")
    _measure(T.TRTLLMBackend(), cell, _requests(2), tmp_path / "engines")  # a new worker: loads the saved engine
    assert len(standin.calls("build")) == 1
    (_, load) = standin.calls("llm_init")
    assert Path(load["model"]).name == "engine" and load["kwargs"]["max_num_tokens"] == 256
    (_, executor) = standin.calls("executor")
    assert executor["max_num_tokens"] == executor["engine_build_config"]["max_num_tokens"] == 256
    # What the stand-in does without them (1.2.1 llm.py _TrtLLM._build_model): the default 8192.
    from tensorrt_llm._tensorrt_engine import LLM

    llm = LLM(model=load["model"], skip_tokenizer_init=True)
    llm.shutdown()
    assert standin.calls("executor")[-1]["max_num_tokens"] == 8192


def test_fp8_kv_cache_holds_twice_the_tokens():
    assert T._kv_bytes_per_token("qwen-7b-shape", "fp16") == 524288  # 2 * 32 layers * 32 heads * 128 * 2 bytes
    assert T._kv_bytes_per_token("qwen-7b-shape", "fp8") == 262144
    common = {"gpu_memory_gb": 24, "total_memory_bytes": 80e9, "weight_bytes": int(8e9)}
    fp16 = T.kv_cache_limits(kv_bytes_per_token=T._kv_bytes_per_token("qwen-7b-shape", "fp16"), **common)
    fp8 = T.kv_cache_limits(kv_bytes_per_token=T._kv_bytes_per_token("qwen-7b-shape", "fp8"), **common)
    assert abs(fp8["max_tokens"] - 2 * fp16["max_tokens"]) <= 1  # floor division


def test_local_remote_code_model_gets_trust_remote_code(tmp_path, standin, monkeypatch):
    """A local Qwen-7B-Chat directory (model_type "qwen", auto_map) needs trust_remote_code to convert, which runs
    the folder's Python: refused before any work unless the user (BENCH_TRUST_REMOTE_CODE=1, never the matrix) trusts it."""
    model = local_model(tmp_path, "qwen-chat", architectures=["QWenLMHeadModel"], model_type="qwen",
                        auto_map={"AutoConfig": "configuration_qwen.QWenConfig"})
    monkeypatch.delenv("BENCH_TRUST_REMOTE_CODE", raising=False)
    with pytest.raises(BenchInputError, match="maps to custom code.*BENCH_TRUST_REMOTE_CODE=1"):
        _cell(model, 1)
    monkeypatch.setenv("BENCH_TRUST_REMOTE_CODE", "1")
    _measure(T.TRTLLMBackend(), _cell(model, 1), _requests(1), tmp_path / "engines")
    (init,) = standin.calls("llm_init")
    assert init["trust_remote_code"] is True
    from tensorrt_llm._tensorrt_engine import LLM

    with pytest.raises(ValueError, match="trust_remote_code=True"):
        LLM(model=str(model), skip_tokenizer_init=True)


def test_qwen3_moe_is_refused_for_the_engine_path(tmp_path):
    model = local_model(tmp_path, "moe", architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe")
    with pytest.raises(BenchInputError, match="Qwen3MoeForCausalLM.*runtime = 'pytorch'"):
        _cell(model, 1)
    assert _cell(model, 1, runtime="pytorch").options_dict["runtime"] == "pytorch"


def test_standin_validates_as_1_2_1_does(tmp_path, standin):
    """Unknown keys and bad values raise what 1.2.1 raises; BuildConfig alone ignores unknown keys."""
    import pydantic
    from tensorrt_llm._tensorrt_engine import LLM
    from tensorrt_llm.llmapi import (
        BuildConfig,
        CalibConfig,
        KvCacheConfig,
        QuantConfig,
        SamplingParams,
    )

    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        KvCacheConfig(enable_reuse=False)
    with pytest.raises(pydantic.ValidationError, match="free_gpu_memory_fraction must be a float between 0 and 1"):
        KvCacheConfig(free_gpu_memory_fraction=1.5)
    with pytest.raises(pydantic.ValidationError):
        CalibConfig(device="tpu")
    with pytest.raises(TypeError):
        SamplingParams(max_new_tokens=3)
    with pytest.raises(TypeError):
        QuantConfig(algo="W8A16")
    assert not hasattr(BuildConfig(max_batchsize=4), "max_batchsize")  # silently ignored in 1.2.1 too
    assert KvCacheConfig().enable_block_reuse is True and KvCacheConfig().free_gpu_memory_fraction == 0.9
    assert BuildConfig().max_num_tokens == 8192 and CalibConfig().calib_batches == 512
    model = local_model(tmp_path)
    with pytest.raises(ValueError, match="_TrtLLM got invalid argument: kv_cache"):
        LLM(model=str(model), kv_cache=KvCacheConfig())
    llm = LLM(model=str(model), skip_tokenizer_init=True, build_config=BuildConfig(max_input_len=16, max_seq_len=32))
    try:
        with pytest.raises(ValueError, match="tokenizer is required to reset end_id"):
            llm.generate_async([1, 2, 3], sampling_params=SamplingParams(max_tokens=2))
        with pytest.raises(ValueError, match=r"should not exceed max_seq_len \(32\)"):
            llm.generate_async([1] * 20, sampling_params=SamplingParams(max_tokens=20, end_id=0))
    finally:
        llm.shutdown()


def test_build_oom_text_reaches_the_error(tmp_path, standin, capfd):
    """builder.py asserts 'Engine building failed'; the backend attaches what TensorRT logged."""
    from bench.machine.failures import classify_exception

    standin.configure(fail="build_oom")
    with pytest.raises(RuntimeError) as info:
        T.TRTLLMBackend().build(_cell(local_model(tmp_path), 1).build_key(), tmp_path / "engines")
    text = str(info.value)
    assert "Engine building failed, please check the error log." in text and "OutOfMemory" in text
    assert isinstance(info.value.__cause__, AssertionError)
    assert classify_exception(info.value) == "oom"
    assert classify_exception(info.value.__cause__) == "error"  # the assertion alone says nothing of memory
    assert not list((tmp_path / "engines").rglob("rank0.engine"))
