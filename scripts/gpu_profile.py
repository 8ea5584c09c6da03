"""Kernel counts and times per RMSNorm and attention call, eager vs compiled, on one GPU.

Run from the repo root:  python3 scripts/gpu_profile.py --out DIR   (one H200, < 4 minutes)
CPU logic check:         python3 scripts/gpu_profile.py --out DIR --cpu-smoke

Model: Qwen-7B-shaped Qwen2 (bench.models.QWEN_7B_SHAPE), random weights, bf16, batch 1
(--cpu-smoke: qwen-tiny, fp32, CPU operators instead of kernels). Measures, with the
harness's own ranges and torch.profiler collector:
1. eager forward of --tokens prompt tokens, attn eager and sdpa: kernels and GPU us per
   RMSNorm call and per attention call (median over instances), total kernels;
2. one decode step (after a prefill of --tokens), eager sdpa vs torch.compile (Inductor,
   mode "default": no CUDA graphs), total kernels and per-category counts; which kernels
   carry the RMSNorm after compilation (category "norm": Triton kernels with rsqrt);
3. wall time of each profiled window and of the same window unprofiled (median of 5).
Writes results.json, results.md, kernel tables and Chrome traces (< 16 MB each) under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.profiling.session import wall  # noqa: E402  (one timer for the script and `bench profile`)


def build_model(config: dict, attn: str, dtype, device):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(**config)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=dtype)
    return model.eval()


def profile_window(fn, cuda: bool, out: Path, name: str, model, ranges: bool, unprofiled: float) -> dict:
    """Return the figures of fn profiled once (with module ranges when asked) beside its unprofiled time."""
    from bench.profiling.nvtx import ModuleRanges, RangeStack
    from bench.profiling.torch_collector import profile_call

    stack = RangeStack(record_function=True)
    holder = {}

    def window():
        holder["s"] = wall(fn, cuda)

    if ranges:
        with ModuleRanges(model, stack=stack, phases=False):
            table, trace = profile_call(window, cuda=cuda, labels=stack.labels, trace_path=out / f"{name}.trace.json")
    else:
        table, trace = profile_call(window, cuda=cuda, labels=set(), trace_path=out / f"{name}.trace.json")
    return describe(table, trace, out, name, unprofiled, holder["s"])


def profiled(fn, cuda: bool, out: Path, name: str, model=None, ranges: bool = True) -> dict:
    """Return the window's figures: warm, time unprofiled (median of 5), profile once with ranges."""
    for _ in range(2):
        fn()
    unprofiled = statistics.median(wall(fn, cuda) for _ in range(5))
    return profile_window(fn, cuda, out, name, model, ranges, unprofiled)


def describe(table, trace, out: Path, name: str, unprofiled_s: float, profiled_s: float) -> dict:
    """Return the figures of one profiled window; writes its kernel table (.json, .md)."""
    table.save(out / f"{name}.kernel_table.json")
    (out / f"{name}.kernel_table.md").write_text(table.to_markdown())
    norm_rows = [r for r in table.rows if r.category == "norm"]
    res = {"unprofiled_ms": unprofiled_s * 1e3, "profiled_ms": profiled_s * 1e3, "total_kernels": table.total_kernels,
           "total_us": table.total_us, "unit": table.unit, "trace": trace.name,
           "unlinked_kernels": table.meta.get("unlinked_kernels"),
           "categories": {c.category: {"kernels": c.kernels, "us": c.total_us} for c in table.categories},
           "norm_category_kernels": sorted({r.kernel for r in norm_rows})[:10],
           "norm_category_launches": sum(r.kernels for r in norm_rows),
           "triton_kernels": sum(r.kernels for r in table.rows if r.kernel.startswith("triton_"))}
    for group in ("Qwen2RMSNorm", "Qwen2Attention", "Qwen2MLP", "Qwen2DecoderLayer", "lm_head"):
        try:
            r = table.range(group)
        except KeyError:
            continue
        res[group] = {"instances": r.instances, "kernels_per_call": r.kernels_per_instance,
                      "us_per_call_median": r.gpu_us_per_instance_median,
                      "kernels": sorted({row.kernel for row in table.rows if row.range == group})}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu-smoke", action="store_true", help="qwen-tiny on the CPU (operators, not kernels)")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile step")
    ap.add_argument("--budget-s", type=float, default=240, help="skip the compile step when it would overrun this")
    args = ap.parse_args()

    import torch
    import transformers

    from bench.models import QWEN_7B_SHAPE, QWEN_TINY

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = not args.cpu_smoke
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu-smoke for the CPU logic check", file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    config = QWEN_TINY if args.cpu_smoke else QWEN_7B_SHAPE
    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    started = time.time()
    results: dict = {
        "model": "qwen-tiny" if args.cpu_smoke else "qwen-7b-shape", "dtype": str(dtype), "batch": 1,
        "tokens": args.tokens, "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "runs": {},
    }
    ids = torch.randint(0, 32000, (1, args.tokens), device=device)

    def run_forward_and_step(attn: str):
        from transformers import DynamicCache

        model = build_model(config, attn, dtype, device)
        with torch.inference_mode():
            results["runs"][f"forward{args.tokens}_{attn}"] = profiled(
                lambda: model(ids), cuda, out, f"forward{args.tokens}_{attn}", model)
            if attn != "sdpa":
                return model, None
            # One decode step after a prefill: the cache is rebuilt each call so that every
            # timed step sees the same KV length.
            pre = model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True)
            nxt = pre.logits[:, -1:].argmax(-1)

            def fresh_cache():
                cache = DynamicCache(config=model.config)
                for layer, (k, v) in enumerate(_kv(pre.past_key_values)):
                    cache.update(k.clone(), v.clone(), layer)
                return cache

            caches = {}

            def step(fn=model):
                return fn(nxt, past_key_values=caches["c"], use_cache=True)

            # Each timed step gets a fresh copy of the prefill cache, made before the clock starts.
            results["runs"]["decode_step_eager_sdpa"] = profiled_step(model, step, caches, fresh_cache, cuda, out,
                                                                      "decode_step_eager_sdpa", ranges=True)
            return model, (step, caches, fresh_cache)

    step_parts = None
    for attn in ("eager", "sdpa"):
        try:
            model, parts = run_forward_and_step(attn)
            if parts:
                step_parts = (model, *parts)
            else:
                del model
        except Exception as exc:
            results["runs"][f"forward{args.tokens}_{attn}"] = {"error": f"{type(exc).__name__}: {exc}",
                                                               "traceback": traceback.format_exc()[-3000:]}
        if cuda:
            torch.cuda.empty_cache()

    if args.no_compile or args.cpu_smoke and not _has_cxx():
        results["runs"]["decode_step_compiled"] = {"skipped": "--no-compile, or no C++ compiler for Inductor on CPU"}
    elif time.time() - started > args.budget_s - 120:
        # Compiling the 32-layer model takes about a minute or more: do not overrun the budget.
        results["runs"]["decode_step_compiled"] = {"skipped": f"under 120 s left of --budget-s {args.budget_s}"}
    elif step_parts is not None:
        model, step, caches, fresh_cache = step_parts
        try:
            t0 = time.perf_counter()
            # Inductor, no CUDA graphs (mode "default"); dynamic shapes so a growing cache
            # does not recompile.
            compiled = torch.compile(model, mode="default", dynamic=True)
            with torch.inference_mode():
                caches["c"] = fresh_cache()
                step(compiled)
                compile_s = time.perf_counter() - t0
                res = profiled_step(compiled, lambda: step(compiled), caches, fresh_cache, cuda, out,
                                    "decode_step_compiled", ranges=False)
            res["compile_s"] = compile_s
            results["runs"]["decode_step_compiled"] = res
        except Exception as exc:
            results["runs"]["decode_step_compiled"] = {"error": f"{type(exc).__name__}: {exc}",
                                                       "traceback": traceback.format_exc()[-3000:]}
    results["elapsed_s"] = time.time() - started
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    md = summary_table(results)
    (out / "results.md").write_text(f"# gpu_profile ({results['device']}, {results['date']})\n\n"
                                    f"`{results['command']}`\n\n{md}\n")
    print(md)
    return 0


def profiled_step(model, step, caches, fresh_cache, cuda, out, name, ranges):
    """Return profiled() figures for one decode step, each call on a freshly copied cache."""
    import torch

    def timed_once():
        caches["c"] = fresh_cache()
        return wall(step, cuda)

    with torch.inference_mode():
        for _ in range(2):
            timed_once()
        unprofiled = statistics.median(timed_once() for _ in range(5))
        caches["c"] = fresh_cache()
        if cuda:
            torch.cuda.synchronize()  # the cache copy must not land in the profiled window
        return profile_window(step, cuda, out, name, model, ranges, unprofiled)


def _kv(cache):
    """Yield (key, value) per layer of a transformers cache, across cache layouts (4.5x and 5.x)."""
    if hasattr(cache, "layers"):
        for layer in cache.layers:
            yield layer.keys, layer.values
    else:
        yield from zip(cache.key_cache, cache.value_cache, strict=True)


def _has_cxx() -> bool:
    import shutil

    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))


def summary_table(results: dict) -> str:
    """Return the short Markdown table printed last."""
    unit = "kernels" if results["device"] != "cpu" else "CPU ops"
    lines = [f"{results['model']} {results['dtype']} batch 1, {results['device']}, torch {results['torch']}",
             "", f"| window | {unit} | RMSNorm {unit}/call | RMSNorm us/call | attention {unit}/call | attention us/call "
             "| norm-category launches | wall ms profiled / unprofiled |", "|---|---|---|---|---|---|---|---|"]
    for name, r in results["runs"].items():
        if "error" in r or "skipped" in r:
            lines.append(f"| {name} | {r.get('error') or r.get('skipped')} | | | | | | |")
            continue
        norm, attn = r.get("Qwen2RMSNorm", {}), r.get("Qwen2Attention", {})

        def f(d, k, fmt):
            return format(d[k], fmt) if k in d else "-"

        launches = r.get("norm_category_launches", 0)
        lines.append(f"| {name} | {r['total_kernels']} | {f(norm, 'kernels_per_call', '.1f')} | "
                     f"{f(norm, 'us_per_call_median', '.1f')} | {f(attn, 'kernels_per_call', '.1f')} | "
                     f"{f(attn, 'us_per_call_median', '.1f')} | {launches} | "
                     f"{r['profiled_ms']:.2f} / {r['unprofiled_ms']:.2f} |")
    comp = results["runs"].get("decode_step_compiled", {})
    if comp.get("norm_category_kernels"):
        lines += ["", "RMSNorm after compile is carried by: " + ", ".join(comp["norm_category_kernels"][:4])]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
