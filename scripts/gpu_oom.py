"""GPU check of the OOM boundary search (issue #5): one H200, budget <= 6 minutes.

    python3 scripts/gpu_oom.py --out DIR            # on the GPU machine, from the repo root
    python3 scripts/gpu_oom.py --out DIR --cpu-smoke  # anywhere: fake backend + qwen-tiny on CPU

1. With a 24 GB cap (torch per-process memory fraction), the Qwen-7B-shaped hf bf16 (sdpa,
   dynamic cache) boundaries for 1024/1024 and 2048/2048 input/output lengths, with the number
   of probes and seconds per probe (each probe = a fresh worker: start, load, one pass).
2. Verification at 256/256 (the full 1024/1024 workload at batch ~8 would decode 1024 steps per
   run; 256/256 keeps it inside the budget): the full worst-case workload (every request at the
   max lengths, full output) at the probe boundary and one above, and each run's peak next to
   the probe's.
Writes DIR/oom.jsonl (every probe and run), DIR/oom-frontier.md, DIR/summary.json; prints a
short table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu-smoke", action="store_true", help="fake backend + qwen-tiny on CPU (logic check only)")
    ap.add_argument("--gpu-memory-gb", type=float, default=24.0)
    ap.add_argument("--budget-s", type=float, default=330.0, help="skip the verification if the searches used this much")
    ap.add_argument("--only-verify", action="store_true", help="skip the 1024/1024 and 2048/2048 searches")
    ap.add_argument("--verify-bounds", default=None,
                    help="LOWER,UPPER of the verification search (default 8,128 on the GPU); a tighter pair costs fewer probes")
    args = ap.parse_args()

    from bench.oom.probes import ProbeRunner, find_boundary
    from bench.oom.search import frontier_markdown, frontier_rows
    from bench.results import query
    from bench.results.store import ResultStore
    from bench.spec import Cell, WorkloadSpec

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "oom.jsonl"
    t_start = time.monotonic()
    wl = WorkloadSpec(name="placeholder", source="synthetic", input_len=1, output_len=1)
    if args.cpu_smoke:
        cap = 1.5
        base = Cell("fake", "qwen-tiny", "bf16", 1, wl, "cpu", tuple(sorted({
            "step_ms": 10.0, "step_ms_per_seq": 0.5, "prefill_ms_per_token": 0.05, "noise": 0.0, "slowdown": 1.0,
            "memory_gb": 0.0, "weights_gb": 1.0, "kv_bytes_per_token": 524288, "fail": "none", "seed": 0,
            "oom_flaky_band": 0.0}.items())))
        searches = [(64, 64, 1, 64), (128, 128, 1, 64)]
        verify = (32, 32, 1, 64)
    else:
        cap = args.gpu_memory_gb
        base = Cell("hf", "qwen-7b-shape", "bf16", 1, wl, "cuda",
                    (("attn_implementation", "sdpa"), ("batching", "dataset"), ("cache", "dynamic")))
        searches = [(1024, 1024, 1, 64), (2048, 2048, 1, 64)]
        verify = (256, 256, 8, 128)
    if args.verify_bounds:
        lo, hi = (int(x) for x in args.verify_bounds.split(","))
        verify = (*verify[:2], lo, hi)
    if args.only_verify:
        searches = []

    rows = []
    summary = {"device": None, "cap_gb": cap, "searches": [], "verification": None}
    for in_len, out_len, lower, upper in searches:
        runner = ProbeRunner(base, in_len, out_len, store, gpu_memory_gb=cap, redo=True, matrix_name="gpu-oom",
                             engines_dir=out / "engines", workload_cache=out / "workloads",
                             timeout_s=300, build_timeout_s=300)
        t0 = time.monotonic()
        b = find_boundary(runner, lower, upper, "grow")
        took = time.monotonic() - t0
        fit = b.outcome(b.largest_fit) if b.largest_fit else None
        entry = {"lengths": f"{in_len}/{out_len}", "largest_fit": b.largest_fit, "smallest_oom": b.smallest_oom,
                 "probes": len(b.probes), "seconds": took, "s_per_probe": took / len(b.probes),
                 "flaky": b.flaky_sizes, "peak_gb_at_fit": fit.peak_memory_gb if fit else None,
                 "probe_log": [(p.batch_size, p.status, p.peak_memory_gb, round(p.seconds, 2)) for p in b.probes]}
        summary["searches"].append(entry)
        print(json.dumps(entry), flush=True)

    in_len, out_len, lower, upper = verify
    if time.monotonic() - t_start < args.budget_s:
        summary["verification"] = verify_boundary(base, in_len, out_len, lower, upper, cap, store, out)
        print(json.dumps(summary["verification"]), flush=True)
    else:
        print(f"verification skipped: the searches took {time.monotonic() - t_start:.0f} s", flush=True)

    recs = query.load([store])
    envs = [r.environment for r in recs if r.environment]
    if envs:
        summary["device"] = envs[-1].get("gpu_name") or envs[-1].get("cpu")
        summary["torch"], summary["transformers"] = envs[-1].get("torch"), envs[-1].get("transformers")
    rows = frontier_rows(recs)
    (out / "oom-frontier.md").write_text(frontier_markdown(rows))
    summary["total_s"] = time.monotonic() - t_start
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    assert ResultStore(store).path.exists()

    print(f"\ndevice {summary['device']}, cap {cap:g} GB, total {summary['total_s']:.0f} s")
    print("| lengths | largest fit | smallest OOM | probes | s/probe | peak at fit (GB) | flaky |")
    print("|---|---|---|---|---|---|---|")
    for s in summary["searches"]:
        peak = "-" if s["peak_gb_at_fit"] is None else f"{s['peak_gb_at_fit']:.2f}"
        print(f"| {s['lengths']} | {s['largest_fit']} | {s['smallest_oom']} | {s['probes']} | {s['s_per_probe']:.1f} | "
              f"{peak} | {s['flaky'] or '-'} |")
    v = summary["verification"]
    if v:
        print(f"verification {v['lengths']}: probe boundary {v['probe_largest_fit']} (peak {v['probe_peak_gb']}); "
              f"full run at {v['probe_largest_fit']}: {v['full_at_fit']['status']} (peak {v['full_at_fit']['peak_gb']}), "
              f"at {v['probe_largest_fit'] + 1}: {v['full_above']['status']} (peak {v['full_above']['peak_gb']}); "
              f"agrees: {v['agrees']}")
    return 0


def verify_boundary(base, in_len, out_len, lower, upper, cap, store, out) -> dict:
    """Return the probe boundary at (in_len, out_len) and what full worst-case runs at it and one above did."""
    from dataclasses import replace

    from bench.execution.matrix import run_matrix
    from bench.oom.probes import ProbeRunner, find_boundary
    from bench.results import query
    from bench.spec import Matrix, RunSettings, with_workload

    runner = ProbeRunner(base, in_len, out_len, store, gpu_memory_gb=cap, redo=True, matrix_name="gpu-oom",
                         engines_dir=out / "engines", workload_cache=out / "workloads", timeout_s=300, build_timeout_s=300)
    b = find_boundary(runner, lower, upper, "grow")
    fit = b.largest_fit
    probe_peak = b.outcome(fit).peak_memory_gb if fit else None
    result = {"lengths": f"{in_len}/{out_len}", "probe_largest_fit": fit, "probe_smallest_oom": b.smallest_oom,
              "probe_peak_gb": probe_peak, "probes": len(b.probes)}
    if fit is None:
        return {**result, "agrees": None, "full_at_fit": {}, "full_above": {}}
    cells = []
    for size in (fit, fit + 1):
        # The full worst case: one full batch, every prompt at in_len, every output at out_len.
        cell = with_workload(base, name=f"full-{in_len}x{out_len}", source="synthetic", num_requests=size,
                             input_len=in_len, output_len=out_len, max_input_len=in_len,
                             max_total_len=in_len + out_len)
        cells.append(replace(cell, max_batch_size=size))
    matrix = Matrix(name="gpu-oom-full", cells=tuple(cells),
                    settings=RunSettings(trials=1, warmup=0, timeout_s=300, build_timeout_s=300, gpu_memory_gb=cap))
    full_store = out / "full.jsonl"
    t0 = time.monotonic()
    run_matrix(matrix, full_store, redo=True, engines_dir=out / "engines", workload_cache=out / "workloads",
               show_progress=False)
    by_size = {}
    for rec in query.load([full_store]):
        by_size[rec.cell["max_batch_size"]] = {
            "status": rec.status, "peak_gb": rec.metric("peak_memory_gb"), "seconds": rec.metric("duration_s")}
    at_fit, above = by_size.get(fit, {}), by_size.get(fit + 1, {})
    # Agreement: the full run fits where the probe fits; one above may still fit (the probe is
    # conservative by its longer prefill), which is reported, not hidden.
    return {**result, "full_at_fit": at_fit, "full_above": above, "full_runs_s": time.monotonic() - t0,
            "agrees": at_fit.get("status") == "ok" and above.get("status") == "oom"}


if __name__ == "__main__":
    raise SystemExit(main())
