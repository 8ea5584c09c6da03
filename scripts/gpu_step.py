"""Where one harness-loop decode step's GPU time goes, per precision / compile mode / tuning.

Run from the repo root:  python3 scripts/gpu_step.py --out DIR [--variants bf16:reduce-overhead:default,...]
CPU logic check:         python3 scripts/gpu_step.py --out DIR --cpu-smoke

Each variant (precision[@quant_kernels]:compile_mode:compile_tuning[+freeze][+wrapped][:layers]; +wrapped: keep
torchao's weights as tensor subclasses, as the backend did before unwrapping) runs in its own process (Inductor's
settings are process-wide, and torchao turns some on when it quantizes) on the Qwen-7B-shaped
Qwen2 (random weights; `layers` cuts the depth to make a diagnosis cheaper): it prefills
--prompt tokens and runs the harness loop's own steps (bench.backends.hf_loop.DecodeLoop
.prefill and .decode, which DecodeLoop.generate is made of):
1. step time: CUDA events around --steps steps, no host sync inside (as the harness loop);
2. one profile of --profile-steps steps (torch.profiler, CUPTI): kernels per step, GPU kernel
   time per step, the kernels that carry the most time (name, calls per step, us per call),
   and the host-side launch calls (cudaGraphLaunch vs cudaLaunchKernel: were CUDA graphs used?);
3. Inductor's counters (cudagraph skips, mm decompositions) after the compile.
Writes <variant>.json per variant and results.md (a table, then each variant's top kernels).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_variant(spec: str, args) -> dict:
    import torch
    from gpu_profile import build_model  # this script's sibling (sys.path[0] is scripts/)

    from bench.backends.hf import configure_inductor, quantize
    from bench.backends.hf_loop import DecodeLoop
    from bench.models import QWEN_7B_SHAPE, QWEN_TINY

    prec, mode, tuning, *rest = spec.split(":")
    cpu = args.cpu_smoke
    config = dict(QWEN_TINY if cpu else QWEN_7B_SHAPE)
    if rest:
        config["num_hidden_layers"] = int(rest[0])
    device = torch.device("cpu" if cpu else "cuda")
    model = build_model(config, "sdpa", torch.bfloat16, device)
    tuning, *flags = tuning.split("+")
    prec, _, kernels = prec.partition("@")
    res: dict = {"variant": spec, "layers": config["num_hidden_layers"]}
    n_prompt, cache_len = args.prompt, args.prompt + args.steps + args.profile_steps + 16
    ids = torch.randint(0, config["vocab_size"], (1, n_prompt), device=device)
    mask = torch.ones_like(ids)
    if prec != "bf16":  # as the backend does: compiled steps get unwrapped weights, unless +wrapped
        with torch.inference_mode():
            ref = model(input_ids=ids).logits[0, -1].float()
        quantize(model, prec, kernels or "torchao", unwrap=mode != "off" and "wrapped" not in flags)
        with torch.inference_mode():  # is the quantized matmul still the model's (not fast garbage)?
            got = model(input_ids=ids).logits[0, -1].float()
        res["last_logits_cosine_vs_bf16"] = torch.nn.functional.cosine_similarity(ref, got, dim=0).item()
    configure_inductor(tuning, "freeze" in flags)
    loop = DecodeLoop(model, mode, device)
    sync = torch.cuda.synchronize if not cpu else (lambda: None)

    with torch.inference_mode():
        state = loop.prefill(ids, mask, cache_len)
        t0 = time.perf_counter()
        loop.decode(state, 3)  # compile, record the graph, replay
        sync()
        res["first_steps_s"] = time.perf_counter() - t0
        state["position"].fill_(n_prompt)  # the timed steps start right after the prompt again
        if cpu:
            t0 = time.perf_counter()
            loop.decode(state, args.steps)
            res["step_ms"] = (time.perf_counter() - t0) / args.steps * 1e3
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loop.decode(state, args.steps)
            end.record()
            end.synchronize()
            res["step_ms"] = start.elapsed_time(end) / args.steps
        activities = [torch.profiler.ProfilerActivity.CPU] + ([] if cpu else [torch.profiler.ProfilerActivity.CUDA])
        with torch.profiler.profile(activities=activities) as prof:
            loop.decode(state, args.profile_steps)
            sync()
    n = args.profile_steps
    kernels: dict = defaultdict(lambda: [0, 0.0])
    launches: dict = defaultdict(int)
    for ev in prof.events():
        if cpu:
            if ev.device_type == torch.autograd.DeviceType.CPU and ev.name.startswith("aten::") and not ev.cpu_parent:
                kernels[ev.name][0] += 1
                kernels[ev.name][1] += ev.cpu_time_total
            continue
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev.name][0] += 1
            kernels[ev.name][1] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        elif ev.name in ("cudaGraphLaunch", "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
            launches[ev.name] += 1
    total_us = sum(us for _, us in kernels.values())
    res.update({"kernels_per_step": sum(c for c, _ in kernels.values()) / n, "kernel_us_per_step": total_us / n,
                "launch_calls_per_step": {k: v / n for k, v in launches.items()},
                "gpu_busy_pct": (total_us / n) / (res["step_ms"] * 1e3) * 100,
                "top": [{"kernel": k[:120], "calls_per_step": c / n, "us_per_call": us / c, "us_per_step": us / n}
                        for k, (c, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:args.top]]})
    from torch._dynamo.utils import counters

    res["inductor_counters"] = {k: dict(v) for k, v in counters.items() if k in ("inductor", "graph_break") and v}
    res["inductor_counters"]["inductor"] = {k: v for k, v in res["inductor_counters"].get("inductor", {}).items()
                                            if any(s in k for s in ("cudagraph", "decompose", "fusion", "skip"))}
    return res


def result_name(spec: str) -> str:
    """Return a variant's result file name: letters, digits, '-' and '_' only (the device tool drops others)."""
    return spec.replace(":", "_").replace("+", "-").replace("@", "-") + ".json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--variants", default="bf16:reduce-overhead:default,bf16:reduce-overhead:coordinate-descent,"
                                          "int8wo:reduce-overhead:default:8")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--profile-steps", type=int, default=20)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--timeout-s", type=float, default=300.0, help="a variant's process is stopped after this")
    ap.add_argument("--budget-s", type=float, default=560.0, help="variants not started by then are skipped")
    ap.add_argument("--cpu-smoke", action="store_true", help="qwen-tiny on CPU, compile off: checks the script's logic")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run this variant in this process
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        try:
            res = run_variant(args.one, args)
        except Exception:
            res = {"variant": args.one, "error": traceback.format_exc()[-3000:]}
        (args.out / result_name(args.one)).write_text(json.dumps(res, indent=1))
        return 0 if "error" not in res else 1
    t0 = time.monotonic()
    rows = []
    for spec in [v for v in args.variants.split(",") if v]:
        left = args.budget_s - (time.monotonic() - t0)
        if left < 30:
            rows.append({"variant": spec, "error": f"skipped: {left:.0f} s left of the budget"})
            continue
        cmd = [sys.executable, __file__, "--out", str(args.out), "--one", spec, "--prompt", str(args.prompt),
               "--steps", str(args.steps), "--profile-steps", str(args.profile_steps), "--top", str(args.top)]
        cmd += ["--cpu-smoke"] if args.cpu_smoke else []
        try:
            subprocess.run(cmd, timeout=min(args.timeout_s, left), check=False)
            rows.append(json.loads((args.out / result_name(spec)).read_text()))
        except (subprocess.TimeoutExpired, OSError, json.JSONDecodeError) as exc:
            rows.append({"variant": spec, "error": f"{type(exc).__name__}: {exc}"})
        print(f"[{time.monotonic() - t0:.0f} s] {spec}: {rows[-1].get('step_ms', rows[-1].get('error', '')[-300:])}", flush=True)
    lines = ["| variant | layers | step ms | kernels/step | kernel us/step | GPU busy % | launches/step | first 3 steps s "
             "| logits cos vs bf16 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | error: {r['error'].strip().splitlines()[-1][:150]} |")
            continue
        lines.append(f"| {r['variant']} | {r['layers']} | {r['step_ms']:.3f} | {r['kernels_per_step']:.0f} | "
                     f"{r['kernel_us_per_step']:.0f} | {r['gpu_busy_pct']:.0f} | {r['launch_calls_per_step']} | "
                     f"{r['first_steps_s']:.1f} | {r.get('last_logits_cosine_vs_bf16', '-')} |")
    for r in rows:
        if "error" in r:
            continue
        lines += ["", f"## {r['variant']}  counters: {r['inductor_counters']}", "",
                  "| kernel | calls/step | us/call | us/step |", "|---|---|---|---|"]
        lines += [f"| `{t['kernel']}` | {t['calls_per_step']:.1f} | {t['us_per_call']:.1f} | {t['us_per_step']:.0f} |"
                  for t in r["top"]]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
