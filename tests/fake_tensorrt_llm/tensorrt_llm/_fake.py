"""Stand-in classes that enforce TensorRT-LLM 1.2's signatures and record every call.

Mirrors (fields and keyword names, not behaviour): tensorrt_llm/builder.py BuildConfig,
tensorrt_llm/quantization/mode.py QuantAlgo, tensorrt_llm/llmapi/llm_args.py QuantConfig /
KvCacheConfig, tensorrt_llm/_tensorrt_engine/llm_args.py CalibConfig, tensorrt_llm/sampling_params.py
SamplingParams, tensorrt_llm/llmapi/llm.py LLM.generate_async / _tensorrt_engine/llm.py save.
Unknown keywords raise TypeError as the real dataclasses / pydantic models do. Calls are appended
as JSON lines to $FAKE_TRTLLM_LOG. $FAKE_TRTLLM_OOM = build | run injects the real OOM messages.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


def _log(event: str, **data: Any) -> None:
    path = os.environ.get("FAKE_TRTLLM_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"event": event, **data}, default=str) + "\n")


class QuantAlgo(str, enum.Enum):
    W8A16 = "W8A16"
    W4A16 = "W4A16"
    W4A16_AWQ = "W4A16_AWQ"
    W4A8_AWQ = "W4A8_AWQ"
    W8A16_GPTQ = "W8A16_GPTQ"
    W4A16_GPTQ = "W4A16_GPTQ"
    W8A8_SQ_PER_CHANNEL = "W8A8_SQ_PER_CHANNEL"
    W8A8_SQ_PER_TENSOR_PLUGIN = "W8A8_SQ_PER_TENSOR_PLUGIN"
    W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN = "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN"
    W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN = "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN"
    W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN = "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN"
    FP8 = "FP8"
    FP8_PER_CHANNEL_PER_TOKEN = "FP8_PER_CHANNEL_PER_TOKEN"
    INT8 = "INT8"
    NVFP4 = "NVFP4"
    NO_QUANT = "NO_QUANT"


@dataclass
class BuildConfig:
    max_input_len: int = 1024
    max_seq_len: int | None = None
    opt_batch_size: int = 8
    max_batch_size: int = 2048
    max_beam_width: int = 1
    max_num_tokens: int = 8192
    opt_num_tokens: int | None = None
    max_prompt_embedding_table_size: int = 0
    gather_context_logits: bool = False
    gather_generation_logits: bool = False
    strongly_typed: bool = True
    profiling_verbosity: str = "layer_names_only"
    enable_debug_output: bool = False
    monitor_memory: bool = False

    def __post_init__(self):
        if self.profiling_verbosity not in ("layer_names_only", "detailed", "none"):
            raise ValueError(f"profiling_verbosity {self.profiling_verbosity!r}")


@dataclass
class QuantConfig:
    quant_algo: QuantAlgo | None = None
    kv_cache_quant_algo: QuantAlgo | None = None
    group_size: int = 128
    smoothquant_val: float = 0.5
    clamp_val: list | None = None
    use_meta_recipe: bool = False
    has_zero_point: bool = False
    pre_quant_scale: bool = False
    exclude_modules: list | None = None

    def __post_init__(self):
        for name in ("quant_algo", "kv_cache_quant_algo"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, QuantAlgo):
                raise TypeError(f"{name} must be a QuantAlgo, got {v!r}")


@dataclass
class KvCacheConfig:
    enable_block_reuse: bool = True
    max_tokens: int | None = None
    max_attention_window: list | None = None
    sink_token_length: int | None = None
    free_gpu_memory_fraction: float | None = None
    host_cache_size: int | None = None
    onboard_blocks: bool = True
    dtype: str = "auto"

    def __post_init__(self):
        f = self.free_gpu_memory_fraction
        if f is not None and not 0 <= f <= 1:
            raise ValueError("free_gpu_memory_fraction must be in [0, 1]")


@dataclass
class CalibConfig:
    device: str = "cuda"
    calib_dataset: str = "cnn_dailymail"
    calib_batches: int = 512
    calib_batch_size: int = 1
    calib_max_seq_length: int = 512
    random_seed: int = 1234
    tokenizer_max_seq_length: int = 2048

    def __post_init__(self):
        if not isinstance(self.calib_dataset, str):
            raise TypeError("calib_dataset is a str: the name or local path of the calibration dataset")


@dataclass(kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    stop_token_ids: list | None = None
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    return_perf_metrics: bool = False
    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True


class _Output:
    def __init__(self, token_ids):
        self.token_ids = token_ids


class _Result:
    """GenerationResult: iterating it blocks for the next streamed step (1 token per step here)."""

    def __init__(self, n: int):
        self._n, self._k = n, 0
        self.outputs = [_Output([])]
        self.finished = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.finished:
            raise StopIteration
        self._k += 1
        self.outputs = [_Output(list(range(self._k)))]
        self.finished = self._k >= self._n
        return self


_LLM_ARGS = {  # TrtLlmArgs / TorchLlmArgs fields the harness may pass (a subset of BaseLlmArgs)
    "build_config", "quant_config", "calib_config", "kv_cache_config", "max_batch_size", "max_num_tokens",
    "max_seq_len", "max_input_len", "workspace", "enable_build_cache", "enable_tqdm", "backend",
}


class _BaseLLM:
    def __init__(self, model, tokenizer=None, tokenizer_mode="auto", skip_tokenizer_init=False,
                 trust_remote_code=False, tensor_parallel_size=1, dtype="auto", revision=None,
                 tokenizer_revision=None, **kwargs):
        unknown = set(kwargs) - _LLM_ARGS
        if unknown:
            raise TypeError(f"unexpected LLM argument(s) {sorted(unknown)}")
        for k, cls in (("build_config", BuildConfig), ("quant_config", QuantConfig), ("calib_config", CalibConfig),
                       ("kv_cache_config", KvCacheConfig)):
            if k in kwargs and not isinstance(kwargs[k], cls):
                raise TypeError(f"{k} must be a {cls.__name__}")
        self.model, self.kwargs, self.skip_tokenizer_init, self.dtype = str(model), kwargs, skip_tokenizer_init, dtype
        self.limits = {"max_input_len": 1 << 30, "max_seq_len": 1 << 30}

    def generate_async(self, inputs, sampling_params=None, lora_request=None, prompt_adapter_request=None,
                       streaming=False, kv_cache_retention_config=None, disaggregated_params=None,
                       trace_headers=None, _postproc_params=None, scheduling_params=None,
                       conversation_params=None, cache_salt=None, priority=0.5):
        if not (isinstance(inputs, list) and all(isinstance(t, int) for t in inputs)):
            raise TypeError("token-id prompts are a list of int")
        sp = sampling_params
        if self.skip_tokenizer_init and sp.end_id is None:
            raise ValueError("end_id is required when skip_tokenizer_init is True")
        if os.environ.get("FAKE_TRTLLM_OOM") == "run":
            raise RuntimeError("[TensorRT-LLM][ERROR] CUDA runtime error in cudaMallocAsync: out of memory")
        if len(inputs) > self.limits["max_input_len"] or len(inputs) + sp.max_tokens > self.limits["max_seq_len"]:
            raise ValueError("prompt too long for the engine")
        _log("generate_async", input_len=len(inputs), streaming=streaming, sampling=asdict(sp))
        n = sp.max_tokens
        if not sp.ignore_eos:
            n = max(1, n // 2)  # random weights emit EOS early: a harness that forgot ignore_eos sees short outputs
        return _Result(n)

    def shutdown(self):
        _log("shutdown", model=self.model)


class EngineLLM(_BaseLLM):
    """tensorrt_llm._tensorrt_engine.LLM: builds an engine from a HF checkpoint, or loads one."""

    def __init__(self, model, *args, **kwargs):
        super().__init__(model, *args, **kwargs)
        path = Path(model)
        if (path / "rank0.engine").is_file():
            cfg = json.loads((path / "config.json").read_text())["build_config"]
            self.limits = cfg
            self._engine_dir = path
            _log("load_engine", engine_dir=str(path), kwargs={k: asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in kwargs.items()})
            return
        if not (path / "config.json").is_file():
            raise ValueError(f"{model} is neither an engine nor a HF checkpoint")
        bc = kwargs.get("build_config") or BuildConfig()
        qc = kwargs.get("quant_config")
        cc = kwargs.get("calib_config")
        if qc is not None and qc.quant_algo in (QuantAlgo.W4A16_AWQ, QuantAlgo.FP8, QuantAlgo.W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN):
            if cc is None or not (Path(cc.calib_dataset) / "train.jsonl").is_file():
                raise ValueError("calibration would download cnn_dailymail: no local dataset given")
        _log("build", model=str(path), dtype=self.dtype, build_config=asdict(bc),
             quant_config=asdict(qc) if qc else None, calib_config=asdict(cc) if cc else None)
        self._workspace = tempfile.mkdtemp(suffix="-llm-workspace")
        self._engine_dir = Path(self._workspace) / "engine"
        self._engine_dir.mkdir()
        (self._engine_dir / "config.json").write_text(json.dumps({"build_config": asdict(bc)}))
        if os.environ.get("FAKE_TRTLLM_OOM") == "build":
            # The TensorRT builder's message; the LLM API leaves config.json and no engine.
            raise RuntimeError("[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory "
                               "(Requested size was 4294967296 bytes.)")
        (self._engine_dir / "rank0.engine").write_bytes(b"\0" * 1024)
        self.limits = asdict(bc)

    def save(self, engine_dir: str) -> None:
        if not isinstance(engine_dir, str):
            raise TypeError("engine_dir is a str")
        _log("save", engine_dir=engine_dir)
        shutil.copytree(self._engine_dir, engine_dir, dirs_exist_ok=True)


class TorchLLM(_BaseLLM):
    """tensorrt_llm.LLM (PyTorch runtime): no engine; max_batch_size etc. are runtime arguments."""

    def __init__(self, model, *args, **kwargs):
        super().__init__(model, *args, **kwargs)
        if "build_config" in kwargs or "quant_config" in kwargs:
            raise TypeError("the PyTorch runtime takes no build_config / quant_config here")
        _log("torch_llm", model=str(model), dtype=self.dtype,
             kwargs={k: asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in kwargs.items()})
        self.limits = {"max_input_len": kwargs.get("max_seq_len", 1 << 30), "max_seq_len": kwargs.get("max_seq_len", 1 << 30)}
