"""Hugging Face transformers backend: the baseline every speedup is measured against.

Requests are replayed in static batches of at most max_batch_size, left-padded. Generation
ignores EOS (random weights emit anything) and each request stops at exactly its requested
output length through a per-row stopping criterion; the batch runs until its longest request
is done, as a static-batching server would. Token times are taken without adding host
synchronisation: on CUDA each step records an event, read once after the batch.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import time
import warnings
from importlib import util
from pathlib import Path

from bench.backends.base import (
    TENSOR_PARALLEL,
    Backend,
    Loaded,
    Option,
    RequestTiming,
    Requirement,
    RunOutput,
    check_tensor_parallel,
    tensor_parallel_size,
)
from bench.backends.speed_of_light import streamed_weight_bytes
from bench.errors import BenchInputError
from bench.execution.environment import installed_version, major_minor

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
# Static-cache lengths are rounded up so cells with similar workloads share compiled shapes.
CACHE_LEN_ROUND = 128


class HFBackend(Backend):
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

    def build(self, key, engines_dir: Path) -> dict:
        """Return the artifact: the key's folder, which holds Inductor's and Triton's compile caches.

        Compilation itself happens lazily in the first warm-up pass (transformers compiles on
        the first decode step); pointing the caches here makes a second run of the same build
        key load compiled kernels instead of compiling them again.
        """
        folder = Path(engines_dir) / key.key_hash
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "key.json").write_text(json.dumps(key.to_dict(), indent=1, sort_keys=True))
        inductor = folder / "inductor"
        warm = inductor.is_dir() and any(inductor.iterdir())
        # Read by torch/triton when they first compile, which is after this point in the worker.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
        os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
        os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
        os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
        compiled = dict(key.options).get("compile", "off") != "off"
        return {
            "key": key.to_dict(),
            "folder": str(folder),
            "engines_dir": str(engines_dir),
            "build_info": {"compile_cache": ("warm" if warm else "cold") if compiled else None},
        }

    def load(self, artifact: dict) -> HFLoaded:
        return HFLoaded(artifact)


def _check_gpu(cell) -> None:
    """Reject a precision the GPU cannot run, reading its compute capability through NVML (no CUDA context)."""
    from bench.execution.environment import gpu_info, nvml_index

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


class HFLoaded(Loaded):
    def __init__(self, artifact: dict):
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        from bench.execution.environment import rank_device
        from bench.models import resolve_model

        key = artifact["key"]
        opts = key["options"]
        self.tensor_parallel = tensor_parallel_size(opts)
        # Under torchrun each rank holds a shard on its own GPU (cuda:LOCAL_RANK); ranks of a CPU cell share the CPU.
        self.device = torch.device(rank_device(key["device"]))
        self.precision = key["precision"]
        # torchao precisions quantize a bf16 model; bf16 stays the activation and KV-cache dtype.
        self.dtype = getattr(torch, DTYPES.get(self.precision, "bfloat16"))
        self.cache = opts["cache"]
        self.compile = opts.get("compile", "off")
        self.cache_len: int | None = None  # static cache length fixed per cell by warmup()
        self.engine_dir = Path(artifact["folder"])  # build() points Inductor's and Triton's caches here
        ref = resolve_model(key["model"])
        kwargs = {"attn_implementation": opts["attn_implementation"]}
        # transformers >= 4.56 calls it `dtype`; older releases only know `torch_dtype`.
        dtype_kw = "dtype" if major_minor(transformers.__version__) >= (4, 56) else "torch_dtype"
        kwargs[dtype_kw] = self.dtype
        if self.tensor_parallel > 1:
            self.model = load_tensor_parallel(ref, self.tensor_parallel, kwargs)
        elif ref.path:
            self.model = AutoModelForCausalLM.from_pretrained(ref.path, **kwargs).to(self.device)
        else:
            config = AutoConfig.for_model(**ref.config)
            torch.manual_seed(0)
            with self.device:  # initialise the random weights directly on the device
                self.model = AutoModelForCausalLM.from_config(config, **kwargs)
        self.model.eval()
        self.num_parameters = sum(p.numel() for p in self.model.parameters())  # the model's, before quantization
        self.quantize_s = None
        self.quant: dict | None = None
        if self.precision in TORCHAO:
            t0 = time.perf_counter()
            kernels = opts.get("quant_kernels", "torchao")
            # Compiled steps take the quantized weights as plain tensors (see quantize's unwrap).
            unwrapped = quantize(self.model, self.precision, kernels, unwrap=self.compile != "off")
            self.quantize_s = time.perf_counter() - t0
            self.quant = {"kernels": kernels, "weights_unwrapped": unwrapped}
        gc = self.model.generation_config
        self.pad_id = gc.pad_token_id if gc.pad_token_id is not None else (gc.eos_token_id or 0)
        if isinstance(self.pad_id, list):
            self.pad_id = self.pad_id[0]
        # Exact output lengths: never stop at EOS (random weights would emit it anywhere).
        gc.eos_token_id = None
        gc.pad_token_id = self.pad_id
        configure_inductor(opts.get("compile_tuning", "default"), opts.get("freeze_weights", "off") == "on")
        self.loop = None
        if opts.get("decode_loop", "generate") == "harness":
            from bench.backends.hf_loop import DecodeLoop

            self.loop = DecodeLoop(self.model, self.compile, self.device)
            configure_compile(self.model, "off", self.cache)  # generate is not used; compile belongs to the loop
        else:
            configure_compile(self.model, self.compile, self.cache)
        self.weight_bytes = sum(stored_bytes(p) for p in self.model.parameters())
        emb, head = self.model.get_input_embeddings(), self.model.get_output_embeddings()
        tied = head is not None and getattr(head, "weight", None) is emb.weight  # gemlite's modules have no .weight
        self.streamed_weight_bytes = streamed_weight_bytes(self.weight_bytes, stored_bytes(emb.weight), tied)
        cfg = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        from bench.models import kv_bytes_per_token

        self.kv_per_token = kv_bytes_per_token(cfg.to_dict(), torch.finfo(self.dtype).bits // 8)
        self.bandwidth = None
        if self.device.type == "cuda":
            from bench.backends.speed_of_light import bandwidth_cache_dir, copy_bandwidth

            # Once per machine and GPU, cached beside the engines; the worker measured it before
            # the memory cap (measures_copy_bandwidth), so this reads the cache.
            self.bandwidth = copy_bandwidth(self.device, bandwidth_cache_dir(artifact.get("engines_dir", artifact["folder"])))

    def _sync(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def warmup(self, requests, max_batch_size: int, options: dict, passes: int) -> dict:
        """Run one batch of every distinct batch size the measured pass will use; return their times.

        With a static cache, transformers sizes the cache per generate call and a compiled
        decode step (CUDA graphs) is specialised to (batch, cache length): fixing the cache
        length per cell from the whole workload and warming each distinct batch size (the full
        batches and a smaller last one) means the measured passes compile nothing. The first
        pass's time is the cold cost (compilation, graph capture), reported apart.
        """
        from bench.workloads.workload import batches

        requests = list(requests)
        plan = batches(requests, max_batch_size, options.get("batching", "dataset"))
        self.cache_len = static_cache_len(plan) if self.cache == "static" else None
        by_size: dict[int, list] = {}
        for b in plan:  # per size, the batch with the longest prompt + output (worst shape)
            if len(b) not in by_size or _batch_len(b) > _batch_len(by_size[len(b)]):
                by_size[len(b)] = b
        times = []
        for _ in range(passes):
            for b in by_size.values():
                t0 = time.perf_counter()
                self.run(b, max_batch_size, options)
                times.append(time.perf_counter() - t0)
        return {
            "warmup_pass_s": times,
            "first_pass_s": times[0] if times else None,  # cold: includes compilation when compile != off
            "batch_sizes_warmed": sorted(by_size),
            "static_cache_len": self.cache_len,
        }

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        import torch

        from bench.backends.speed_of_light import run_lower_bound_s
        from bench.workloads.workload import batches

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        plan = batches(list(requests), max_batch_size, options.get("batching", "dataset"))
        cache_len = self.cache_len or (static_cache_len(plan) if self.cache == "static" else None)
        timings: list[RequestTiming] = []
        self._sync()
        started = time.perf_counter()
        prefill_len = options.get("prefill_len") or None
        for batch in plan:
            timings.extend(self._run_batch(batch, torch, cache_len, prefill_len))
        self._sync()
        ended = time.perf_counter()
        extra = {
            "num_parameters": self.num_parameters,
            "weight_bytes": self.weight_bytes,
            "streamed_weight_bytes": self.streamed_weight_bytes,
            "kv_bytes_per_token": self.kv_per_token,
            "static_cache_len": cache_len,
            "quantize_s": self.quantize_s,
            "quant": self.quant,
            "tensor_parallel_size": self.tensor_parallel,
        }
        if self.compile != "off":
            extra["inductor"] = {**inductor_settings(), "tuned": tuned_kernel_configs(self.engine_dir)}
        if self.device.type == "cuda":
            extra["peak_memory_bytes"] = torch.cuda.max_memory_allocated(self.device)
            extra["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(self.device)
        if self.bandwidth:
            bw = self.bandwidth["bandwidth_bytes_s"]
            lens = [[(r.input_len, r.output_len) for r in b] for b in plan]
            # Tensor parallelism: each GPU streams its shard of weights and KV cache at once, so the
            # bound is the whole model's bytes over the GPUs' summed bandwidth.
            sol_s = run_lower_bound_s(lens, self.streamed_weight_bytes, self.kv_per_token, bw * self.tensor_parallel)
            out_tokens = sum(r.output_len for r in requests)
            extra.update({"copy_bandwidth_bytes_s": bw, "sol_time_s": sol_s, "sol_output_throughput": out_tokens / sol_s})
        return RunOutput(timings, started, ended, extra)

    def generate_kwargs(self, max_new: int, cache_len: int | None) -> dict:
        """Return the model.generate settings this cell uses (shared with the bare-loop benchmark)."""
        gen = {"max_new_tokens": max_new, "do_sample": False, "num_beams": 1, "pad_token_id": self.pad_id}
        if self.cache == "static":
            gen["cache_implementation"] = "static"
            if cache_len and _generation_knows("max_cache_len"):
                gen["max_cache_len"] = cache_len
        return gen

    def _run_batch(self, batch, torch, cache_len: int | None = None, prefill_len: int | None = None) -> list[RequestTiming]:
        from transformers import StoppingCriteria, StoppingCriteriaList

        from bench.backends import hf_loop

        prompt_len = max(r.input_len for r in batch)
        ids, mask = left_padded(batch, self.pad_id, self.device)
        out_lens = [r.output_len for r in batch]
        max_new = max(out_lens)
        lens = torch.tensor(out_lens, device=self.device)
        # done_at[k]: which rows have their k tokens; precomputed so a step adds no host sync.
        done_at = [lens <= k for k in range(max_new + 1)]
        cuda = self.device.type == "cuda"
        marks: list = []

        class StepClock(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                hf_loop.record_mark(marks, cuda)
                return done_at[min(input_ids.shape[1] - prompt_len, max_new)]

        gen = self.generate_kwargs(max_new, cache_len)
        gen["stopping_criteria"] = StoppingCriteriaList([StepClock()])
        self._sync()
        if cuda:
            start_ev = torch.cuda.Event(enable_timing=True)
            start_ev.record()
        start = time.perf_counter()
        chunked = prefill_len is not None and prompt_len > prefill_len
        with torch.inference_mode():
            if self.loop is not None:
                new_tokens = self.loop.generate(ids, mask, max_new, cache_len or static_cache_len([batch]), marks,
                                                cuda, prefill_len if chunked else None)
                eos_ids = None
            else:
                if chunked:  # the prompt but its last token goes in first; generate continues from that cache
                    gen.pop("cache_implementation", None)
                    static_len = None
                    if self.cache == "static":
                        static_len = gen.pop("max_cache_len", None) or cache_len or static_cache_len([batch])
                    cache = hf_loop.prefilled_cache(self.model, ids, mask, prefill_len, static_len)
                    gen[hf_loop.forward_names(self.model)[0]] = cache
                new_tokens = self.model.generate(input_ids=ids, attention_mask=mask, **gen)[:, prompt_len:]
                # generate pads rows finished at an EOS only when it stops at one (not by default here).
                eos_ids = self.model.generation_config.eos_token_id
        self._sync()
        end = time.perf_counter()
        if cuda:
            marks = [start + start_ev.elapsed_time(ev) / 1000.0 for ev in marks]
        produced = count_produced(new_tokens, out_lens, eos_ids)
        timings = []
        for r, n in zip(batch, produced, strict=True):
            got = min(n, len(marks))  # a token without a time mark is not counted either
            timings.append(
                RequestTiming(
                    request_id=r.id,
                    input_len=r.input_len,
                    expected_output_len=r.output_len,
                    output_len=got,
                    start=start,
                    token_times=marks[:got],
                    end=marks[got - 1] if got else end,
                )
            )
        return timings

    def recover(self) -> None:
        import gc

        import torch

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def close(self) -> None:
        del self.model
        self.loop = None  # it holds the model and its static caches
        self.recover()
        if self.tensor_parallel > 1:
            import torch.distributed as dist

            if dist.is_initialized():  # transformers started the process group from torchrun's environment
                dist.destroy_process_group()


def load_tensor_parallel(ref, tp: int, kwargs: dict):
    """Return the model sharded over this torchrun job's ranks by transformers' tensor parallelism (tp_plan="auto").

    Each rank (one process per GPU, or per CPU share with gloo) calls this; transformers starts
    the process group from torchrun's environment (nccl on CUDA, gloo on CPU) and each rank
    loads its shards on its own device. A named model has no checkpoint: from_pretrained with
    an empty state dict builds the model from its config and initialises each rank's shards
    with random values, as from_config does for one device.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:  # transformers >= 5.1x: DistributedConfig(tp_plan=...); before that, from_pretrained(tp_plan=...)
        from transformers import DistributedConfig

        use_config = "tp_plan" in inspect.signature(DistributedConfig).parameters
    except ImportError:
        use_config = False
    tp_kwargs = {"distributed_config": DistributedConfig(tp_plan="auto", tp_size=tp)} if use_config else {"tp_plan": "auto"}
    if ref.path:
        return AutoModelForCausalLM.from_pretrained(ref.path, **tp_kwargs, **kwargs)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.for_model(**ref.config)
    torch.manual_seed(0)
    return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(None, config=config, state_dict={}, **tp_kwargs, **kwargs)


def left_padded(batch, pad_id: int, device):
    """Return (ids, mask) of a batch's prompts, left-padded to the longest, on `device`: the prompt ends where generation starts."""
    import torch

    prompt_len = max(r.input_len for r in batch)
    ids = torch.full((len(batch), prompt_len), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), prompt_len), dtype=torch.long)
    for i, r in enumerate(batch):
        ids[i, prompt_len - r.input_len :] = torch.tensor(r.prompt_ids)
        mask[i, prompt_len - r.input_len :] = 1
    return ids.to(device), mask.to(device)


def count_produced(tokens, requested: list[int], eos_ids=None) -> list[int]:
    """Return, per row, how many tokens the row produced within its own requested length.

    tokens: (batch, width) generated ids; a position never written holds a negative id (the
    harness loop's UNWRITTEN). A row counts the token ids among its first `requested[i]`
    positions, so a row cut short, or a batch that stopped early, shows as short. eos_ids
    (an id or a list): generation stopped rows at an EOS and padded them afterwards, so a row
    ends at its first EOS. The count comes from the tokens, never from the request.
    """
    import torch

    width = tokens.shape[1]
    lens = torch.tensor(requested, device=tokens.device).clamp(max=width)
    inside = torch.arange(width, device=tokens.device)[None, :] < lens[:, None]
    produced = (tokens >= 0) & inside
    eos_ids = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids or ())
    if eos_ids:
        eos = torch.isin(tokens, torch.tensor(eos_ids, dtype=tokens.dtype, device=tokens.device)) & inside
        after_eos = (eos.long().cumsum(-1) - eos.long()) > 0
        produced &= ~after_eos
    return produced.sum(-1).tolist()


def _batch_len(batch) -> int:
    return max(r.input_len for r in batch) + max(r.output_len for r in batch)


def static_cache_len(plan) -> int:
    """Return the static KV-cache length for a list of batches: the longest padded prompt + output, rounded up."""
    need = max(_batch_len(b) for b in plan)
    return -(-need // CACHE_LEN_ROUND) * CACHE_LEN_ROUND


def _generation_knows(field: str) -> bool:
    """Return whether this transformers' GenerationConfig has `field` (max_cache_len is new in 5.x)."""
    from transformers import GenerationConfig

    return hasattr(GenerationConfig(), field)


def configure_compile(model, mode: str, cache: str) -> None:
    """Set the model's generation config for `mode`: CompileConfig for the decode step, or no compile.

    transformers compiles the decode step by itself whenever the cache is static on a GPU, so
    compile='off' must say so explicitly (disable_compile) to measure the eager static cache.
    """
    gc = model.generation_config
    if mode == "off":
        if cache == "static":
            gc.disable_compile = True
        return
    import torch
    from transformers import CompileConfig

    # One compiled graph per (batch, cache length); the default limit (8) would silently fall
    # back to eager in a batch-size sweep inside one worker.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    gc.disable_compile = False
    # dynamic=False: shapes are fixed per cell (static cache length, warmed batch sizes), so each
    # graph is specialised; fullgraph=False tolerates a graph break rather than failing the cell.
    gc.compile_config = CompileConfig(fullgraph=False, dynamic=False, mode=mode)


def configure_inductor(tuning: str, freeze: bool = False) -> None:
    """Set Inductor's tuning for this worker's compiles (before the first one).

    coordinate-descent turns batch-1 matmuls into tuned reductions; freeze makes weights graph
    constants so matmuls sharing an input run as one, at the memory of concatenated copies
    (docs/hf-backend.md: why, and what each measured).
    """
    import torch._inductor.config as inductor

    if tuning == "coordinate-descent":
        inductor.coordinate_descent_tuning = True
    if freeze:
        inductor.freezing = True
    keep_tuned_winners()  # torchao's quantisers turn coordinate descent on too: backport for every cell


_RECHECK_BACKPORTED = False


def keep_tuned_winners() -> bool:
    """Make this process run the tuned kernels its build key's cache holds; return whether torch needed the fix.

    Where the installed torch re-tunes in every process (recheck_skips_single_config_hits), its
    `CachingAutotuner.recheck_autotune_cache` is replaced, for this worker process only, by the
    fixed one of pytorch/pytorch#173391 (as in torch 2.13): a cache hit is kept for a kernel
    with one config too, and marked found by coordinate descent so the run does not tune again.
    """
    global _RECHECK_BACKPORTED
    if _RECHECK_BACKPORTED:
        return True
    if not recheck_skips_single_config_hits():
        return False
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    CachingAutotuner.recheck_autotune_cache = _recheck_autotune_cache
    _RECHECK_BACKPORTED = True
    return True


def _recheck_autotune_cache(self, reload_kernel_from_src) -> None:
    """torch 2.13's `CachingAutotuner.recheck_autotune_cache` (pytorch/pytorch#173391), for torch releases without it.

    On a static-launcher cache load, take the cached best config, whether the kernel had one
    config or several: reuse the compiled one that matches (marked as found by coordinate
    descent where it was, so `run` does not tune it again), or compile the cached one.
    """
    from torch._inductor.runtime import triton_heuristics as th

    assert self.is_statically_launchable()
    configs = [result.config for result in self.compile_results]
    cached_configs, _, autotune_cache_info = th.check_autotune_cache(configs, self.filename, self.inductor_meta)
    self.autotune_cache_info = autotune_cache_info
    if len(cached_configs) != 1:
        return  # no cache hit: run tunes as usual
    best_config = cached_configs[0]
    found_by_coordesc = getattr(best_config, "found_by_coordesc", False)
    best_hash = th.triton_config_to_hashable(best_config)
    for compile_result in self.compile_results:
        if th.triton_config_to_hashable(compile_result.config) == best_hash:
            compile_result.config.found_by_coordesc = found_by_coordesc
            self.compile_results = [compile_result]
            return
    # Found after the static autotuner was saved (coordinate descent): compile it now.
    with th.dynamo_timed("CachingAutotuner.slow_precompile_config"):
        if self.fn.fn is None:
            self.fn = reload_kernel_from_src().fn
        self.compile_results = [self._precompile_config(best_config)]


def recheck_skips_single_config_hits(source: str | None = None) -> bool:
    """Return whether this torch re-tunes coordinate-descent kernels in every process (reads the installed source).

    Coordinate-descent winners are saved per kernel in Inductor's cache (the build key's folder),
    so every process of a key should run the first one's kernels. In torch 2.11 (and every release
    whose `CachingAutotuner.recheck_autotune_cache` skips a cache hit for a kernel with one
    config: pytorch/pytorch#172819, fixed by #173391), kernels loaded with the static CUDA
    launcher from the FX graph cache ignore the saved winner and tune again, so each process
    may run different kernels (int8wo on the H200: 174.9, 166.8 and 248.8 tok/s in three
    processes, docs/gpu-results.md). source: the method's source, for tests.
    """
    source = _installed_recheck_source() if source is None else source
    return source is not None and "len(configs) > 1" in source


@functools.cache
def _installed_recheck_source() -> str | None:
    """Return the installed `CachingAutotuner.recheck_autotune_cache` source, read once per process (None: none)."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        return inspect.getsource(CachingAutotuner.recheck_autotune_cache)
    except (ImportError, AttributeError, OSError, TypeError):
        return None  # no such recheck (older torch), or no source to read: nothing to work around


def inductor_settings() -> dict:
    """Return the Inductor settings this worker's compiles use (torchao's quantisers set some too)."""
    import torch._inductor.config as inductor

    tuning, static = bool(inductor.coordinate_descent_tuning), bool(getattr(inductor, "use_static_cuda_launcher", False))
    return {"coordinate_descent_tuning": tuning, "freezing": bool(inductor.freezing), "static_cuda_launcher": static,
            # True: a warm compile cache does not keep this cell's tuned kernels (see recheck_skips_single_config_hits)
            "retunes_each_process": tuning and static and recheck_skips_single_config_hits() and not _RECHECK_BACKPORTED,
            # True: this torch lacked pytorch/pytorch#173391 and the worker applied it (keep_tuned_winners)
            "recheck_backported": _RECHECK_BACKPORTED}


def tuned_kernel_configs(folder: Path) -> dict:
    """Return how many Triton kernels of this engine have a tuned launch config, and a digest of those configs.

    Inductor writes each autotuned or coordinate-descent-tuned kernel's winner to a
    `<hash>.best_config` file in its cache (the engine folder). Two runs of one cell whose
    digests differ ran different kernel configs: int8wo's spread across processes
    (docs/hf-backend.md) is what this makes visible. The time the tuning took is left out.
    """
    configs = []
    for f in sorted(Path(folder).rglob("*.best_config")) if Path(folder).is_dir() else []:
        try:
            cfg = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        cfg = {k: v for k, v in cfg.items() if k not in ("time_taken_ms", "triton_cache_hash")}
        configs.append((f.name, cfg))
    digest = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()[:16] if configs else None
    return {"kernels": len(configs), "coordinate_descent": sum(bool(c.get("found_by_coordesc")) for _, c in configs),
            "digest": digest}


def quantize(model, precision: str, kernels: str = "torchao", unwrap: bool = False) -> bool:
    """Quantize the model's Linear layers in place to `precision` (int8wo, int4wo, fp8); return whether
    torchao's weights were unwrapped.

    kernels: "torchao" (tensor subclasses) or "gemlite" (int8wo: gemlite's Triton modules). unwrap,
    for compiled steps: a compiled function takes subclass inputs apart in Python on every call,
    which outlasts a batch-1 GPU step; unwrapped, the graph's inputs are plain tensors and the
    rebuild is traced into it (docs/hf-backend.md, "Quantized precisions in a compiled step").
    """
    if kernels == "gemlite":
        _gemlite_int8(model)
        return False
    try:
        import torchao.quantization as q
    except ImportError as exc:
        raise BenchInputError(
            f"precision {precision!r} needs torchao: `pip install torchao` (built for your torch); {exc}"
        ) from exc
    if precision == "int8wo":
        try:
            config = q.Int8WeightOnlyConfig(version=2)  # Int8Tensor; version 1 is deprecated
        except TypeError:  # torchao < 0.15
            config = q.Int8WeightOnlyConfig()
    elif precision == "int4wo":
        # tile_packed_to_4d = tinygemm, a kernel inside torch itself; the default ('plain') needs fbgemm-gpu-genai.
        try:
            config = q.Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d")
        except TypeError:  # torchao < 0.14: version-1 config, tinygemm layout by default
            config = q.Int4WeightOnlyConfig(group_size=128)
    elif precision == "fp8":
        config = q.Float8DynamicActivationFloat8WeightConfig()
    else:  # pragma: no cover - validate() keeps other values out
        raise ValueError(precision)
    q.quantize_(model, config)
    # fp8 stays wrapped: dynamo cannot trace the rebuild of torchao's Float8Tensor (docs/hf-backend.md).
    if unwrap and precision in UNWRAPPED:
        from torchao.utils import unwrap_tensor_subclass

        unwrap_tensor_subclass(model)
        return True
    return False


def _gemlite_int8(model) -> None:
    """Replace every nn.Linear of the model with gemlite's int8 weight-only module (A16W8)."""
    import torch

    try:
        from gemlite.helper import A16W8  # its import reads the GPU's name (per-GPU kernel configs)
    except ImportError as exc:
        raise BenchInputError(f"quant_kernels='gemlite' needs gemlite: `pip install gemlite`; {exc}") from exc
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(parent, name, A16W8(device=str(child.weight.device)).from_linear(child))


def stored_bytes(tensor) -> int:
    """Return the bytes a (possibly torchao-quantized) tensor occupies: its inner tensors' bytes, summed.

    A tensor-parallel weight (a DTensor) counts whole, all ranks' shards: the model's bytes."""
    if type(tensor).__name__ == "DTensor":
        return tensor.numel() * tensor.element_size()  # numel() of a DTensor is the global one
    if hasattr(tensor, "__tensor_flatten__"):  # a tensor subclass (torchao): int data + scales + zero points
        names, _ = tensor.__tensor_flatten__()
        return sum(stored_bytes(getattr(tensor, n)) for n in names)
    return tensor.numel() * tensor.element_size()
