"""Hugging Face transformers backend: the baseline every speedup is measured against.

Requests are replayed in static batches of at most max_batch_size, left-padded. Generation
ignores EOS (random weights emit anything) and each request stops at exactly its requested
output length through a per-row stopping criterion; the batch runs until its longest request
is done, as a static-batching server would. Token times are taken without adding host
synchronisation: on CUDA each step records an event, read once after the batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from bench.backends.base import Backend, Loaded, RunOutput
from bench.backends.declaration import tensor_parallel_size
from bench.backends.hf import torch_workarounds
from bench.backends.hf.compile import (
    configure_compile,
    configure_process,
    inductor_settings,
    tuned_kernel_configs,
)
from bench.backends.hf.config import DTYPES, TORCHAO, HFConfig
from bench.backends.hf.corrupt import replant
from bench.backends.hf.quantize import quantize
from bench.backends.hf.tensor_parallel import load_tensor_parallel
from bench.backends.speed_of_light import model_weight_bytes
from bench.machine.environment import major_minor
from bench.workloads.request import RequestTiming

# Static-cache lengths are rounded up so cells with similar workloads share compiled shapes.
CACHE_LEN_ROUND = 128
# What a worker of this backend imports before its first pass: the fork server imports these once per
# invocation and forks each worker from there (bench.execution.zygote); a fresh worker times them (`imports_s`).
PRELOAD = ("torch", "transformers", "transformers.models.auto.modeling_auto",
           "transformers.models.qwen2.modeling_qwen2", "transformers.generation", "bench.backends.hf.loop",
           "bench.backends.hf.weights")


class HFBackend(HFConfig, Backend):
    """The runtime of the hf backend: build (the engine folder) and load; declarations in HFConfig."""

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

    def install_engine(self, artifact: dict, files: dict[str, bytes]) -> None:
        """Load an engine artifact into this build's folder: torch's cache artifacts, then the tuned configs.

        build() has pointed Inductor's and Triton's caches at the folder, so torch writes its FX
        graphs, AOT entries, Triton kernels and autotune entries there; the `*.best_config` files are
        written after them, so the folder's tuned configs are exactly the artifact's
        (bench.backends.hf.compile.engine_files says what each part is). torch writes each entry at a path made
        from its key and unpickles entries, so the bytes are checked first, here too (bench.backends.hf.torch_cache:
        a key that is not a plain cache key, an entry of another type, raise UnsafeCacheArtifacts); the artifact's
        trust was decided before the worker started (bench.runner.engines)."""
        from bench.backends.hf.compile import TORCH_CACHE_ARTIFACTS
        from bench.backends.hf.torch_cache import check_blob

        blob = files.get(TORCH_CACHE_ARTIFACTS)
        if blob:
            import torch

            check_blob(blob)

            torch.compiler.load_cache_artifacts(blob)
        super().install_engine(artifact, {p: d for p, d in files.items() if p != TORCH_CACHE_ARTIFACTS})


class HFLoaded(Loaded):
    def __init__(self, artifact: dict):
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        from bench.machine.environment import rank_device
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
        self.warmed_shapes: set | None = None  # the batch shapes the cell's warm-up ran (None: no warm-up asked)
        self.engine_dir = Path(artifact["folder"])  # build() points Inductor's and Triton's caches here
        ref = resolve_model(key["model"])
        kwargs = {"attn_implementation": opts["attn_implementation"]}
        # transformers >= 4.56 calls it `dtype`; older releases only know `torch_dtype`.
        dtype_kw = "dtype" if major_minor(transformers.__version__) >= (4, 56) else "torch_dtype"
        kwargs[dtype_kw] = self.dtype
        if self.tensor_parallel > 1:
            self.model = load_tensor_parallel(ref, self.tensor_parallel, kwargs)
        elif ref.path:  # a checkpoint's tensors go straight to the device where transformers can place them
            # device_map needs accelerate (transformers 5 too), which the README's install does not bring: without it
            # the checkpoint loads on the CPU and moves to the device.
            from transformers.utils import is_accelerate_available

            placement = {"device_map": {"": str(self.device)}} if is_accelerate_available() else {}
            self.model = AutoModelForCausalLM.from_pretrained(ref.path, **kwargs, **placement).to(self.device)
        else:
            from bench.backends.hf.weights import random_model

            torch.manual_seed(0)  # the global generator as before; the weights draw from their own (weights.py)
            self.model = random_model(AutoConfig.for_model(**ref.config), self.device, **kwargs)
        self.model.eval()
        if opts.get("corrupt_layer", -1) != -1:  # tests only: a known-broken model (the declaration refuses it elsewhere)
            from bench.backends.hf.corrupt import corrupt_layer

            corrupt_layer(self.model, opts["corrupt_layer"])
        if opts.get("fault", "none") == "kv-negate":  # tests only, like corrupt_layer
            from bench.backends.hf.corrupt import negate_static_cache

            negate_static_cache()
        elif opts.get("fault", "none") == "overflow":
            from bench.backends.hf.corrupt import overflow

            overflow(self.model)
        self.planted = "none"  # option plant (tests only): set per pass, not built (corrupt.replant)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())  # the model's, before quantization
        if self.tensor_parallel == 1:  # a rank's shards are not the model's weights: no digest for them
            from bench.backends.hf.weights import weights_digest

            self.weights_digest = weights_digest(self.model)  # before quantization: the weights it started from
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
        configure_process(self.engine_dir.name, self.compile, opts.get("compile_tuning", "default"),
                          opts.get("freeze_weights", "off") == "on")
        # Patches of torch's Inductor, only in a process that compiles (bench/backends/hf/torch_workarounds.py).
        self.workarounds = torch_workarounds.install() if self.compile != "off" else None
        self.loop = None
        if opts.get("decode_loop", "generate") == "harness":
            from bench.backends.hf.loop import DecodeLoop

            self.loop = DecodeLoop(self.model, self.compile, self.device,
                                   token_zero=opts.get("fault", "none") == "decode-token-zero")
            configure_compile(self.model, "off", self.cache)  # generate is not used; compile belongs to the loop
        else:
            configure_compile(self.model, self.compile, self.cache)
        self.weights = model_weight_bytes(self.model)  # what a decode step reads (bench/backends/speed_of_light.py)
        self.weight_bytes, self.streamed_weight_bytes = self.weights.stored, self.weights.streamed
        cfg = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        from bench.models import kv_bytes_per_token

        self.kv_per_token = kv_bytes_per_token(cfg.to_dict(), torch.finfo(self.dtype).bits // 8)
        self.bandwidth = None
        if self.device.type == "cuda":
            from bench.backends.speed_of_light import (
                bandwidth_cache_dir,
                copy_bandwidth,
            )

            # Once per machine and GPU, cached beside the engines; the worker measured it before
            # the memory cap (measures_copy_bandwidth), so this reads the cache.
            self.bandwidth = copy_bandwidth(self.device, bandwidth_cache_dir(artifact.get("engines_dir", artifact["folder"])))

    def tuned_kernels(self) -> dict | None:
        return tuned_kernel_configs(self.engine_dir) if self.compile != "off" else None

    def engine_files(self) -> dict[str, bytes]:
        from bench.backends.hf.compile import engine_files

        return engine_files(self.engine_dir) if self.compile != "off" else {}

    def _sync(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def warmup(self, requests, max_batch_size: int, options: dict, passes: int) -> dict:
        """Run `passes` unmeasured passes over the batches the measured pass will run; return their times.

        On a GPU every batch, since kernels are chosen and built per shape the first time a process runs it (cuDNN
        attention, which PyTorch's SDPA chooses on Hopper, builds a graph per shape; cuBLAS picks per GEMM shape), and a
        warm-up that left shapes out left that cost in the measured pass: with one batch per batch size warmed, the
        Qwen-7B shape's eager generate at batch 1 ran the first cell of each worker at 41-61 ms a token in the H100 and
        H200 studies (2026-12-01 to 12-06), a request slow or fast by whether its lengths had run before in that
        process, where the same prompts took 21-28 ms in the next cell; the compiled cells' prefill took 63-85 ms for a
        new prompt length and 24-27 ms for a seen one. On a CPU, the worst-shaped batch of each size only.

        With a static cache, transformers sizes the cache per generate call and a compiled decode step (CUDA graphs) is
        specialised to (batch, cache length): the cache length is fixed per cell from the whole workload, and the first
        pass runs the worst-shaped batch of each distinct batch size first (the full batches and a smaller last one),
        so a compiled step compiles there, at that length; `cold_batches_s` is that part of the first pass (compilation,
        graph capture), `first_pass_s` the whole first pass.
        """
        from bench.workloads.workload import batches

        requests = list(requests)
        self.planted = replant(self.model, self.planted, options.get("plant", "none"))  # the cell's own (tests only)
        plan = batches(requests, max_batch_size, options.get("batching", "dataset"))
        self.fix_cache_len(requests, max_batch_size, options)
        by_size: dict[int, list] = {}
        for b in plan:  # per size, the batch with the longest prompt + output (worst shape)
            if len(b) not in by_size or _batch_len(b) > _batch_len(by_size[len(b)]):
                by_size[len(b)] = b
        first = list(by_size.values())
        # on a CPU no shape cost was seen above this VM's noise, and every batch cost the default matrix 12-17 s more
        order = first + [b for b in plan if not any(b is f for f in first)] if self.device.type == "cuda" else first
        times, cold = [], None
        self.warmed_shapes = {_batch_shape(b) for b in order} if passes else set()
        for _ in range(passes):
            t0 = time.perf_counter()
            for i, b in enumerate(order):
                self.run(b, max_batch_size, options)
                if cold is None and i == len(first) - 1:
                    cold = time.perf_counter() - t0
            times.append(time.perf_counter() - t0)
        if self.workarounds is not None:
            self.workarounds.restore_overwritten()  # the folder keeps the winners its kernels ran (see there)
        return {
            "warmup_pass_s": times,
            "first_pass_s": times[0] if times else None,  # cold: includes compilation when compile != off
            "cold_batches_s": cold,
            "batches_warmed": len(order) if passes else 0,
            "batch_sizes_warmed": sorted(by_size),
            "static_cache_len": self.cache_len,
        }

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        import torch

        from bench.backends.speed_of_light import run_lower_bound_s
        from bench.workloads.workload import batches

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.planted = replant(self.model, self.planted, options.get("plant", "none"))
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
        if self.warmed_shapes is not None:  # the pass's batches at a shape its warm-up did not run (a first-time cost)
            extra["unwarmed_batches"] = sum(_batch_shape(b) not in self.warmed_shapes for b in plan)
        if self.compile != "off":
            extra["inductor"] = {**inductor_settings(self.workarounds), "tuned": tuned_kernel_configs(self.engine_dir)}
        if self.device.type == "cuda":
            extra["peak_memory_bytes"] = torch.cuda.max_memory_allocated(self.device)
            extra["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(self.device)
        if self.bandwidth:
            bw = self.bandwidth["bandwidth_bytes_s"]
            lens = [[(r.input_len, r.output_len) for r in b] for b in plan]
            # Tensor parallelism: each GPU streams its shard of weights and KV cache at once, so the
            # bound is the whole model's bytes over the GPUs' summed bandwidth.
            sol_s = run_lower_bound_s(lens, self.weights, self.kv_per_token, bw * self.tensor_parallel)
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

    def fix_cache_len(self, requests, max_batch_size: int, options: dict) -> int | None:
        """Fix the static cache length from a workload's batches, as warmup does for the speed run; return it."""
        from bench.workloads.workload import batches

        plan = batches(list(requests), max_batch_size, options.get("batching", "dataset"))
        self.cache_len = static_cache_len(plan) if self.cache == "static" else None
        return self.cache_len

    def grow_cache_len(self, requests, max_batch_size: int, options: dict, tokens: int) -> int | None:
        """Grow the fixed static cache where a batch of `requests` (an accuracy session's prompts, which the speed run
        may not have had) leaves no room for a token: to hold those prompts plus `tokens`, rounded as the run rounds
        it. Else the length stays (outputs are cut to its room, see _fitted). Return the length now fixed."""
        from dataclasses import replace

        from bench.workloads.workload import batches

        if not self.cache_len or not requests:
            return self.cache_len
        plan = batches([replace(r, output_len=tokens) for r in requests], max_batch_size, options.get("batching", "dataset"))
        if max(max(r.input_len for r in b) for b in plan) + 1 > self.cache_len:
            self.cache_len = max(self.cache_len, static_cache_len(plan))
        return self.cache_len

    def _fitted(self, reqs, max_batch_size: int, options: dict) -> list[list]:
        """Return the batches the speed run's rule makes of reqs, each request's output cut to fit the fixed static cache
        and, for a compiled cell, a short last batch filled to max_batch_size with copies of its first request (their
        outputs unread): the shapes the timed pass compiled, so nothing compiles anew and the numerics are the timed ones."""
        from dataclasses import replace

        from bench.workloads.workload import batches

        self.planted = replant(self.model, self.planted, options.get("plant", "none"))  # greedy's, teacher_forced's
        plan = batches(list(reqs), max_batch_size, options.get("batching", "dataset"))
        out = []
        for batch in plan:
            if self.cache == "static" and self.cache_len:
                room = self.cache_len - max(r.input_len for r in batch)
                batch = [replace(r, output_len=max(1, min(r.output_len, room))) for r in batch]
            if self.compile != "off" and len(batch) < max_batch_size and len(plan) > 1:
                batch = batch + [replace(batch[0], id=f"fill-{i}") for i in range(max_batch_size - len(batch))]
            out.append(batch)
        return out

    def greedy(self, requests, max_batch_size: int, options: dict, new_tokens: int) -> dict[str, list[int]]:
        """Return {request id: its greedy ids} from the speed run's batch function, new_tokens of them per request.

        The batches are the speed run's (its rule, its max_batch_size, its fixed static cache, which
        may cut an output where it has no room): the first ids are what the timed pass computes for the
        same requests, since a token depends only on those before it.
        """
        from dataclasses import replace

        import torch

        reqs = [replace(r, output_len=new_tokens) for r in requests]
        out: dict[str, list[int]] = {}
        for batch in self._fitted(reqs, max_batch_size, options):
            cache_len = self.cache_len or (static_cache_len([batch]) if self.cache == "static" else None)
            for t in self._run_batch(batch, torch, cache_len, options.get("prefill_len") or None):
                if not t.request_id.startswith("fill-"):
                    out[t.request_id] = list(t.output_ids or [])
        return out

    def teacher_forced(self, sequences, max_batch_size: int, options: dict, on_logits) -> list[int]:
        """Feed each (prompt, answer) through the cell's own path, handing every answer position's logits to on_logits.

        Sequences are batched at max_batch_size by the speed run's rule (options' batching), left-padded,
        with the static cache length the speed run fixed (warmup) where it holds them. on_logits(indices, k,
        logits (len(indices), vocab)) gets, for the sequences `indices` (positions in `sequences`), the
        logits predicting answer[k], from the same prefill, cache, compiled step and decode loop the timed
        pass runs; it is called as the batch runs, so the caller reduces each step to its figures and
        nothing of size answer x vocab accumulates.

        Answers longer than the fixed static cache leaves room for are cut: the timed shapes, not new
        ones. Return the number of answer positions fed per sequence (the ones on_logits saw).
        """
        import torch

        from bench.workloads.request import Request

        reqs = [Request(str(i), tuple(p), len(a)) for i, (p, a) in enumerate(sequences)]
        answers = {r.id: list(a) for r, (_, a) in zip(reqs, sequences, strict=True)}
        fed_len: dict[int, int] = {}
        for batch in self._fitted(reqs, max_batch_size, options):
            width = max(r.output_len for r in batch)
            fed = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            for row, r in enumerate(batch):
                fed[row, : r.output_len] = torch.tensor(answers[r.id][: r.output_len])
            fed = fed.to(self.device)
            real = [(row, int(r.id), r.output_len) for row, r in enumerate(batch) if not r.id.startswith("fill-")]
            fed_len.update({i: n for _, i, n in real})
            size = len(batch)

            def each(k, logits, real=real, size=size):
                rows = [(row, i) for row, i, n in real if k < n]  # rows whose answer still has a position k
                if rows:
                    picked = logits if len(rows) == size else logits[[row for row, _ in rows]]
                    on_logits([i for _, i in rows], k, picked)

            cache_len = self.cache_len or (static_cache_len([batch]) if self.cache == "static" else None)
            with torch.inference_mode():
                self._run_batch(batch, torch, cache_len, options.get("prefill_len") or None, feed=fed, on_logits=each)
        return [fed_len[i] for i in range(len(sequences))]

    def _run_batch(self, batch, torch, cache_len: int | None = None, prefill_len: int | None = None,
                   feed=None, on_logits=None) -> list[RequestTiming]:
        """Return one RequestTiming per request of a static batch, generated ids included: the speed run's batch function.

        Teacher forcing (bench accuracy) goes through here too, so its logits come from the cell's own
        path (its cache, compiled step, decode loop, prefill_len, padding): `feed` (batch, max_new) ids
        each step reads instead of the token chosen before, and on_logits(k, logits (batch, vocab)) gets
        the logits that predict position k. The harness loop takes `feed` in its step; generate takes
        it through a logits processor that reads the raw logits and forces the fed token.
        """
        from transformers import StoppingCriteria, StoppingCriteriaList

        from bench.backends.hf import loop as hf_loop

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
        if feed is not None and self.loop is None:
            gen["logits_processor"] = forced_tokens(feed, prompt_len, on_logits)
        self._sync()
        if cuda:
            start_ev = torch.cuda.Event(enable_timing=True)
            start_ev.record()
        start = time.perf_counter()
        chunked = prefill_len is not None and prompt_len > prefill_len
        with torch.inference_mode():
            if self.loop is not None:
                new_tokens = self.loop.generate(ids, mask, max_new, cache_len or static_cache_len([batch]), marks,
                                                cuda, prefill_len if chunked else None, feed=feed, on_logits=on_logits)
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
        rows = new_tokens.tolist()  # after the clock stopped: what each request produced, stored with its times
        timings = []
        for r, n, row in zip(batch, produced, rows, strict=True):
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
                    output_ids=row[:min(n, r.output_len)],
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


def forced_tokens(feed, prompt_len: int, on_logits=None):
    """Return generate's LogitsProcessorList that hands each step's raw logits to on_logits(k, logits) and forces feed[:, k].

    Teacher forcing through model.generate itself (its cache, its compiled forward): the logits a
    step computed are read first, then every token but the fed one is masked, so greedy picks it.
    """
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class Force(LogitsProcessor):
        def __call__(self, input_ids, scores):
            k = input_ids.shape[1] - prompt_len
            if on_logits is not None:
                on_logits(k, scores.clone())
            forced = torch.full_like(scores, float("-inf"))
            forced.scatter_(1, feed[:, min(k, feed.shape[1] - 1)].unsqueeze(1), 0.0)
            return forced

    return LogitsProcessorList([Force()])


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
    return sum(_batch_shape(batch)[1:])  # padded prompt + output


def _batch_shape(batch) -> tuple[int, int, int]:
    """Return what decides a batch's tensor shapes (rows, padded prompt, output): one shape builds the same kernels."""
    return len(batch), max(r.input_len for r in batch), max(r.output_len for r in batch)


def static_cache_len(plan) -> int:
    """Return the static KV-cache length for a list of batches: the longest padded prompt + output, rounded up."""
    need = max(_batch_len(b) for b in plan)
    return -(-need // CACHE_LEN_ROUND) * CACHE_LEN_ROUND


def _generation_knows(field: str) -> bool:
    """Return whether this transformers' GenerationConfig has `field` (max_cache_len is new in 5.x)."""
    from transformers import GenerationConfig

    return hasattr(GenerationConfig(), field)
