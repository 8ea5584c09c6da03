"""TensorRT-LLM backend: engines built per precision and max_batch_size, or TRT-LLM's PyTorch runtime.

Written against TensorRT-LLM 1.2's LLM API (names and signatures checked in its source, see
docs/trtllm.md). NOT RUN ON HARDWARE YET: here it is tested against a stand-in module that
enforces those signatures (tests/fake_tensorrt_llm). Two runtimes:

- runtime = "engine": `tensorrt_llm._tensorrt_engine.LLM` builds a TensorRT engine with a
  `BuildConfig` (max_batch_size, max_input_len, max_seq_len baked in) and a `QuantConfig`; the
  engine is saved with `LLM.save()` to engines/<build-key>/engine and loaded from there by the
  next run with the same key. This path exists only up to release 1.2.x.
- runtime = "pytorch": `tensorrt_llm.LLM` (no engine; max_batch_size is a runtime argument).
  Its quantization comes from pre-quantized checkpoints only, so it runs fp16 / bf16 here.

Replay: every request goes in through `generate_async(prompt_token_ids, streaming=True)` at
once, and the in-flight batcher holds at most max_batch_size sequences; each streamed step
gives the request's token times. Output length is exact: max_tokens = min_tokens = the
request's output length with ignore_eos.
"""

from __future__ import annotations

import json
import os
import time
from importlib import metadata
from pathlib import Path

from bench.backends.base import (
    TENSOR_PARALLEL,
    Backend,
    Loaded,
    Option,
    RequestTiming,
    RunOutput,
    check_tensor_parallel,
    tensor_parallel_size,
)
from bench.errors import BenchInputError

# precision -> (QuantAlgo member, kv_cache_quant_algo member, activation dtype, needs calibration)
PRECISIONS = {
    "fp16": (None, None, "float16", False),
    "bf16": (None, None, "bfloat16", False),
    "int8-wo": ("W8A16", None, "float16", False),
    "int4-wo": ("W4A16", None, "float16", False),
    "int4-awq": ("W4A16_AWQ", None, "float16", True),
    "int8-sq": ("W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN", None, "float16", True),
    "fp8": ("FP8", "FP8", "bfloat16", True),
}
# The PyTorch runtime ignores QuantConfig (llmapi/llm_utils.py: "QuantConfig for pytorch backend is
# ignored. You can load quantized model with hf_quant_config.json directly.").
PYTORCH_PRECISIONS = ("fp16", "bf16")
ENGINE_FILE = "rank0.engine"
ENGINE_LAST_RELEASE = (1, 2)  # tensorrt_llm._tensorrt_engine exists up to 1.2.x
# Architectures of tensorrt_llm/models/__init__.py MODEL_MAP that are decoder-only causal LMs.
ENGINE_ARCHITECTURES = (
    "GPT2LMHeadModel", "GPTJForCausalLM", "GPTNeoXForCausalLM", "LlamaForCausalLM", "MistralForCausalLM",
    "MixtralForCausalLM", "InternLMForCausalLM", "InternLM2ForCausalLM", "BaichuanForCausalLM",
    "ChatGLMForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM", "QWenLMHeadModel", "QWenForCausalLM",
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "DeepseekForCausalLM", "DeepseekV2ForCausalLM", "CohereForCausalLM", "DbrxForCausalLM",
)
KV_OVERHEAD_GB = 2.0  # activations, workspace and CUDA context kept out of the KV budget


class TRTLLMBackend(Backend):
    name = "trtllm"
    precisions = tuple(PRECISIONS)
    # The engine bakes max_batch_size / max_input_len / max_seq_len in; the PyTorch runtime takes
    # them when the LLM is created, so a new LLM per batch size is needed there too.
    batch_size_in_build_key = True
    options = {
        "runtime": Option("engine", ("engine", "pytorch"), help="TensorRT engine (<= 1.2.x) or TRT-LLM's PyTorch runtime"),
        "engine_dir": Option("", kind=str, help="a prebuilt engine folder to load instead of building"),
        "max_num_tokens": Option(0, kind=int, help="BuildConfig.max_num_tokens; 0 = TRT-LLM's default"),
        "calib_requests": Option(64, kind=int, help="workload prompts used to calibrate int8-sq / int4-awq / fp8"),
        "nvtx": Option(False, (False, True), help="TRT-LLM NVTX markers and detailed engine layer names (profiling)"),
        "free_gpu_memory_fraction": Option(0.9, kind=float, help="KvCacheConfig: share of free memory for the KV cache"),
        # TRT-LLM starts its own ranks (MPI workers) on the GPUs the worker sees: one worker per cell.
        "tensor_parallel_size": TENSOR_PARALLEL,
    }

    @classmethod
    def validate(cls, cell) -> None:
        """Raise BenchInputError for a cell TRT-LLM cannot build; imports nothing heavy."""
        super().validate(cell)
        opts = cell.options_dict
        runtime = opts.get("runtime", "engine")
        if cell.device == "cpu" or not cell.device.startswith("cuda"):
            raise BenchInputError(f"backend 'trtllm' needs an NVIDIA GPU: set device = 'cuda' (got {cell.device!r})")
        if runtime == "pytorch" and cell.precision not in PYTORCH_PRECISIONS:
            raise BenchInputError(
                f"precision {cell.precision!r} cannot be built by TensorRT-LLM's PyTorch runtime (it ignores "
                f"QuantConfig and only loads pre-quantized checkpoints): use runtime = 'engine', or one of "
                f"{', '.join(PYTORCH_PRECISIONS)}"
            )
        frac = opts.get("free_gpu_memory_fraction", 0.9)
        if not 0 < frac <= 1:
            raise BenchInputError(f"option free_gpu_memory_fraction={frac} must be in (0, 1]")
        if opts.get("max_num_tokens", 0) < 0 or opts.get("calib_requests", 64) <= 0:
            raise BenchInputError("options max_num_tokens must be >= 0 and calib_requests > 0")
        if cell.precision == "fp8":
            check_fp8_capability(_compute_capability(cell.device))
        check_lengths(cell.workload)
        check_tensor_parallel(cell, kv_heads_too=False)  # TRT-LLM replicates KV heads when tp exceeds them
        from bench.models import resolve_model

        ref = resolve_model(cell.model)
        check_architecture(ref.config, cell.model, runtime)
        if PRECISIONS[cell.precision][3] and ref.path is None and not opts.get("engine_dir"):
            raise BenchInputError(
                f"precision {cell.precision!r} needs calibration, which runs through the model's Hugging Face "
                f"tokenizer; named model {cell.model!r} has random weights and no tokenizer files: point `model` "
                "at a local model directory (e.g. Qwen-7B-Chat), or use fp16 / bf16 / int8-wo / int4-wo"
            )
        if opts.get("engine_dir"):
            check_prebuilt_engine(Path(opts["engine_dir"]), cell)

    def build(self, key, engines_dir: Path) -> dict:
        opts = dict(key.options)
        runtime = opts["runtime"]
        require_tensorrt_llm(runtime)
        folder = engines_dir / key.key_hash
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "key.json").write_text(json.dumps(key.to_dict(), indent=1, sort_keys=True))
        artifact = {"key": key.to_dict(), "folder": str(folder), "runtime": runtime}
        if runtime == "pytorch":
            artifact["model_dir"] = str(hf_checkpoint(key.model, folder))
            artifact["build_info"] = {"runtime": "pytorch", "cached": None}
            return artifact
        if opts["engine_dir"]:
            engine_dir = Path(opts["engine_dir"]).expanduser()
            if not engine_built(engine_dir):
                raise RuntimeError(f"engine_dir {engine_dir} has no {ENGINE_FILE}: build it first or leave engine_dir empty")
            artifact.update(engine_dir=str(engine_dir), build_info=engine_info(engine_dir, cached=True, build_s=0.0))
            return artifact
        engine_dir = folder / "engine"
        if engine_built(engine_dir):  # a second run with the same key loads the saved engine
            artifact.update(engine_dir=str(engine_dir), build_info=engine_info(engine_dir, cached=True, build_s=0.0))
            return artifact
        _profiling_env(opts["nvtx"])
        from tensorrt_llm._tensorrt_engine import LLM

        model_dir = hf_checkpoint(key.model, folder)
        llm_kwargs = engine_llm_kwargs(key, model_dir, folder, getattr(self, "workload_files", []))
        t0 = time.perf_counter()
        llm = LLM(**llm_kwargs)
        try:
            llm.save(str(engine_dir))
        finally:
            llm.shutdown()
        build_s = time.perf_counter() - t0
        if not engine_built(engine_dir):  # a failed build can still leave config.json behind
            raise RuntimeError(f"TensorRT-LLM build finished without {engine_dir / ENGINE_FILE}; see the log above")
        artifact.update(engine_dir=str(engine_dir), build_info=engine_info(engine_dir, cached=False, build_s=build_s))
        return artifact

    def load(self, artifact: dict) -> TRTLLMLoaded:
        return TRTLLMLoaded(artifact)


class TRTLLMLoaded(Loaded):
    def __init__(self, artifact: dict):
        key = artifact["key"]
        opts = key["options"]
        _profiling_env(opts["nvtx"])
        from tensorrt_llm.llmapi import KvCacheConfig

        self.key = key
        tp = tensor_parallel_size(opts)
        parallel = {"tensor_parallel_size": tp} if tp > 1 else {}
        kv = kv_cache_limits(
            gpu_memory_gb=_gpu_memory_cap(), total_memory_bytes=_total_gpu_memory(key["device"]),
            # Per GPU: each rank holds 1/tp of the weights.
            weight_bytes=_weight_bytes(key["model"], key["precision"]) // tp, kv_bytes_per_token=_kv_bytes_per_token(key["model"]),
            free_gpu_memory_fraction=opts["free_gpu_memory_fraction"],
        )
        kv_config = KvCacheConfig(**kv)
        if artifact["runtime"] == "engine":
            from tensorrt_llm._tensorrt_engine import LLM

            self.limits = engine_limits(Path(artifact["engine_dir"]))
            self.llm = LLM(model=artifact["engine_dir"], skip_tokenizer_init=True, kv_cache_config=kv_config, **parallel)
        else:
            from tensorrt_llm import LLM

            self.limits = {"max_batch_size": key["max_batch_size"], "max_input_len": key["max_input_len"],
                           "max_seq_len": key["max_seq_len"]}
            kwargs = dict(model=artifact["model_dir"], skip_tokenizer_init=True, dtype=PRECISIONS[key["precision"]][2],
                          max_batch_size=key["max_batch_size"], max_seq_len=key["max_seq_len"], kv_cache_config=kv_config,
                          **parallel)
            if opts["max_num_tokens"]:
                kwargs["max_num_tokens"] = opts["max_num_tokens"]
            self.llm = LLM(**kwargs)
        from bench.models import resolve_model

        cfg = resolve_model(key["model"]).config
        eos = cfg.get("eos_token_id")
        self.end_id = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
        self.kv_config = kv

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        from tensorrt_llm.llmapi import SamplingParams

        requests = list(requests)
        check_requests(requests, max_batch_size, self.limits)
        started = time.perf_counter()
        pending = []
        for r in requests:
            params = SamplingParams(
                max_tokens=r.output_len, min_tokens=r.output_len, ignore_eos=True, end_id=self.end_id,
                pad_id=self.end_id, detokenize=False, top_k=1,
            )
            start = time.perf_counter()
            pending.append((r, start, self.llm.generate_async(list(r.prompt_ids), sampling_params=params, streaming=True)))
        timings = [_stream_timing(r, start, result) for r, start, result in pending]
        ended = time.perf_counter()
        return RunOutput(timings, started, ended, {"kv_cache_config": self.kv_config, "engine_limits": self.limits})

    def close(self) -> None:
        self.llm.shutdown()


def _stream_timing(r, start: float, result) -> RequestTiming:
    """Return the request's timing, iterating its streamed result (each step: new tokens)."""
    times: list[float] = []
    seen = 0
    for step in result:  # GenerationResult.__next__ blocks until the next step arrives
        now = time.perf_counter()
        n = len(step.outputs[0].token_ids)
        times.extend([now] * (n - seen))  # tokens of one step become available together
        seen = n
    return RequestTiming(request_id=r.id, input_len=r.input_len, expected_output_len=r.output_len,
                         output_len=seen, start=start, token_times=times, end=times[-1] if times else start)


# --- pure helpers (tested without TensorRT-LLM) -------------------------------------------------


def installed_version() -> str | None:
    """Return the installed tensorrt_llm version, read from package metadata (no import)."""
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def parse_version(text: str) -> tuple[int, int]:
    """Return (major, minor) of a version string such as '1.2.0rc5' or '0.21.0'."""
    parts = text.split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0) if len(parts) > 1 else 0


def require_tensorrt_llm(runtime: str, version: str | None = None) -> str:
    """Return the installed version; RuntimeError naming what to install if it cannot serve `runtime`."""
    version = version if version is not None else installed_version()
    if version is None:
        raise RuntimeError(
            "backend 'trtllm' needs TensorRT-LLM, which is not installed in this Python: run inside NVIDIA's "
            "release container nvcr.io/nvidia/tensorrt-llm/release:1.2.0 (docs/trtllm.md), or "
            "pip install tensorrt_llm==1.2.0 on a machine with a supported NVIDIA GPU"
        )
    if runtime == "engine" and parse_version(version) > ENGINE_LAST_RELEASE:
        raise RuntimeError(
            f"TensorRT-LLM {version} has no TensorRT engine path (tensorrt_llm._tensorrt_engine ends with 1.2.x): "
            "install tensorrt_llm 1.2.x (container nvcr.io/nvidia/tensorrt-llm/release:1.2.0) or set the "
            "option runtime = 'pytorch'"
        )
    if runtime == "pytorch" and parse_version(version) < (1, 0):
        raise RuntimeError(f"TensorRT-LLM {version} predates the PyTorch runtime of the LLM API: install 1.x")
    return version


def check_fp8_capability(capability: str | None) -> None:
    """Raise BenchInputError if the GPU (compute capability 'major.minor') has no FP8 (before Ada, 8.9)."""
    if capability is None:
        return  # no NVML here (the parent of a remote run): the build reports it instead
    major, minor = (int(x) for x in capability.split("."))
    if (major, minor) < (8, 9):
        raise BenchInputError(
            f"precision 'fp8' needs an Ada (8.9), Hopper (9.0) or newer GPU; this GPU has compute capability "
            f"{capability}: use int8-sq, int8-wo or int4-wo instead"
        )


def check_lengths(workload) -> None:
    """Raise BenchInputError if a synthetic workload's requests exceed the engine's length limits."""
    if workload.source != "synthetic":
        return  # ShareGPT requests are filtered to max_input_len / max_total_len, the engine's limits
    if workload.input_len > workload.max_input_len:
        raise BenchInputError(
            f"workload {workload.name!r}: input_len {workload.input_len} is longer than the engine's max_input_len "
            f"{workload.max_input_len}: raise max_input_len or shorten input_len"
        )
    if workload.input_len + workload.output_len > workload.max_total_len:
        raise BenchInputError(
            f"workload {workload.name!r}: input_len + output_len = {workload.input_len + workload.output_len} is "
            f"longer than the engine's max_seq_len (max_total_len) {workload.max_total_len}"
        )


def check_architecture(config: dict, model: str, runtime: str) -> None:
    """Raise BenchInputError if the engine path has no converter for the model's architecture."""
    archs = config.get("architectures") or []
    if runtime == "engine" and not any(a in ENGINE_ARCHITECTURES for a in archs):
        raise BenchInputError(
            f"model {model!r} (architectures {archs or 'missing'}, model_type {config.get('model_type')!r}) is not "
            f"a causal LM that TensorRT-LLM's engine path can convert; supported: {', '.join(ENGINE_ARCHITECTURES)}"
        )


def check_requests(requests, max_batch_size: int, limits: dict) -> None:
    """Raise BenchInputError if a request or the batch size exceeds what the engine was built for."""
    if max_batch_size > limits["max_batch_size"]:
        raise BenchInputError(
            f"max_batch_size {max_batch_size} is above the engine's max_batch_size {limits['max_batch_size']}: "
            "rebuild the engine (leave engine_dir empty) or lower max_batch_size"
        )
    for r in requests:
        if r.input_len > limits["max_input_len"] or r.input_len + r.output_len > limits["max_seq_len"]:
            raise BenchInputError(
                f"request {r.id}: {r.input_len} prompt + {r.output_len} output tokens exceed the engine's "
                f"max_input_len {limits['max_input_len']} / max_seq_len {limits['max_seq_len']}"
            )


def engine_limits(engine_dir: Path) -> dict:
    """Return max_batch_size / max_input_len / max_seq_len from an engine's config.json."""
    build = json.loads((engine_dir / "config.json").read_text())["build_config"]
    return {k: build[k] for k in ("max_batch_size", "max_input_len", "max_seq_len")}


def check_prebuilt_engine(engine_dir: Path, cell) -> None:
    """Raise BenchInputError if a prebuilt engine is missing or smaller than the cell needs."""
    engine_dir = engine_dir.expanduser()
    if not engine_built(engine_dir):
        raise BenchInputError(f"engine_dir {str(engine_dir)!r} has no {ENGINE_FILE} (and config.json): build it first")
    limits = engine_limits(engine_dir)
    wl = cell.workload
    if cell.max_batch_size > limits["max_batch_size"] or wl.max_input_len > limits["max_input_len"] or (
        wl.max_total_len > limits["max_seq_len"]
    ):
        raise BenchInputError(
            f"engine {str(engine_dir)!r} was built for max_batch_size {limits['max_batch_size']}, max_input_len "
            f"{limits['max_input_len']}, max_seq_len {limits['max_seq_len']}; the cell needs max_batch_size "
            f"{cell.max_batch_size}, max_input_len {wl.max_input_len}, max_seq_len {wl.max_total_len}"
        )


def engine_built(engine_dir: Path) -> bool:
    """Return True if engine_dir holds a finished engine (the engine file, not only config.json)."""
    return (engine_dir / ENGINE_FILE).is_file() and (engine_dir / "config.json").is_file()


def engine_info(engine_dir: Path, *, cached: bool, build_s: float) -> dict:
    """Return what the 'built' event records: engine size, build time, whether it was reused."""
    size = sum(p.stat().st_size for p in engine_dir.iterdir() if p.is_file())
    return {"runtime": "engine", "cached": cached, "engine_build_s": build_s, "engine_bytes": size,
            "engine_dir": str(engine_dir)}


def kv_cache_limits(
    *, gpu_memory_gb: float | None, total_memory_bytes: int | None, weight_bytes: int, kv_bytes_per_token: int,
    free_gpu_memory_fraction: float = 0.9, overhead_gb: float = KV_OVERHEAD_GB,
) -> dict:
    """Return KvCacheConfig keyword arguments that keep the run inside a memory cap of gpu_memory_gb.

    TRT-LLM sizes the KV cache as free_gpu_memory_fraction of the memory free after the weights
    are loaded, and uses the smaller of that and max_tokens. A cap below the device's memory is
    enforced through max_tokens: (cap - weights - overhead) / KV bytes per token.
    """
    kv = {"free_gpu_memory_fraction": free_gpu_memory_fraction}
    if not gpu_memory_gb:
        return kv
    cap = gpu_memory_gb * 1e9
    if total_memory_bytes and cap > total_memory_bytes:
        raise BenchInputError(f"--gpu-memory-gb {gpu_memory_gb} is more than the GPU has ({total_memory_bytes / 1e9:.1f} GB)")
    budget = cap - weight_bytes - overhead_gb * 1e9
    if budget < kv_bytes_per_token:
        raise BenchInputError(
            f"--gpu-memory-gb {gpu_memory_gb} leaves no room for a KV cache: weights take {weight_bytes / 1e9:.2f} GB "
            f"plus {overhead_gb} GB of activations and workspace"
        )
    kv["max_tokens"] = int(budget // kv_bytes_per_token)
    return kv


def _kv_bytes_per_token(model: str) -> int:
    from bench.models import resolve_model

    c = resolve_model(model).config
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    return 2 * c["num_hidden_layers"] * kv_heads * head_dim * 2  # K and V, fp16/bf16 cache


def _weight_bytes(model: str, precision: str) -> int:
    from bench.models import resolve_model

    bits = {"int8-wo": 8, "int8-sq": 8, "fp8": 8, "int4-wo": 4, "int4-awq": 4}.get(precision, 16)
    return resolve_model(model).num_parameters * bits // 8


def _gpu_memory_cap() -> float | None:
    """Return the run's memory cap in GB (bench.execution.memory_cap is the one place that carries it)."""
    from bench.execution.memory_cap import cap_bytes

    cap = cap_bytes()
    return None if cap is None else cap / 1e9


def _compute_capability(device: str) -> str | None:
    from bench.execution.environment import gpu_info, nvml_device

    return gpu_info(nvml_device(device)).get("compute_capability")


def _total_gpu_memory(device: str) -> int | None:
    from bench.execution.environment import gpu_info, nvml_device

    return gpu_info(nvml_device(device)).get("gpu_memory_bytes")


def _profiling_env(nvtx: bool) -> None:
    # Read by TRT-LLM when it is imported / when its ranges run (docs/source/performance/perf-analysis.md).
    if nvtx:
        os.environ["TLLM_NVTX_DEBUG"] = "1"
        os.environ["TLLM_LLMAPI_ENABLE_NVTX"] = "1"


def engine_llm_kwargs(key, model_dir: Path, folder: Path, workload_files: list) -> dict:
    """Return the keyword arguments of _tensorrt_engine.LLM(...) that build the key's engine."""
    from tensorrt_llm.llmapi import BuildConfig, CalibConfig, QuantAlgo, QuantConfig

    opts = dict(key.options)
    algo, kv_algo, dtype, calibrate = PRECISIONS[key.precision]
    build = {"max_batch_size": key.max_batch_size, "max_input_len": key.max_input_len, "max_seq_len": key.max_seq_len}
    if opts["max_num_tokens"]:
        build["max_num_tokens"] = opts["max_num_tokens"]
    if opts["nvtx"]:
        build["profiling_verbosity"] = "detailed"  # layer names in the engine, for the kernel table
    kwargs = {"model": str(model_dir), "dtype": dtype, "build_config": BuildConfig(**build)}
    if tensor_parallel_size(opts) > 1:  # the engine is built as tp rank files (rank0.engine, rank1.engine, ...)
        kwargs["tensor_parallel_size"] = tensor_parallel_size(opts)
    if algo is not None:
        quant = {"quant_algo": getattr(QuantAlgo, algo)}
        if kv_algo is not None:
            quant["kv_cache_quant_algo"] = getattr(QuantAlgo, kv_algo)
        kwargs["quant_config"] = QuantConfig(**quant)
    if calibrate:
        calib_dir = write_calibration_set(folder / "calib", model_dir, workload_files, opts["calib_requests"])
        kwargs["calib_config"] = CalibConfig(
            calib_dataset=str(calib_dir), calib_batches=opts["calib_requests"], calib_batch_size=1,
            calib_max_seq_length=key.max_input_len,
        )
    return kwargs


def write_calibration_set(calib_dir: Path, model_dir: Path, workload_files: list, n: int) -> Path:
    """Write the workload's first n prompts as a local dataset (train split, text column); return its folder.

    TRT-LLM's calibration loader (quantize_by_modelopt.get_calib_dataloader) reads a local directory
    as load_dataset(dir, split="train")["text"] and tokenizes it with the model's tokenizer, so the
    prompts are decoded back to text with that same tokenizer.
    """
    from transformers import AutoTokenizer

    from bench.workloads.workload import Workload

    if not workload_files:
        raise RuntimeError("calibration needs the workload's requests, but the worker passed no workload file")
    prompts = []
    for f in workload_files:
        prompts.extend(r.prompt_ids for r in Workload.from_json(Path(f).read_text()).requests)
    tok = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=True)
    calib_dir.mkdir(parents=True, exist_ok=True)
    with open(calib_dir / "train.jsonl", "w") as fh:
        for ids in prompts[:n]:
            fh.write(json.dumps({"text": tok.decode(list(ids))}) + "\n")
    return calib_dir


def hf_checkpoint(model: str, folder: Path) -> Path:
    """Return a Hugging Face checkpoint directory for the model; named models get random weights written once."""
    from bench.models import resolve_model

    ref = resolve_model(model)
    if ref.path:
        return Path(ref.path)
    # Shared by every build key of this model: a random Qwen-7B checkpoint is 15 GB to write.
    out = folder.parent / "hf-checkpoints" / model
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**ref.config)
    torch.manual_seed(0)
    model_obj = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    model_obj.save_pretrained(str(out), safe_serialization=True)
    return out
