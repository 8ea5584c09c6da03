"""TensorRT-LLM backend: engines built per precision and max_batch_size, or TRT-LLM's PyTorch runtime.

Written against TensorRT-LLM 1.2.1's LLM API; every call is checked against 1.2.1's source in
docs/guide/trtllm.md (a table: call, 1.2.1 file::symbol, how the stand-in models it). NOT RUN ON
HARDWARE YET: the tests drive it against a stand-in package rebuilt from that source
(tests/fake_tensorrt_llm). Two runtimes:

- runtime = "engine": `tensorrt_llm._tensorrt_engine.LLM` builds a TensorRT engine with a
  `BuildConfig` (max_batch_size, max_input_len, max_seq_len, max_num_tokens baked in) and a
  `QuantConfig`, and starts its executor in the same constructor. The backend builds once with
  the run's own executor settings (memory-capped KV cache, block reuse off, the engine's
  limits), saves the engine to engines/<build-key>/engine and measures with that same LLM; a
  later run with the same key loads the saved engine, passing the engine's own limits.
- runtime = "pytorch": `tensorrt_llm.LLM` (no engine; max_batch_size is a runtime argument).
  Its quantization comes from pre-quantized checkpoints only, so it runs fp16 / bf16 here.

Replay: every request goes in through `generate_async(prompt_token_ids, streaming=True)` at
once and one thread per request reads its stream, so each token is timestamped when the
executor delivers it (each result has its own queue that the executor fills; a late reader
would drain queued steps at once). Output length is exact: max_tokens = min_tokens = the
request's output length with ignore_eos. The engine's own per-request timestamps
(return_perf_metrics) are kept beside the harness's.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from pathlib import Path

from bench.backends.base import Backend, Loaded, RunOutput
from bench.backends.declaration import (
    tensor_parallel_size,
)
from bench.backends.trtllm.config import (
    BUILD_DEFAULT_MAX_NUM_TOKENS,
    ENGINE_FILE,
    PRECISIONS,
    TRTLLMConfig,
    engine_built,
    engine_limits,
)
from bench.errors import BenchInputError
from bench.files import user_path
from bench.machine.environment import installed_version, major_minor
from bench.workloads.request import RequestTiming

ENGINE_LAST_RELEASE = (1, 2)  # tensorrt_llm._tensorrt_engine exists up to 1.2.x
KV_OVERHEAD_GB = 2.0  # activations, workspace and CUDA context kept out of the KV budget
# get_calib_dataloader tests these names before it looks for a local folder.
CALIB_RESERVED_NAMES = ("cnn_dailymail", "scienceqa", "science_qa")


class TRTLLMBackend(TRTLLMConfig, Backend):
    """The runtime of the trtllm backend; declarations in TRTLLMConfig."""

    def __init__(self):
        # An engine built in this process keeps its LLM (and executor) for load(): no second load.
        self._built_llms: dict[str, object] = {}


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
            engine_dir = user_path(opts["engine_dir"], "engine_dir")
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
        # The constructor also starts the executor: give it the run's settings, not 1.2.1's
        # defaults (KV cache at 90 % of free memory, block reuse on, max_num_tokens 8192).
        runtime_kwargs, kv = runtime_llm_kwargs(key.to_dict(), expected_engine_limits(key))
        llm_kwargs.update(runtime_kwargs)
        log_offset = _stderr_position()
        t0 = time.perf_counter()
        try:
            llm = LLM(**llm_kwargs)
        except AssertionError as exc:
            # builder.py Builder.build_engine asserts 'Engine building failed, please check the error
            # log.'; TensorRT's reason (e.g. its OutOfMemory line) went to the log only: attach it so
            # bench.machine.failures can tell an OOM from any other failure.
            raise RuntimeError(build_failure_message(exc, _stderr_since(log_offset))) from exc
        try:
            llm.save(str(engine_dir))
            build_s = time.perf_counter() - t0
            if not engine_built(engine_dir):  # a failed build can still leave config.json behind
                raise RuntimeError(f"TensorRT-LLM build finished without {engine_dir / ENGINE_FILE}; see the log above")
        except BaseException:
            llm.shutdown()
            raise
        self._built_llms[str(folder)] = (llm, kv)
        artifact.update(engine_dir=str(engine_dir), build_info=engine_info(engine_dir, cached=False, build_s=build_s))
        return artifact

    def load(self, artifact: dict) -> TRTLLMLoaded:
        return TRTLLMLoaded(artifact, self._built_llms.pop(artifact["folder"], None))


class TRTLLMLoaded(Loaded):
    def __init__(self, artifact: dict, built: tuple | None = None):
        key = artifact["key"]
        opts = key["options"]
        _profiling_env(opts["nvtx"])
        self.key = key
        if artifact["runtime"] == "engine":
            self.limits = engine_limits(Path(artifact["engine_dir"]))
            if built is not None:  # the LLM that built the engine, already running with these limits
                self.llm, self.kv_config = built
            else:
                from tensorrt_llm._tensorrt_engine import LLM

                # LLM args' runtime max_num_tokens defaults to 8192 whatever the engine was built
                # with (llm.py _TrtLLM._build_model): pass the engine's own limits.
                kwargs, self.kv_config = runtime_llm_kwargs(key, self.limits)
                self.llm = LLM(model=artifact["engine_dir"], **kwargs)
        else:
            from tensorrt_llm import LLM

            self.limits = {"max_batch_size": key["max_batch_size"], "max_input_len": key["max_input_len"],
                           "max_seq_len": key["max_seq_len"], "max_num_tokens": opts["max_num_tokens"] or None}
            kwargs, self.kv_config = runtime_llm_kwargs(key, self.limits)
            if not opts["max_num_tokens"]:
                del kwargs["max_num_tokens"]
            self.llm = LLM(model=artifact["model_dir"], dtype=PRECISIONS[key["precision"]][2],
                           trust_remote_code=needs_remote_code(key["model"]), **kwargs)
        from bench.models import resolve_model

        cfg = resolve_model(key["model"]).config
        eos = cfg.get("eos_token_id")
        self.end_id = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        from tensorrt_llm.llmapi import SamplingParams

        requests = list(requests)
        check_requests(requests, max_batch_size, self.limits)
        readers = []
        started = time.perf_counter()
        for r in requests:
            params = SamplingParams(
                max_tokens=r.output_len, min_tokens=r.output_len, ignore_eos=True, end_id=self.end_id,
                pad_id=self.end_id, detokenize=False, top_k=1, return_perf_metrics=True,
            )
            start = time.perf_counter()
            result = self.llm.generate_async(list(r.prompt_ids), sampling_params=params, streaming=True)
            readers.append(StreamReader(r, start, result))
        for reader in readers:
            reader.join()
        ended = time.perf_counter()
        for reader in readers:
            if reader.error is not None:
                raise reader.error
        extra = {"kv_cache_config": self.kv_config, "engine_limits": self.limits,
                 "engine_request_timing": [reader.engine_timing() for reader in readers]}
        return RunOutput([reader.timing() for reader in readers], started, ended, extra)

    def close(self) -> None:
        self.llm.shutdown()


class StreamReader:
    """Reads one request's stream in its own thread, timestamping tokens as they arrive."""

    def __init__(self, request, start: float, result):
        self.request, self.start, self.result = request, start, result
        self.times: list[float] = []
        self.seen = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name=f"trtllm-stream-{request.id}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for step in self.result:  # GenerationResult.__next__: one queue.get() per executor step
                now = time.perf_counter()
                n = len(step.outputs[0].token_ids)
                self.times.extend([now] * (n - self.seen))  # tokens of one step arrive together
                self.seen = n
        except BaseException as exc:  # re-raised by run() in the worker's thread, where it is classified
            self.error = exc

    def join(self) -> None:
        self._thread.join()

    def timing(self) -> RequestTiming:
        r = self.request
        return RequestTiming(request_id=r.id, input_len=r.input_len, expected_output_len=r.output_len,
                             output_len=self.seen, start=self.start, token_times=self.times,
                             end=self.times[-1] if self.times else self.start)

    def engine_timing(self) -> dict:
        """Return the engine's own view of this request (return_perf_metrics), in seconds from its arrival."""
        out = {"request_id": self.request.id, "cached_tokens": getattr(self.result, "cached_tokens", None)}
        metrics = self.result.outputs[0].request_perf_metrics
        if metrics is None:
            return out
        try:  # bindings (tensorrt_llm.bindings.executor.RequestPerfMetrics): not checked on hardware
            t = metrics.timing_metrics
            out.update(
                engine_queue_s=(t.first_scheduled_time - t.arrival_time).total_seconds(),
                engine_ttft_s=(t.first_token_time - t.arrival_time).total_seconds(),
                engine_e2e_s=(t.last_token_time - t.arrival_time).total_seconds(),
                kv_reused_blocks=metrics.kv_cache_metrics.num_reused_blocks,
            )
        except (AttributeError, TypeError) as exc:
            out["engine_timing_error"] = f"{type(exc).__name__}: {exc}"
        return out


# --- pure helpers (tested without TensorRT-LLM) -------------------------------------------------


def require_tensorrt_llm(runtime: str, version: str | None = None) -> str:
    """Return the installed version; RuntimeError naming what to install if it cannot serve `runtime`."""
    version = version if version is not None else installed_version("tensorrt_llm", "tensorrt-llm")
    if version is None:
        raise RuntimeError(
            "backend 'trtllm' needs TensorRT-LLM, which is not installed in this Python: run inside NVIDIA's "
            "release container nvcr.io/nvidia/tensorrt-llm/release:1.2.1 (docs/guide/trtllm.md), or "
            "pip install tensorrt_llm==1.2.1 on a machine with a supported NVIDIA GPU"
        )
    if runtime == "engine" and major_minor(version) > ENGINE_LAST_RELEASE:
        raise RuntimeError(
            f"TensorRT-LLM {version} has no TensorRT engine path (tensorrt_llm._tensorrt_engine ends with 1.2.x): "
            "install tensorrt_llm 1.2.x (container nvcr.io/nvidia/tensorrt-llm/release:1.2.1) or set the "
            "option runtime = 'pytorch'"
        )
    if runtime == "pytorch" and major_minor(version) < (1, 0):
        raise RuntimeError(f"TensorRT-LLM {version} predates the PyTorch runtime of the LLM API: install 1.x")
    return version


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


def engine_max_num_tokens(requested: int, max_batch_size: int, max_seq_len: int) -> int:
    """Return the max_num_tokens an engine is built with: the request (or 8192), at most max_batch_size x max_seq_len.

    As builder.py build() -> _common.check_max_num_tokens does with padding removal and context
    FMHA on (1.2.1's defaults).
    """
    return min(requested or BUILD_DEFAULT_MAX_NUM_TOKENS, max_batch_size * max_seq_len)


def expected_engine_limits(key) -> dict:
    """Return the limits an engine built for `key` will have (what its executor must be given)."""
    return {"max_batch_size": key.max_batch_size, "max_input_len": key.max_input_len, "max_seq_len": key.max_seq_len,
            "max_num_tokens": engine_max_num_tokens(dict(key.options)["max_num_tokens"], key.max_batch_size,
                                                    key.max_seq_len)}


def runtime_llm_kwargs(key: dict, limits: dict) -> tuple[dict, dict]:
    """Return (LLM keyword arguments for the executor, the KvCacheConfig arguments used).

    KV cache: block reuse off (warm-up and trials replay the same prompts; KvCacheConfig's default
    reuses cached prefixes) and sized inside the memory cap. Limits: the engine's own, because
    the LLM args' runtime max_num_tokens defaults to 8192 whatever the engine holds.
    """
    from tensorrt_llm.llmapi import KvCacheConfig

    tp = tensor_parallel_size(key["options"])
    kv = {"enable_block_reuse": False, **kv_cache_limits(
        gpu_memory_gb=_gpu_memory_cap(), total_memory_bytes=_total_gpu_memory(key["device"]),
        weight_bytes=_weight_bytes(key["model"], key["precision"]) // tp,  # per GPU: each rank holds 1/tp
        kv_bytes_per_token=_kv_bytes_per_token(key["model"], key["precision"]),
        free_gpu_memory_fraction=key["options"]["free_gpu_memory_fraction"],
    )}
    kwargs = {"skip_tokenizer_init": True, "kv_cache_config": KvCacheConfig(**kv),
              "max_batch_size": limits["max_batch_size"], "max_num_tokens": limits["max_num_tokens"],
              "max_seq_len": limits["max_seq_len"], "max_input_len": limits["max_input_len"]}
    if tp > 1:
        kwargs["tensor_parallel_size"] = tp
    return kwargs, kv


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


def _kv_bytes_per_token(model: str, precision: str = "fp16") -> int:
    """Return KV-cache bytes per token of the model at this precision's cache dtype."""
    from bench.models import kv_bytes_per_token, resolve_model

    # An FP8 (kv_cache_quant_algo) cache stores one byte per value: twice the tokens per byte.
    per_value = 1 if PRECISIONS[precision][1] in ("FP8", "INT8") else 2
    return kv_bytes_per_token(resolve_model(model).config, per_value)


def _weight_bytes(model: str, precision: str) -> int:
    from bench.models import resolve_model

    bits = {"int8-wo": 8, "int8-sq": 8, "fp8": 8, "int4-wo": 4, "int4-awq": 4}.get(precision, 16)
    return resolve_model(model).num_parameters * bits // 8


def _gpu_memory_cap() -> float | None:
    """Return the run's memory cap in GB (bench.machine.memory_cap is the one place that carries it)."""
    from bench.machine.memory_cap import cap_bytes

    cap = cap_bytes()
    return None if cap is None else cap / 1e9


def _total_gpu_memory(device: str) -> int | None:
    from bench.machine.environment import gpu_info, nvml_device

    return gpu_info(nvml_device(device)).get("gpu_memory_bytes")


def build_failure_message(exc: BaseException, log_tail: str) -> str:
    """Return the error text of a failed engine build: TensorRT-LLM's assertion plus what it logged meanwhile."""
    text = f"TensorRT-LLM engine build failed: {type(exc).__name__}: {exc}"
    if log_tail.strip():
        text += "\n--- logged during the build (last lines) ---\n" + "\n".join(log_tail.strip().splitlines()[-40:])
    return text


def _stderr_position() -> int | None:
    """Return the size of the file behind stderr (the worker's log), or None if stderr is not a file."""
    try:
        st = os.fstat(2)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _stderr_since(offset: int | None, limit: int = 16000) -> str:
    """Return what this process wrote to its stderr file since `offset` (the last `limit` bytes)."""
    if offset is None:
        return ""
    sys.stderr.flush()
    try:
        with open("/proc/self/fd/2", "rb") as fh:  # reopened for reading (Linux); C++ logs land here too
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")


def _profiling_env(nvtx: bool) -> None:
    # Read by TRT-LLM when it is imported / when its ranges run (docs/source/performance/perf-analysis.md).
    if nvtx:
        os.environ["TLLM_NVTX_DEBUG"] = "1"
        os.environ["TLLM_LLMAPI_ENABLE_NVTX"] = "1"


def needs_remote_code(model: str) -> bool:
    """Return True if the model's config.json maps to custom code (auto_map), e.g. a local Qwen-7B-Chat: only
    where the user trusts it (BENCH_TRUST_REMOTE_CODE=1; the parent refused the cell otherwise, see check_remote_code)."""
    from bench.backends.trtllm.config import check_remote_code
    from bench.models import resolve_model

    config = resolve_model(model).config
    check_remote_code(config, model)
    return bool(config.get("auto_map"))


def engine_llm_kwargs(key, model_dir: Path, folder: Path, workload_files: list) -> dict:
    """Return the keyword arguments of _tensorrt_engine.LLM(...) that build the key's engine."""
    from tensorrt_llm.llmapi import BuildConfig, CalibConfig, QuantAlgo, QuantConfig

    opts = dict(key.options)
    algo, kv_algo, dtype, calibrate = PRECISIONS[key.precision]
    build = {"max_batch_size": key.max_batch_size, "max_input_len": key.max_input_len, "max_seq_len": key.max_seq_len,
             "max_num_tokens": engine_max_num_tokens(opts["max_num_tokens"], key.max_batch_size, key.max_seq_len)}
    if opts["nvtx"]:
        build["profiling_verbosity"] = "detailed"  # layer names in the engine, for the kernel table
    if opts.get("gather_context_logits"):
        build["gather_context_logits"] = True  # the prompt's logits can be returned (bench accuracy)
    # 1.2.1's BuildConfig is a plain pydantic model: it would silently drop a misspelt field.
    unknown = set(build) - set(BuildConfig.model_fields)
    if unknown:
        raise RuntimeError(f"BuildConfig of this TensorRT-LLM has no field(s) {sorted(unknown)}")
    kwargs = {"model": str(model_dir), "dtype": dtype, "build_config": BuildConfig(**build),
              "trust_remote_code": needs_remote_code(key.model)}
    if tensor_parallel_size(opts) > 1:  # the engine is built as tp rank files (rank0.engine, rank1.engine, ...)
        kwargs["tensor_parallel_size"] = tensor_parallel_size(opts)
    if algo is not None:
        quant = {"quant_algo": getattr(QuantAlgo, algo)}
        if kv_algo is not None:
            quant["kv_cache_quant_algo"] = getattr(QuantAlgo, kv_algo)
        kwargs["quant_config"] = QuantConfig(**quant)
    if calibrate:
        calib_dir = folder / "calib"
        if any(name in str(calib_dir).lower() for name in CALIB_RESERVED_NAMES):
            raise RuntimeError(
                f"calibration folder {calib_dir} contains one of {CALIB_RESERVED_NAMES}, which TensorRT-LLM's "
                "get_calib_dataloader takes for a Hub dataset name: use an engines folder whose path avoids them"
            )
        calib_dir = write_calibration_set(calib_dir, model_dir, workload_files, opts["calib_requests"])
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
    from bench.backends.trtllm.config import remote_code_trusted

    tok = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=remote_code_trusted())
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
