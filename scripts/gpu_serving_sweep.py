"""Online serving on one GPU: `transformers serve` (continuous batching) measured by the openai backend at 1-16 req/s.

Run from the repo root (no network needed). Measured on one H200 (docs/measurements/2026-12-01-h200-serving.md):
about 6 minutes per run of the five rates, since each rate runs a full warm-up pass before its
measured one and the server completes about 1.3 req/s; 13 minutes with the default 2 runs, more
than one 10-minute device call: split it with --rates (each server start is its own cell), or
pass --warmup 0 (about half the time). Usage:

    python3 scripts/gpu_serving_sweep.py --out DIR                # qwen-7b-shape, bf16, cuda
    python3 scripts/gpu_serving_sweep.py --out DIR --cpu-smoke    # qwen-tiny on the CPU, 2 rates

Steps: check that the serving packages import (else print the one pip line that installs the
carried wheels, exit 2); write a servable random-weight model directory (bench/serving/model_dir.py:
config, a one-tensor checkpoint the loader completes at random on the GPU, Qwen's tokenizer);
start `transformers serve MODEL_DIR --continuous-batching` on a local port; run one matrix of
the openai backend over ShareGPT with request_rate = each of --rates (Poisson, vLLM's
schedule), each rate in --runs fresh client processes against the one server, open loop
(max_concurrency none), goodput under --slo-ttft-ms / --slo-tpot-ms; stop the server; write the
store, the tables and dashboard (bench report) and results.md under --out.
NVML telemetry (power, energy, memory of the GPU the server uses) comes with each pass when
--device is cuda.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NEEDED = ("fastapi", "uvicorn", "openai", "accelerate", "aiohttp")  # transformers' serving extra + bench's client
WHEELS_HINT = ("pip install --no-index --find-links WHEELS_DIR fastapi uvicorn 'openai>=1.98.0' 'accelerate>=1.1.0' "
               "aiohttp   # the wheels listed in docs/guide/serving.md, carried to this machine")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--cpu-smoke", action="store_true", help="qwen-tiny, float32, CPU, rates 2,8, 8 requests")
    p.add_argument("--model", default="qwen-7b-shape")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--rates", default="1,2,4,8,16", help="request rates (req/s), comma-separated")
    p.add_argument("--requests", type=int, default=40, help="ShareGPT requests per rate")
    p.add_argument("--runs", type=int, default=None,
                   help="fresh client processes per rate, against the same server (the tables show their spread); "
                        "default 2, 1 with --cpu-smoke")
    p.add_argument("--warmup", type=int, default=1,
                   help="unmeasured passes before each rate's measured one (0: about half the time; the server "
                        "stays warm between rates, but the first rate then meets a cold server)")
    p.add_argument("--max-output-len", type=int, default=256, help="cap on ShareGPT's answer lengths (time budget)")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-tpot-ms", type=float, default=100.0)
    p.add_argument("--cb-flag", action="append", default=[], metavar="FLAG=VALUE",
                   help="extra `transformers serve` flag, e.g. --cb-flag=--cb-max-memory-percent=0.8 (repeatable)")
    args = p.parse_args(argv)
    if args.cpu_smoke:
        args.model, args.dtype, args.device, args.rates, args.requests, args.max_output_len = (
            "qwen-tiny", "float32", "cpu", "2,8", 8, 16)
        args.cb_flag = args.cb_flag or ["--cb-num-blocks=64", "--cb-max-batch-tokens=512"]
    args.runs = args.runs or (1 if args.cpu_smoke else 2)
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"missing packages: {', '.join(missing)}\n  {WHEELS_HINT}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated run still stops its server (finally)
    t0 = time.perf_counter()
    phases: dict[str, float] = {}

    from bench.serving import transformers_serve
    from bench.serving.model_dir import write_model_dir

    model_dir = write_model_dir(args.model, out / "model", dtype=args.dtype, weights="stub")
    phases["model_dir_s"] = time.perf_counter() - t0
    flags = dict(f.split("=", 1) for f in args.cb_flag)
    t1 = time.perf_counter()
    server = transformers_serve.start(model_dir, out / "serve.log", device=args.device, flags=flags,
                                      check_flags=bool(flags), ready_timeout_s=600)
    phases["server_start_s"] = time.perf_counter() - t1
    print(f"server {server.base_url} ready in {phases['server_start_s']:.0f} s "
          f"(dropped flags: {server.dropped_flags or 'none'}); command: {' '.join(server.command)}", flush=True)
    try:
        t2 = time.perf_counter()
        store, report = run_sweep(server.base_url, str(model_dir), out, args)
        phases["sweep_s"] = time.perf_counter() - t2
    finally:
        server.stop()
    phases["total_s"] = time.perf_counter() - t0
    summary = summarize(store, args, phases, report)
    (out / "results.md").write_text(summary)
    print(summary)
    return 0


def run_sweep(base_url: str, model_name: str, out: Path, args) -> tuple[Path, dict]:
    """Run the rate sweep through bench's matrix runner; return the store and the report's paths."""
    from bench.report.build import build_report
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix

    rates = [float(r) for r in args.rates.split(",")]
    matrix = parse_matrix({
        "name": "serving-sweep", "backends": ["openai"], "model": args.model, "precisions": [args.dtype],
        "max_batch_sizes": [8],  # the warm-up's size: with max_concurrency none it limits nothing else
        "workloads": ["sharegpt"], "device": args.device, "trials": 1, "warmup": args.warmup, "runs": args.runs, "timeout_s": 900,
        "workload": {"sharegpt": {"source": "sharegpt", "num_requests": args.requests, "seed": 0,
                                  "max_input_len": 1024, "max_total_len": 2048, "max_output_len": args.max_output_len}},
        # model_name: the server is pinned to the directory (and 5.17's /v1/models may fail: no hub cache)
        "options": {"base_url": base_url, "model_name": model_name, "request_rate": rates, "max_concurrency": "none", "timeout_s": 600,
                    "slo_ttft_ms": args.slo_ttft_ms, "slo_tpot_ms": args.slo_tpot_ms},
        "baseline": {"backend": "openai", "request_rate": rates[0]},
    })
    store = out / "serving-sweep.jsonl"
    summary = run_matrix(matrix, store, show_progress=False)
    print(f"sweep: {summary.statuses} in {summary.elapsed_s:.0f} s", flush=True)
    report = build_report([store], out / "report", {"backend": "openai", "request_rate": rates[0]})
    return store, report


def summarize(store: Path, args, phases: dict, report: dict) -> str:
    """Return results.md: the command, the environment, TTFT/TPOT/goodput per rate, the report's table."""
    from bench.results.store import ResultStore

    recs = sorted(ResultStore(store).records(), key=lambda r: (float(r["cell"]["options"]["request_rate"]), r.get("run", 0)))
    env = recs[0].get("environment", {}) if recs else {}
    lines = [f"# transformers serve, continuous batching: request-rate sweep ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"command: `python3 scripts/gpu_serving_sweep.py {' '.join(sys.argv[1:])}`",
             f"model {args.model} ({args.dtype}, random weights) on {args.device}; ShareGPT, {args.requests} requests per "
             f"rate in each of {args.runs} client process(es), answers capped at {args.max_output_len} tokens; Poisson arrivals; SLO TTFT <= {args.slo_ttft_ms:g} ms, "
             f"TPOT <= {args.slo_tpot_ms:g} ms; phases {json.dumps({k: round(v) for k, v in phases.items()})}",
             f"environment: {', '.join(f'{k} {env.get(k)}' for k in ('gpu_name', 'driver', 'cuda', 'torch', 'transformers') if env.get(k))}",
             "", "| req/s offered | run | achieved | status | completed/failed | req/s | output tok/s | TTFT p50 / p99 (ms) | "
             "TPOT p50 / p99 (ms) | ITL p50 (ms) | goodput (req/s) | output lengths |", "|" + "---|" * 12]
    for r in recs:
        m = r.get("metrics") or {}

        def f(k, spec="{:.1f}", m=m):
            v = m.get(k)
            return "—" if v is None else spec.format(v)

        lines.append(f"| {f('offered_request_rate', '{:.2f}')} | {r.get('run', 0)} | {f('achieved_request_rate', '{:.2f}')} | "
                     f"{r['status']} | "
                     f"{m.get('completed', 0)}/{m.get('failed', 0)} | {f('request_throughput', '{:.3f}')} | "
                     f"{f('output_throughput')} | {f('ttft_median_ms')} / {f('ttft_p99_ms')} | "
                     f"{f('tpot_median_ms', '{:.2f}')} / {f('tpot_p99_ms', '{:.2f}')} | {f('itl_median_ms', '{:.2f}')} | "
                     f"{f('request_goodput', '{:.3f}')} | {(r.get('extra') or {}).get('output_len_check', '')[:60]} |")
    errors = [f"- rate {r['cell']['options']['request_rate']}: {r.get('error')}" for r in recs if r.get("error")]
    lines += ["", *errors, "", f"tables and dashboard: {report.get('markdown')}, {report.get('dashboard')}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
