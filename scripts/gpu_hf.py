"""The hf backend at full strength on one GPU: configurations, harness vs bare generate, SOL, batch sweep.

Run from the repo root:  python3 scripts/gpu_hf.py --out DIR      (one H200, budget ~7 min)
                         python3 scripts/gpu_hf.py --out DIR --cpu-smoke   (qwen-tiny on CPU)

Qwen-7B-shaped model (random weights), bf16 (--precision), synthetic 128 input / 256 output tokens, batch 1:
  (a) harness measurements (bench's own matrix runner, worker subprocesses, 3 trials) for the
      best configuration (static cache + compile reduce-overhead + the harness's decode loop),
      then the same compiled step under transformers' generate, int8 weight-only (torchao) if
      importable, eager static cache and dynamic cache;
  (b) for the best and the generate cells, a bare timed loop in this process (DecodeLoop /
      `model.generate`) with the cell's settings, and the ratio harness / bare;
  (c) the measured copy bandwidth and the decode speed-of-light it implies;
  (d) a bf16 max_batch_size sweep with the best configuration (one batch per point), as many
      points as the remaining budget allows (each new batch size compiles once).
Phases run most-important first and each is skipped (with a note) when the remaining budget
cannot cover it. Writes results.json, results.md, sweep.html and the store under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def matrix_for(model, device, precision, workloads: dict, cells: list[dict], trials: int, timeout_s: float = 600):
    """Return a Matrix of the given (workload name, max_batch_size, options) cells."""
    from bench.spec import parse_matrix

    first = cells[0]
    data = {
        "backends": ["hf"], "model": model, "precisions": [precision], "device": device,
        "max_batch_sizes": [first["bs"]], "workloads": [first["workload"]], "workload": workloads,
        "options": first["options"], "trials": trials, "warmup": 1, "timeout_s": timeout_s,
        "include": [{"workload": [c["workload"]], "max_batch_size": [c["bs"]], "precision": [c.get("precision", precision)],
                     **c["options"]} for c in cells[1:]],
    }
    return parse_matrix(data)


def harness(m, store: Path, engines: Path) -> list[dict]:
    """Return the records of running matrix m through bench's runner (worker subprocesses)."""
    from bench.execution.matrix import run_matrix
    from bench.results import query

    summary = run_matrix(m, store, engines_dir=engines, workload_cache=store.parent / "workloads", show_progress=False,
                         redo=True)
    ids = {c.cell_id for c in m.cells}
    # this invocation's records, as the stored lines (dicts) the summaries below read
    return [r.to_json() for r in query.load([store]) if r.cell_id in ids and r.context.run_id == summary.run_id]


def summarize_cell(records: list[dict], cell) -> dict:
    """Return the mean figures of a cell's newest trials (status ok) and its cold costs."""
    import statistics

    mine = [r for r in records if r["cell_id"] == cell.cell_id]
    ok = [r for r in mine if r["status"] == "ok"]
    out = {"label": cell.label, "trials_ok": len(ok), "status": sorted({r["status"] for r in mine})}
    if not ok:
        out["error"] = (mine[-1].get("error") or "")[:600] if mine else "no record"
        return out
    tps = [r["metrics"]["output_throughput"] for r in ok]
    m, x = ok[-1]["metrics"], ok[-1].get("extra", {})
    out.update({
        "output_tok_s": statistics.fmean(tps),
        "output_tok_s_spread_pct": 100 * (max(tps) - min(tps)) / statistics.fmean(tps),
        "tpot_ms": statistics.fmean(r["metrics"]["tpot_mean_ms"] or 0 for r in ok),
        "ttft_ms": statistics.fmean(r["metrics"]["ttft_mean_ms"] or 0 for r in ok),
        "sol_pct": m.get("sol_pct"),
        "sol_output_tok_s": x.get("sol_output_throughput"),
        "copy_bandwidth_tb_s": (x.get("copy_bandwidth_bytes_s") or 0) / 1e12 or None,
        "peak_memory_gb": m.get("peak_memory_gb"),
        "avg_power_w": m.get("avg_power_w"),
        "tokens_per_joule": m.get("tokens_per_joule"),
        "sm_clock_mhz_median": m.get("sm_clock_mhz_median"),
        "warmup_first_pass_s": (x.get("warmup") or {}).get("first_pass_s"),
        "weight_gb": x.get("weight_bytes", 0) / 1e9,
        "streamed_weight_gb": (x.get("streamed_weight_bytes") or 0) / 1e9 or None,
        "inductor": x.get("inductor"),
    })
    return out


def bare_generate(cell, workload_file: Path, engines: Path, reps: int) -> dict:
    """Return tok/s of a bare timed loop with the cell's settings (this process).

    decode_loop=generate: `model.generate`; decode_loop=harness: the same DecodeLoop.generate
    the backend calls, without the runner, worker, per-request bookkeeping or telemetry.
    """
    import torch

    from bench.backends.hf import HFBackend, static_cache_len
    from bench.workloads.workload import Workload, batches

    requests = Workload.from_json(workload_file.read_text()).requests
    backend = HFBackend()
    loaded = backend.load(backend.build(cell.build_key(), engines))
    plan = batches(list(requests), cell.max_batch_size)
    cache_len = static_cache_len(plan) if loaded.cache == "static" else None
    inputs = []
    for b in plan:
        n = max(r.input_len for r in b)
        ids = torch.full((len(b), n), loaded.pad_id, dtype=torch.long)
        mask = torch.zeros((len(b), n), dtype=torch.long)
        for i, r in enumerate(b):
            ids[i, n - r.input_len:] = torch.tensor(r.prompt_ids)
            mask[i, n - r.input_len:] = 1
        gen = loaded.generate_kwargs(max(r.output_len for r in b), cache_len)
        gen["min_new_tokens"] = gen["max_new_tokens"]
        inputs.append((ids.to(loaded.device), mask.to(loaded.device), gen))

    def sync():
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device)

    def once(ids, mask, gen):
        if loaded.loop is not None:
            return loaded.loop.generate(ids, mask, gen["max_new_tokens"], cache_len, [], loaded.device.type == "cuda")
        return loaded.model.generate(input_ids=ids, attention_mask=mask, **gen)[:, ids.shape[1]:]

    t0 = time.perf_counter()
    with torch.inference_mode():
        once(*inputs[0])  # warm-up
    sync()
    warm_s = time.perf_counter() - t0
    rates, tokens = [], sum(r.output_len for r in requests)
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            for ids, mask, gen in inputs:
                assert once(ids, mask, gen).shape[1] == gen["max_new_tokens"]
        sync()
        rates.append(tokens / (time.perf_counter() - t0))
    loop = "harness" if loaded.loop is not None else "generate"
    loaded.close()
    return {"output_tok_s": sum(rates) / len(rates), "runs_tok_s": rates, "warmup_s": warm_s, "loop": loop}


def sweep_figure(results: dict, path: Path) -> bool:
    """Write the batch sweep (output tok/s and % of speed-of-light against max_batch_size) as HTML."""
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        return False
    pts = [p for p in results.get("sweep", []) if p.get("output_tok_s")]
    xs = [p["max_batch_size"] for p in pts]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.65, 0.35])
    fig.add_trace(go.Scatter(x=xs, y=[p["output_tok_s"] for p in pts], mode="lines+markers", name="output tok/s"), 1, 1)
    fig.add_trace(go.Scatter(x=xs, y=[p.get("sol_output_tok_s") for p in pts], mode="lines", line_dash="dot",
                             name="speed-of-light tok/s"), 1, 1)
    fig.add_trace(go.Scatter(x=xs, y=[p.get("tpot_ms") for p in pts], mode="lines+markers", name="TPOT ms"), 2, 1)
    fig.update_layout(title=f"hf: {results.get('model')}, {results.get('input_len')} in / {results.get('output_len')} out, "
                            "static cache + compile, harness decode loop", width=900, height=620)
    fig.update_xaxes(type="log", tickvals=xs)
    fig.update_xaxes(title="max_batch_size", row=2, col=1)
    fig.update_yaxes(type="log", title="output tok/s", row=1, col=1)
    fig.update_yaxes(title="TPOT (ms)", rangemode="tozero", row=2, col=1)
    fig.write_html(path, include_plotlyjs=True, config={"displayModeBar": False})
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--cpu-smoke", action="store_true", help="qwen-tiny on CPU, tiny lengths: checks the script's logic")
    ap.add_argument("--budget-s", type=float, default=400.0, help="wall-clock budget; later phases are skipped to fit")
    ap.add_argument("--sweep", default="1,2,4,8,16,32,64", help="max_batch_size points of the bf16 sweep")
    ap.add_argument("--requests", type=int, default=3, help="requests per batch-1 cell")
    ap.add_argument("--phases", default="best,bare,generate,others,sweep",
                    help="which phases to run, in this order (results.json is rewritten after each)")
    ap.add_argument("--others", default="int8wo,static-eager,dynamic", help="the 'others' phase's cells, in order")
    ap.add_argument("--cell-timeout-s", type=float, default=240.0, help="a cell's worker is stopped after this")
    ap.add_argument("--compile-mode", default="reduce-overhead", choices=("reduce-overhead", "max-autotune"),
                    help="compile mode of the best, generate and sweep cells (int8wo stays reduce-overhead)")
    ap.add_argument("--freeze", default="off", choices=("off", "on"),
                    help="freeze_weights of the best, generate and sweep cells (q/k/v and gate/up concatenated)")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "int8wo", "int4wo"),
                    help="precision of the best, generate and sweep cells")
    ap.add_argument("--quant-kernels", default="torchao", choices=("torchao", "gemlite"),
                    help="quant_kernels of the best, generate and sweep cells (torchao precisions)")
    ap.add_argument("--engines", type=Path, default=ROOT / "engines", help="engine/compile cache (second runs reuse it)")
    ap.add_argument("--plot-only", type=Path, help="redraw sweep.html under --out from this results.json; run nothing")
    args = ap.parse_args()
    if args.plot_only:
        args.out.mkdir(parents=True, exist_ok=True)
        return 0 if sweep_figure(json.loads(args.plot_only.read_text()), args.out / "sweep.html") else 1
    phases = set(args.phases.split(","))
    t_start = time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    store = out / "store.jsonl"
    if args.cpu_smoke:
        model, device, precision, n_in, n_out = "qwen-tiny", "cpu", "bf16", 16, 8
        compiled = {"cache": "static", "compile": "off"}  # compile needs a GPU
    else:
        model, device, precision, n_in, n_out = "qwen-7b-shape", "cuda", args.precision, 128, 256
        compiled = {"cache": "static", "compile": args.compile_mode}
        if args.freeze == "on":
            compiled["freeze_weights"] = "on"
        if args.quant_kernels != "torchao":
            compiled["quant_kernels"] = args.quant_kernels
    # The best configuration: the compiled step driven by the harness's own loop (no host sync
    # per step); "generate": the same compiled step driven by transformers' model.generate.
    best = {**compiled, "decode_loop": "harness"}
    generate = {**compiled, "decode_loop": "generate"}
    sweep = [int(x) for x in args.sweep.split(",") if x]
    wl = lambda n: {"source": "synthetic", "input_len": n_in, "output_len": n_out, "num_requests": n}  # noqa: E731
    workloads = {"b1": wl(args.requests), **{f"s{b}": wl(b) for b in sweep if b > 1}}
    notes: list[str] = []
    results: dict = {"device": device, "model": model, "input_len": n_in, "output_len": n_out, "cells": {}, "notes": notes}

    def left() -> float:
        return args.budget_s - (time.monotonic() - t_start)

    def checkpoint(line: str) -> None:
        # A killed run still leaves what it measured.
        print(f"[{time.monotonic() - t_start:.0f} s] {line}", flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))

    def record(name, m, recs):
        for c in m.cells:
            key = name if len(m.cells) == 1 else f"{name}-bs{c.max_batch_size}"
            results["cells"][key] = summarize_cell(recs, c)

    def cell_b1(name, opts, prec=precision, trials=3):
        m = matrix_for(model, device, prec, workloads, [{"workload": "b1", "bs": 1, "options": opts}], trials=trials,
                       timeout_s=args.cell_timeout_s)
        record(name, m, harness(m, store, args.engines))
        checkpoint(f"{name}: {results['cells'][name].get('output_tok_s')} tok/s")
        return m

    def bare(name, m):
        from bench.workloads.workload import cached_workload

        _, wfile = cached_workload(m.cells[0].workload, out / "workloads")
        b = bare_generate(m.cells[0], wfile, args.engines, reps=3)
        results[f"bare_{name}"] = b
        tok_s = results["cells"][name].get("output_tok_s")
        if tok_s:
            results[f"harness_over_bare_{name}"] = tok_s / b["output_tok_s"]
        checkpoint(f"bare {name} ({b['loop']}): {b['output_tok_s']} tok/s; harness/bare {results.get(f'harness_over_bare_{name}')}")

    # (a) the best configuration at batch 1 (the target figure) and its bare loop.
    b1: dict = {}
    if "best" in phases:
        m_best = cell_b1("best", best)
        b1 = results["cells"]["best"]
        if "bare" in phases and b1.get("trials_ok") and (left() > 90 or args.cpu_smoke):
            bare("best", m_best)
    # (b) transformers' generate driving the same compiled step, and bare model.generate.
    if "generate" in phases and (left() > 150 or args.cpu_smoke):
        m_gen = cell_b1("generate", generate)
        if "bare" in phases and results["cells"]["generate"].get("trials_ok") and (left() > 90 or args.cpu_smoke):
            bare("generate", m_gen)
    elif "generate" in phases:
        notes.append(f"generate cell skipped: {left():.0f} s left of the budget")

    # (c) other configurations at batch 1.
    ro = {k: v for k, v in best.items() if k != "quant_kernels"}
    ro = {**ro, "compile": "reduce-overhead"} if not args.cpu_smoke else ro
    gl = {**ro, "quant_kernels": "gemlite"}
    catalogue = {"int8wo": (ro, "int8wo"), "int8wo-generate": ({**ro, "decode_loop": "generate"}, "int8wo"),
                 "int8wo-gemlite": (gl, "int8wo"), "int4wo": (ro, "int4wo"), "fp8": (ro, "fp8"),
                 "int8wo-gemlite-frozen": ({**gl, "freeze_weights": "on"}, "int8wo"),
                 "best-cd": ({**best, "compile_tuning": "coordinate-descent"}, precision),
                 "int8wo-cd": ({**ro, "compile_tuning": "coordinate-descent"}, "int8wo"),
                 "int8wo-frozen": ({**ro, "freeze_weights": "on"}, "int8wo"),
                 "static-eager": ({"cache": "static", "compile": "off"}, precision),
                 "dynamic": ({"cache": "dynamic", "compile": "off"}, precision)}
    others = [o for o in args.others.split(",") if o] if "others" in phases else []
    for name in others:
        opts, prec = catalogue[name]
        if prec in ("int8wo", "int4wo", "fp8"):  # its kernels' package must be installed, and a GPU
            from importlib.util import find_spec

            package = "gemlite" if opts.get("quant_kernels") == "gemlite" else "torchao"
            if find_spec(package) is None:
                notes.append(f"{name} skipped: {package} is not installed (pip install the wheel built for this torch)")
                continue
            if args.cpu_smoke:
                continue
        if args.cpu_smoke and opts.get("compile_tuning"):
            continue  # tuning needs compile, compile needs a GPU
        if left() < 75 and not args.cpu_smoke:
            notes.append(f"{name} skipped: {left():.0f} s left of the budget")
            continue
        cell_b1(name, opts, prec, trials=2)

    # (d) sweep, same configuration, one worker: each new batch size compiles its own graph, so
    # points are taken in an order that shows the curve's shape early and only as many as fit.
    cold = b1.get("warmup_first_pass_s") or 40.0
    order = sorted((b for b in sweep if b > 1), key=lambda b: [64, 8, 32, 2, 16, 4].index(b) if b in (64, 8, 32, 2, 16, 4) else 99)
    fit = max(0, int((left() - 45) // (cold + 8))) if not args.cpu_smoke else len(order)
    if "sweep" not in phases:
        fit, order = 0, []
    chosen, dropped = sorted(order[:fit]), sorted(order[fit:])
    if dropped:
        notes.append(f"sweep points {dropped} skipped: {left():.0f} s left, about {cold + 8:.0f} s per point")
    results["sweep"] = [{"max_batch_size": 1, **b1}] if b1 else []
    if chosen:
        m_sweep = matrix_for(model, device, precision, workloads,
                             [{"workload": f"s{b}", "bs": b, "options": best} for b in chosen], trials=3)
        recs = harness(m_sweep, store, args.engines)
        results["sweep"] += [{"max_batch_size": c.max_batch_size, **summarize_cell(recs, c)} for c in m_sweep.cells]
    results["elapsed_s"] = time.monotonic() - t_start
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    lines = [f"# hf backend: {model}, {device}, {n_in} in / {n_out} out, synthetic", "",
             "| cell | tok/s | spread % | TPOT ms | % SOL | SOL tok/s | first pass s | peak GB | W | tok/J |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def fmt(v, f="{:.1f}"):
        return "-" if v is None else f.format(v)

    for p in results["sweep"][1 if b1 else 0:]:
        results["cells"][f"sweep-bs{p['max_batch_size']}"] = p
    for name, c in results["cells"].items():
        lines.append(f"| {name} | {fmt(c.get('output_tok_s'))} | {fmt(c.get('output_tok_s_spread_pct'))} | "
                     f"{fmt(c.get('tpot_ms'), '{:.2f}')} | {fmt(c.get('sol_pct'), '{:.0f}')} | {fmt(c.get('sol_output_tok_s'))} | "
                     f"{fmt(c.get('warmup_first_pass_s'))} | {fmt(c.get('peak_memory_gb'))} | {fmt(c.get('avg_power_w'), '{:.0f}')} | "
                     f"{fmt(c.get('tokens_per_joule'), '{:.2f}')} |" + (f" {c['status']}" if not c.get("trials_ok") else ""))
    for name in ("best", "generate"):
        if f"bare_{name}" in results:
            b = results[f"bare_{name}"]
            lines += ["", f"bare {b['loop']} loop for {name}: {b['output_tok_s']:.1f} tok/s; "
                      f"harness/bare = {results.get(f'harness_over_bare_{name}', float('nan')):.4f}"]
    bw = next((c.get("copy_bandwidth_tb_s") for c in results["cells"].values() if c.get("copy_bandwidth_tb_s")), None)
    lines += ["", f"copy bandwidth (read+write): {fmt(bw, '{:.2f}')} TB/s", "", *[f"- {n}" for n in notes],
              "", f"elapsed {results['elapsed_s']:.0f} s"]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    if not sweep_figure(results, out / "sweep.html"):
        notes.append("plotly missing: no sweep.html")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
