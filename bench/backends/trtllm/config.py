"""The trtllm backend's declaration: precisions, options and the checks a cell must pass (no tensorrt_llm import).

Written against TensorRT-LLM 1.2.1 (docs/guide/trtllm.md); the runtime is bench.backends.trtllm.backend.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.backends.declaration import (
    TENSOR_PARALLEL,
    BackendConfig,
    Option,
    check_tensor_parallel,
)
from bench.errors import BenchInputError
from bench.files import user_path

# precision -> (QuantAlgo member, kv_cache_quant_algo member, activation dtype, needs calibration)
PRECISIONS = {
    "fp16": (None, None, "float16", False),
    "bf16": (None, None, "bfloat16", False),
    "int8-wo": ("W8A16", None, "float16", False),
    "int4-wo": ("W4A16", None, "float16", False),
    "int4-awq": ("W4A16_AWQ", None, "float16", True),
    # The modelopt flow (quantization/mode.py MODELOPT_FLOW_QUANTIZATIONS) reads a local calibration
    # folder; the *_PLUGIN SmoothQuant algorithms go through an older flow that cannot.
    "int8-sq": ("W8A8_SQ_PER_CHANNEL", None, "float16", True),
    "fp8": ("FP8", "FP8", "bfloat16", True),
}


# The PyTorch runtime ignores QuantConfig (llmapi/llm_utils.py: "QuantConfig for pytorch backend is
# ignored. You can load quantized model with hf_quant_config.json directly.").
PYTORCH_PRECISIONS = ("fp16", "bf16")


ENGINE_FILE = "rank0.engine"


# Decoder-only causal LMs of tensorrt_llm/models/__init__.py MODEL_MAP (1.2.x has no Qwen3MoeForCausalLM).
ENGINE_ARCHITECTURES = (
    "GPT2LMHeadModel", "GPTJForCausalLM", "GPTNeoXForCausalLM", "LlamaForCausalLM", "MistralForCausalLM",
    "MixtralForCausalLM", "InternLMForCausalLM", "InternLM2ForCausalLM", "BaichuanForCausalLM",
    "ChatGLMForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM", "QWenLMHeadModel", "QWenForCausalLM",
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM",
    "DeepseekForCausalLM", "DeepseekV2ForCausalLM", "CohereForCausalLM", "DbrxForCausalLM",
)


BUILD_DEFAULT_MAX_NUM_TOKENS = 8192  # builder.py BuildConfig.max_num_tokens (and LLM args' runtime default)


class TRTLLMConfig(BackendConfig):
    name = "trtllm"
    precisions = tuple(PRECISIONS)
    # The engine bakes max_batch_size / max_input_len / max_seq_len in; the PyTorch runtime takes
    # them when the LLM is created, so a new LLM per batch size is needed there too.
    batch_size_in_build_key = True
    options = {
        "runtime": Option("engine", ("engine", "pytorch"), help="TensorRT engine (<= 1.2.x) or TRT-LLM's PyTorch runtime"),
        "engine_dir": Option("", kind=str, help="a prebuilt engine folder to load instead of building"),
        "max_num_tokens": Option(0, kind=int, help="BuildConfig.max_num_tokens; 0 = TRT-LLM's default (8192, "
                                 "clamped to max_batch_size x max_seq_len)"),
        "calib_requests": Option(64, kind=int, help="workload prompts used to calibrate int8-sq / int4-awq / fp8"),
        "nvtx": Option(False, (False, True), help="TRT-LLM NVTX markers and detailed engine layer names (profiling)"),
        "free_gpu_memory_fraction": Option(0.9, kind=float, help="KvCacheConfig: share of free memory for the KV cache"),
        # Added after results were stored (ids unchanged at its default). bench accuracy builds a cell's engine with
        # it on (bench/accuracy/trtllm.py logits_cell); a speed run can too, at the cost of gathering every position.
        "gather_context_logits": Option(False, (False, True), keeps_ids_at_default=True,
                                        help="BuildConfig.gather_context_logits: the engine can return the prompt's "
                                             "logits (SamplingParams.return_context_logits)"),
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
        check_max_num_tokens_option(opts.get("max_num_tokens", 0), cell.workload.max_input_len)
        if cell.precision == "fp8":
            check_fp8_capability(_compute_capability(cell.device))
        check_lengths(cell.workload)
        check_tensor_parallel(cell, kv_heads_too=False)  # TRT-LLM replicates KV heads when tp exceeds them
        from bench.models import resolve_model

        ref = resolve_model(cell.model)
        check_architecture(ref.config, cell.model, runtime)
        check_remote_code(ref.config, cell.model)
        if PRECISIONS[cell.precision][3] and ref.path is None and not opts.get("engine_dir"):
            raise BenchInputError(
                f"precision {cell.precision!r} needs calibration, which runs through the model's Hugging Face "
                f"tokenizer; named model {cell.model!r} has random weights and no tokenizer files: point `model` "
                "at a local model directory (e.g. Qwen-7B-Chat), or use fp16 / bf16 / int8-wo / int4-wo"
            )
        if opts.get("engine_dir"):
            check_prebuilt_engine(Path(opts["engine_dir"]), cell)


REMOTE_CODE_ENV = "BENCH_TRUST_REMOTE_CODE"


def remote_code_trusted() -> bool:
    """Whether the user (their environment, never a matrix) lets a model folder's own Python run."""
    import os

    return os.environ.get(REMOTE_CODE_ENV) == "1"


def check_remote_code(config: dict, model: str) -> None:
    """Refuse a model folder whose config.json maps to custom code (auto_map, e.g. Qwen-7B-Chat's modeling_qwen.py)
    unless the user trusts it: TensorRT-LLM and transformers load it with trust_remote_code, which runs its Python."""
    if config.get("auto_map") and not remote_code_trusted():
        raise BenchInputError(
            f"model {model!r} maps to custom code (config.json auto_map): loading it for TensorRT-LLM runs that "
            f"folder's Python. Read it, then run with {REMOTE_CODE_ENV}=1 if you trust it"
        )


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
            "a causal LM that TensorRT-LLM 1.2.x's engine path can convert (tensorrt_llm/models MODEL_MAP); "
            "the PyTorch runtime (option runtime = 'pytorch') loads more architectures; engine path supports: "
            f"{', '.join(ENGINE_ARCHITECTURES)}"
        )


def check_max_num_tokens_option(max_num_tokens: int, max_input_len: int) -> None:
    """Raise BenchInputError if a chosen max_num_tokens cannot hold the workload's longest prompt.

    The engine runs a whole prompt in one iteration (no chunked context): a prompt longer than
    max_num_tokens is never scheduled.
    """
    if max_num_tokens and max_num_tokens < max_input_len:
        raise BenchInputError(
            f"option max_num_tokens={max_num_tokens} is below the workload's max_input_len {max_input_len}: "
            "prompts that long could never be scheduled; raise max_num_tokens or use 0 (TRT-LLM's default)"
        )


def engine_limits(engine_dir: Path) -> dict:
    """Return max_batch_size / max_input_len / max_seq_len / max_num_tokens from an engine's config.json."""
    build = json.loads((engine_dir / "config.json").read_text())["build_config"]
    return {k: build.get(k) for k in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens")}


def check_prebuilt_engine(engine_dir: Path, cell) -> None:
    """Raise BenchInputError if a prebuilt engine is missing or smaller than the cell needs."""
    engine_dir = user_path(engine_dir, "engine_dir")
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
    if limits["max_num_tokens"] is not None:
        check_max_num_tokens_option(limits["max_num_tokens"], wl.max_input_len)


def engine_built(engine_dir: Path) -> bool:
    """Return True if engine_dir holds a finished engine (the engine file, not only config.json)."""
    return (engine_dir / ENGINE_FILE).is_file() and (engine_dir / "config.json").is_file()


def _compute_capability(device: str) -> str | None:
    from bench.machine.environment import gpu_info, nvml_device

    return gpu_info(nvml_device(device)).get("compute_capability")
