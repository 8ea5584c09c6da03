"""The hf backend's declaration: precisions, options and the checks a cell must pass before any run.

Light on purpose (no torch, no transformers import): the matrix reads it to validate cells and
to compute their ids and build keys. The runtime is bench.backends.hf.backend.
"""

from __future__ import annotations

import os
import warnings
from importlib import util
from pathlib import Path

from bench.backends.declaration import (
    TENSOR_PARALLEL,
    BackendConfig,
    Option,
    Requirement,
    check_tensor_parallel,
    tensor_parallel_size,
)
from bench.errors import BenchInputError
from bench.machine.environment import installed_version, major_minor

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# torchao precisions: the model loads in bf16, then torchao replaces the Linear weights.
TORCHAO = {"int8wo": "int8 weight-only", "int4wo": "int4 weight-only (tinygemm)", "fp8": "fp8 weights and activations"}
# Least compute capability a precision's kernels need (bf16 tensor cores: Ampere; fp8: Ada/Hopper).
MIN_CC = {"bf16": (8, 0), "int8wo": (8, 0), "int4wo": (8, 0), "fp8": (8, 9)}
# Which kernels run a quantized precision's matmuls (option quant_kernels): torchao's own tensor
# types, or gemlite's modules (its Triton GEMV/GEMM kernels; torchao not needed).
QUANT_KERNELS = {
    "torchao": "torchao's tensors: int8wo as Inductor-generated reductions, int4wo tinygemm, fp8 _scaled_mm",
    "gemlite": "gemlite's Triton GEMV/GEMM kernels (int8wo, per-channel scales); `pip install gemlite`",
}
GEMLITE_PRECISIONS = ("int8wo",)
# torchao precisions whose weights compiled steps take as plain tensors (quantize's unwrap).
UNWRAPPED = ("int8wo", "int4wo")
COMPILE_MODES = ("off", "reduce-overhead", "max-autotune")
# Options corrupt_layer, fault and plant (bench/backends/hf/corrupt.py) are refused unless this is "1".
CORRUPTION_ENV = "BENCH_ALLOW_CORRUPTION"
# Module classes whose forward is not pure (it writes the KV cache, or holds the whole model): running them twice
# would change the outputs, so option plant refuses them.
IMPURE_PLANTS = ("*Attention", "*Attn", "*DecoderLayer", "*Model", "*ForCausalLM", "*LMHeadModel")


class HFConfig(BackendConfig):
    """What the hf backend runs (precisions, options) and what it refuses, checked before any run."""

    name = "hf"
    precisions = (*DTYPES, *TORCHAO)
    measures_copy_bandwidth = True
    launches_ranks = True  # tensor_parallel_size > 1: one worker process per GPU under torchrun
    options = {
        "attn_implementation": Option(
            "sdpa", ("eager", "sdpa", "flash_attention_2", "flex_attention"), help="transformers attention kernel"
        ),
        "cache": Option("dynamic", ("dynamic", "static"), help="KV cache implementation"),
        "compile": Option(
            "off", COMPILE_MODES, help="torch.compile of the decode step through transformers' CompileConfig (static cache)"
        ),
        "compile_tuning": Option(
            "default",
            ("default", "coordinate-descent"),
            help="Inductor tuning: coordinate-descent turns batch-1 matmuls into tuned Triton reductions",
            keeps_ids_at_default=True,
        ),
        "freeze_weights": Option(
            "off",
            ("off", "on"),
            help="Inductor freezing: weights become constants of the compiled step, so projections that share "
            "an input (q/k/v, gate/up) run as one matmul; the concatenated copies cost extra device memory",
            keeps_ids_at_default=True,
        ),
        "quant_kernels": Option(
            "torchao",
            tuple(QUANT_KERNELS),
            help="kernels of the quantized precisions' matmuls: " + "; ".join(f"{k}: {v}" for k, v in QUANT_KERNELS.items()),
            keeps_ids_at_default=True,
        ),
        "decode_loop": Option(
            "generate",
            ("generate", "harness"),
            help="transformers' model.generate, or the harness's own greedy loop (static cache; no host sync per step)",
            keeps_ids_at_default=True,
        ),
        "batching": Option("dataset", ("dataset", "sorted"), in_build_key=False, help="request order within batches"),
        # Set by OOM probes (bench.oom.search.probe_cell), rarely by hand: see hf_loop.feed_prompt.
        "prefill_len": Option(
            0,
            kind=int,
            in_build_key=False,
            keeps_ids_at_default=True,
            help="prefill only the first N prompt tokens at once, the rest 16 at a time (0: the whole prompt)",
        ),
        "tensor_parallel_size": TENSOR_PARALLEL,
        # A known-broken model for the accuracy tests (bench/backends/hf/corrupt.py); refused outside them.
        "corrupt_layer": Option(
            -1, kind=int, keeps_ids_at_default=True,
            help="tests only (BENCH_ALLOW_CORRUPTION=1): dequantize this decoder layer's MLP output with a wrong scale (-1: none)",
        ),
        # A known-broken decode path for the accuracy tests (bench/backends/hf/corrupt.py FAULTS); refused outside them.
        "fault": Option(
            "none", ("none", "decode-token-zero", "kv-negate", "overflow"), keeps_ids_at_default=True,
            help="tests only (BENCH_ALLOW_CORRUPTION=1): a planted fault: the harness loop emits token 0 "
                 "(decode-token-zero), the static KV cache returns its values negated (kv-negate), or the first "
                 "layer's activations overflow to inf, so the logits are NaN (overflow, as an fp16 overflow would)",
        ),
        # A planted slowdown for the attribution tests (bench/backends/hf/corrupt.py plant); refused outside them.
        "plant": Option(
            "none", kind=str, keeps_ids_at_default=True, in_build_key=False,  # set per pass (corrupt.replant)
            help="tests only (BENCH_ALLOW_CORRUPTION=1): '<module class>:<N>' runs every module of that class N times "
                 "per call, same outputs (e.g. 'Qwen2MLP:3': only time moves); 'none': no plant",
        ),
    }

    @classmethod
    def requirements(cls, cell) -> list[Requirement]:
        """Return the optional packages a cell runs on: flash-attn, torchao or gemlite (none for bf16/sdpa)."""
        opts = cell.options_dict
        out = []
        if opts.get("attn_implementation", "sdpa") == "flash_attention_2":
            out.append(Requirement("flash_attn", "attn_implementation='flash_attention_2'",
                                   "attn_implementation='flash_attention_2' needs the flash-attn package: `pip install "
                                   "flash-attn --no-build-isolation` (CUDA, fp16/bf16), or use 'sdpa'"))
        kernels = opts.get("quant_kernels", "torchao")
        if cell.precision in TORCHAO and kernels == "torchao":
            out.append(Requirement("torchao", f"precision {cell.precision!r}",
                                   f"precision {cell.precision!r} ({TORCHAO[cell.precision]}) needs torchao: `pip install "
                                   "torchao` (a release built for your torch, e.g. torchao 0.17 for torch 2.11), or use bf16"))
        if kernels == "gemlite" and cell.precision in GEMLITE_PRECISIONS:
            out.append(Requirement("gemlite", "quant_kernels='gemlite'",
                                   "quant_kernels='gemlite' needs the gemlite package (Triton kernels, no build step): "
                                   "`pip install gemlite`, or set quant_kernels = 'torchao'"))
        return out

    @classmethod
    def validate(cls, cell) -> None:
        super().validate(cell)
        opts = cell.options_dict
        cpu = cell.device == "cpu"
        if cpu and cell.precision == "fp16":
            raise BenchInputError(
                "precision 'fp16' on device 'cpu' is not a configuration anyone deploys (slow, emulated "
                "kernels): use fp32 or bf16 on CPU, or run fp16 on a GPU (device = 'cuda')"
            )
        if cpu and cell.precision in TORCHAO:
            raise BenchInputError(
                f"precision {cell.precision!r} ({TORCHAO[cell.precision]}, torchao) is measured on GPUs only: "
                "use fp32 or bf16 on CPU, or set device = 'cuda'"
            )
        corrupt = opts.get("corrupt_layer", -1)
        if corrupt != -1:
            if os.environ.get(CORRUPTION_ENV) != "1":
                raise BenchInputError(f"option corrupt_layer={corrupt!r} breaks the model on purpose and is for the "
                                      f"accuracy tests only (they set {CORRUPTION_ENV}=1): remove it from the matrix")
            if isinstance(corrupt, bool) or not isinstance(corrupt, int) or corrupt < 0:
                raise BenchInputError(f"option corrupt_layer must be a decoder layer index >= 0 (or -1), got {corrupt!r}")
        fault = opts.get("fault", "none")
        if fault != "none":
            if os.environ.get(CORRUPTION_ENV) != "1":
                raise BenchInputError(f"option fault={fault!r} breaks the decode path on purpose and is for the "
                                      f"accuracy tests only (they set {CORRUPTION_ENV}=1): remove it from the matrix")
            if fault == "decode-token-zero" and opts.get("decode_loop", "generate") != "harness":
                raise BenchInputError("option fault='decode-token-zero' plants its fault in the harness decode loop: "
                                      "set decode_loop = 'harness' (and cache = 'static')")
            if fault == "kv-negate" and opts.get("cache") != "static":
                raise BenchInputError("option fault='kv-negate' plants its fault in the static KV cache: set cache = 'static'")
        plant = opts.get("plant", "none")
        if plant != "none":
            if os.environ.get(CORRUPTION_ENV) != "1":
                raise BenchInputError(f"option plant={plant!r} slows the model down on purpose and is for the "
                                      f"attribution tests only (they set {CORRUPTION_ENV}=1): remove it from the matrix")
            parse_plant(plant)
            if opts.get("compile", "off") != "off":
                raise BenchInputError(f"option plant={plant!r} repeats a pure forward, which torch.compile folds back into "
                                      "one (Inductor eliminates common subexpressions: the planted cell would not slow "
                                      "down): plant in an eager cell, compile = 'off'")
        prefill_len = opts.get("prefill_len", 0)
        if isinstance(prefill_len, bool) or not isinstance(prefill_len, int) or prefill_len < 0:
            raise BenchInputError(f"option prefill_len must be a non-negative integer (0: whole prompt), got {prefill_len!r}")
        if opts.get("decode_loop", "generate") == "harness" and opts.get("cache") != "static":
            raise BenchInputError(
                "decode_loop='harness' runs on a static KV cache (fixed shapes, compiled step): set cache = 'static' "
                "or decode_loop = 'generate'"
            )
        for name, default in (("compile_tuning", "default"), ("freeze_weights", "off")):
            if opts.get(name, default) != default and opts.get("compile", "off") == "off":
                raise BenchInputError(
                    f"{name}={opts[name]!r} changes what torch.compile generates: set compile = "
                    f"'reduce-overhead' or 'max-autotune', or {name} = {default!r}"
                )
        if opts.get("compile", "off") != "off":
            if opts.get("cache") != "static":
                raise BenchInputError(
                    f"compile={opts['compile']!r} needs cache='static': transformers compiles the decode step only "
                    "with a static KV cache (fixed shapes); set cache = 'static' or compile = 'off'"
                )
            if cpu:
                raise BenchInputError(
                    f"compile={opts['compile']!r} uses CUDA graphs and transformers compiles generate only on GPUs: "
                    "set device = 'cuda' or compile = 'off'"
                )
        kernels = opts.get("quant_kernels", "torchao")
        attn = opts.get("attn_implementation", "sdpa")
        if attn == "flash_attention_2":
            if cpu or cell.precision == "fp32":
                raise BenchInputError(
                    "attn_implementation='flash_attention_2' runs on CUDA in fp16/bf16 only: use 'sdpa' here"
                )
        if attn == "flex_attention" and major_minor(installed_version("torch") or "0") < (2, 5):
            raise BenchInputError(
                "attn_implementation='flex_attention' needs torch >= 2.5 (torch.nn.attention.flex_attention): "
                "upgrade torch or use 'sdpa'"
            )
        if kernels == "gemlite" and cell.precision not in GEMLITE_PRECISIONS:
            raise BenchInputError(
                f"quant_kernels='gemlite' runs {' and '.join(GEMLITE_PRECISIONS)} only, not precision "
                f"{cell.precision!r}: set quant_kernels = 'torchao' for this cell (an `include` entry)"
            )
        if not cpu:
            _check_gpu(cell)
        check_tensor_parallel(cell, kv_heads_too=True)
        if tensor_parallel_size(opts) > 1:
            _check_tensor_parallel_options(cell)
        from bench.models import resolve_model

        ref = resolve_model(cell.model)
        archs = ref.config.get("architectures") or []
        if ref.config.get("model_type") is None:
            raise BenchInputError(f"model {cell.model!r}: config.json has no model_type, transformers cannot build it")
        if archs and not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs):
            raise BenchInputError(f"model {cell.model!r} is not a causal LM (architectures: {archs})")
        _check_architecture(cell.model, ref.config)


def parse_plant(text: str) -> tuple[str, int]:
    """Return (module class, N) of option plant's '<module class>:<N>'; BenchInputError naming the form or the refusal."""
    import fnmatch

    cls, _, n = str(text).rpartition(":")
    if not cls or not cls.isidentifier() or not n.isdigit() or not 2 <= int(n) <= 1000:
        raise BenchInputError(f"option plant={text!r} must be '<module class>:<N>' with N from 2 to 1000, e.g. "
                              "'Qwen2MLP:3' (every Qwen2MLP runs its forward 3 times per call)")
    impure = next((p for p in IMPURE_PLANTS if fnmatch.fnmatchcase(cls, p)), None)
    if impure:
        raise BenchInputError(f"option plant={text!r}: a {cls} forward writes the KV cache or runs the whole model ({impure}), "
                              "so running it twice would change the outputs; plant a pure module such as Qwen2MLP or "
                              "Qwen2RMSNorm")
    return cls, int(n)


def _check_gpu(cell) -> None:
    """Reject a precision the GPU cannot run, reading its compute capability through NVML (no CUDA context)."""
    from bench.machine.environment import gpu_info, nvml_index

    index = nvml_index(cell.device)
    info = gpu_info(index)
    cc_text = info.get("compute_capability")
    if info.get("gpu_count") and isinstance(index, int) and index >= info["gpu_count"]:
        raise BenchInputError(f"device {cell.device!r}: this machine has {info['gpu_count']} GPU(s)")
    if info.get("nvml_error"):
        need = MIN_CC.get(cell.precision)
        warnings.warn(
            f"device {cell.device!r}: NVML failed: {info['nvml_error']}; "
            + (f"precision {cell.precision!r} (needs compute capability {need[0]}.{need[1]}+) cannot be checked "
               "before the run" if need else "the GPU cannot be checked before the run"),
            stacklevel=3,
        )
        return
    if not info.get("gpu_count") or not cc_text:
        # Planning a GPU matrix on a machine without one is allowed; the check is then deferred to the GPU.
        need = MIN_CC.get(cell.precision)
        if need:  # one text per device and precision: Python's filter prints it once, not once per cell
            warnings.warn(
                f"device {cell.device!r}: NVML sees no NVIDIA GPU here (no NVIDIA driver on this machine), so precision "
                f"{cell.precision!r} (needs compute capability {need[0]}.{need[1]}+) cannot be checked before the run",
                stacklevel=3,
            )
        return
    cc = tuple(int(x) for x in cc_text.split("."))
    need = MIN_CC.get(cell.precision)
    if need and cc < need:
        hint = "fp8 needs Ada (8.9) or Hopper (9.0)+" if cell.precision == "fp8" else "use fp16 on this GPU"
        raise BenchInputError(
            f"precision {cell.precision!r} needs compute capability {need[0]}.{need[1]}+, but "
            f"{info.get('gpu_name')} on {cell.device!r} has {cc_text}: {hint}"
        )


def _check_tensor_parallel_options(cell) -> None:
    """Reject what transformers' tensor parallelism does not run with here (tp_plan needs accelerate)."""
    opts = cell.options_dict
    refused = [(cell.precision in TORCHAO, f"precision {cell.precision!r} (torchao quantizes whole weights, not shards)"),
               (opts.get("compile", "off") != "off", f"compile={opts.get('compile')!r}"),
               (opts.get("decode_loop", "generate") != "generate", f"decode_loop={opts.get('decode_loop')!r}")]
    for bad, what in refused:
        if bad:
            raise BenchInputError(
                f"tensor_parallel_size={tensor_parallel_size(opts)} runs transformers' tensor parallelism (tp_plan), "
                f"which this harness does not combine with {what}: use fp32/fp16/bf16, compile='off' and "
                "decode_loop='generate', or tensor_parallel_size=1"
            )
    if util.find_spec("accelerate") is None:
        raise BenchInputError(
            "tensor_parallel_size > 1 loads the model with transformers' tp_plan='auto', which needs accelerate: "
            "`pip install accelerate`"
        )


def _check_architecture(model: str, config: dict) -> None:
    """Reject a model_type this transformers install does not know, naming what to install."""
    spec = util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise BenchInputError("the hf backend needs transformers: `pip install transformers`")
    model_type = config.get("model_type")
    if config.get("auto_map"):
        return  # remote code: transformers resolves it from the model directory
    # Fast path: most model types are a package of that name (importing transformers costs seconds).
    models_dir = Path(spec.submodule_search_locations[0]) / "models"
    if (models_dir / str(model_type).replace("-", "_")).is_dir():
        return
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        raise BenchInputError(
            f"model {model!r}: transformers {installed_version('transformers') or '(not installed)'} does not know model_type {model_type!r}; "
            "upgrade transformers (`pip install -U transformers`) or point `model` at a supported architecture"
        )
