"""The openai backend beside a peer client (guidellm) on the same server, with the server's own log as ground truth.

Each tool gets a fresh server of the same kind and settings and replays the same requests
(prompts decoded from one bench workload, the same output length, the same concurrency);
then one table prints, per metric, the figure the paced server logged (handler start and every
chunk write, on CLOCK_MONOTONIC), bench's and guidellm's. Figures are computed from each
tool's per-request data by the same formulas (TPOT = (E2E - TTFT) / (tokens - 1), vLLM's and
guidellm's "ITL"; ITL = every gap between token chunks), and each tool's own headline figures
are kept in the JSON beside them.

guidellm is a benchmark-only dependency, installed in its own virtualenv:

    python3 -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install guidellm==0.8.1
    python3 scripts/serving_peer.py --guidellm /tmp/gvenv/bin/guidellm --server paced --out /tmp/peer
    python3 scripts/serving_peer.py --guidellm /tmp/gvenv/bin/guidellm --server transformers --out /tmp/peer-tf

`--server transformers` runs `transformers serve` (continuous batching) on a random-weight
qwen-tiny; it logs no per-token times, so its ground-truth column is empty.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start_paced(out: Path, tool: str, args) -> tuple[subprocess.Popen, str, Path]:
    """Return a paced server process (recording), its URL and its record file."""
    record = out / f"{tool}-server-record.json"
    cmd = [sys.executable, "-m", "bench.serving.paced_server", "--port", "0", "--ttft-ms", str(args.ttft_ms),
           "--itl-ms", str(args.itl_ms), "--record-file", str(record)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"paced server did not start: {line!r}")
    return proc, line.split()[1], record


def stop_paced(proc: subprocess.Popen) -> None:
    proc.stdin.close()  # it writes its record file and exits
    proc.wait(timeout=60)


def workload_spec(args) -> dict:
    return {"source": "synthetic", "input_len": args.input_len, "output_len": args.output_len,
            "num_requests": args.requests, "seed": 0}


def run_bench(url: str, out: Path, args, model: str) -> dict:
    """Return bench's per-request rows and headline metrics of one openai pass against url."""
    from bench.results.store import ResultStore
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix

    store = out / "bench.jsonl"
    store.unlink(missing_ok=True)
    matrix = parse_matrix({
        "name": "peer", "backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"],
        "max_batch_sizes": [args.concurrency], "workloads": ["peer"], "device": "cpu", "trials": 1, "warmup": 1,
        "timeout_s": 1800, "workload": {"peer": workload_spec(args)}, "options": {"base_url": url, "model_name": model},
    })
    summary = run_matrix(matrix, store, show_progress=False)
    (rec,) = ResultStore(store).records()
    if rec["status"] != "ok":
        raise RuntimeError(f"bench pass: {summary.statuses}: {rec.get('error')}")
    m = rec["metrics"]
    rows = [{"ttft_ms": s["ttft_ms"], "e2el_ms": s["e2el_ms"], "out": s["out"]} for s in rec["samples"] if not s["error"]]
    return {"rows": rows, "duration_s": m["duration_s"], "itl_mean_ms": m["itl_mean_ms"], "own": {
        k: m[k] for k in ("ttft_mean_ms", "ttft_median_ms", "tpot_mean_ms", "itl_mean_ms", "e2el_mean_ms",
                          "request_throughput", "output_throughput")}, "extra": {
        k: rec["extra"].get(k) for k in ("sent", "server_accepts", "output_tokens_source", "output_len_check")}}


def prompts_file(out: Path, args) -> Path:
    """Write the workload's prompts (decoded with its tokenizer) as guidellm JSON data; return the path."""
    from bench.spec.cells import WorkloadSpec
    from bench.workloads.prompt_text import decoder
    from bench.workloads.workload import build_workload

    wl = build_workload(WorkloadSpec.from_dict("peer", workload_spec(args)))
    decode = decoder("qwen-7b-chat")
    path = out / "prompts.json"
    path.write_text(json.dumps([{"prompt": decode(r.prompt_ids)} for r in wl.requests]))
    return path


def run_guidellm(url: str, out: Path, args, model_dir: Path, model: str, data: Path) -> dict:
    """Return guidellm's per-request rows and headline figures of one run against url."""
    result = out / "guidellm.json"
    result.unlink(missing_ok=True)
    cmd = [args.guidellm, "run",
           "--backend", f"kind=openai_http,target={url},model={model},request_format=/v1/completions,"
                      f"max_tokens={args.output_len}",
           "--profile", f"kind=concurrent,streams={args.concurrency}",
           "--constraint", f"kind=max_requests,count={args.requests}",
           "--data", f"kind=json_file,path={data}",
           "--tokenizer", f"kind=hf_auto,model={model_dir}",
           "--output", f"kind=json,path={result}", "--disable-console-interactive"]
    log = out / "guidellm.log"
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=3600).returncode
    if rc != 0 or not result.exists():
        raise RuntimeError(f"guidellm exited {rc}; see {log}")
    bench = json.loads(result.read_text())["benchmarks"][0]
    reqs = bench["requests"]["successful"]
    rows = [{"ttft_ms": r["time_to_first_token_ms"], "e2el_ms": r["request_latency"] * 1000, "out": r["output_tokens"]}
            for r in reqs]
    window = max(r["request_end_time"] for r in reqs) - min(r["request_start_time"] for r in reqs)
    m = bench["metrics"]
    own = {"ttft_mean_ms": m["time_to_first_token_ms"]["successful"]["mean"],
           "itl_mean_ms (guidellm: (E2E-TTFT)/(n-1), token-weighted)": m["inter_token_latency_ms"]["successful"]["mean"],
           "tpot_mean_ms (guidellm: E2E/n)": m["time_per_output_token_ms"]["successful"]["mean"],
           "e2el_mean_ms": m["request_latency"]["successful"]["mean"] * 1000,
           "requests_per_second": m["requests_per_second"]["successful"]["mean"],
           "output_tokens_per_second": m["output_tokens_per_second"]["successful"]["mean"],
           "errored": len(bench["requests"]["errored"]), "incomplete": len(bench["requests"]["incomplete"])}
    return {"rows": rows, "duration_s": window, "itl_mean_ms": None, "own": own}


def server_truth(record: Path, n: int) -> dict | None:
    """Return the paced server's own figures of the last n requests it served (None without a record)."""
    if not record or not record.exists():
        return None
    log = [e for e in json.loads(record.read_text()) if e["t_chunks"]][-n:]
    rows, gaps = [], []
    for e in log:
        c = e["t_chunks"]
        rows.append({"ttft_ms": (c[0] - e["t_recv"]) * 1000, "e2el_ms": (c[-1] - e["t_recv"]) * 1000, "out": len(c)})
        gaps += [(b - a) * 1000 for a, b in zip(c, c[1:], strict=False)]
    window = max(e["t_chunks"][-1] for e in log) - min(e["t_recv"] for e in log)
    return {"rows": rows, "duration_s": window, "itl_mean_ms": statistics.fmean(gaps) if gaps else None}


def figures(side: dict | None) -> dict:
    """Return TTFT/TPOT/ITL/E2E/throughput of one side's per-request rows, by one set of formulas."""
    if side is None:
        return {}
    rows = side["rows"]
    tpot = [(r["e2el_ms"] - r["ttft_ms"]) / (r["out"] - 1) for r in rows if r["out"] > 1]
    return {
        "requests": len(rows),
        "TTFT mean (ms)": statistics.fmean(r["ttft_ms"] for r in rows),
        "TTFT median (ms)": statistics.median(r["ttft_ms"] for r in rows),
        "TPOT mean (ms)": statistics.fmean(tpot) if tpot else None,
        "ITL mean (ms, every gap)": side["itl_mean_ms"],
        "E2E mean (ms)": statistics.fmean(r["e2el_ms"] for r in rows),
        "E2E median (ms)": statistics.median(r["e2el_ms"] for r in rows),
        "req/s": len(rows) / side["duration_s"],
        "output tok/s": sum(r["out"] for r in rows) / side["duration_s"],
    }


def table(columns: dict[str, dict]) -> str:
    names = list(columns)
    keys = [k for k in next(c for c in columns.values() if c)]
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for k in keys:
        cells = []
        for n in names:
            v = columns[n].get(k)
            cells.append("—" if v is None else (f"{v:.0f}" if k == "requests" else f"{v:.3f}" if "/s" in k else f"{v:.2f}"))
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--guidellm", required=True, help="the guidellm executable (its own virtualenv)")
    p.add_argument("--server", choices=("paced", "transformers"), default="paced")
    p.add_argument("--out", required=True)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--ttft-ms", type=float, default=50.0, help="paced server: time to first token")
    p.add_argument("--itl-ms", type=float, default=10.0, help="paced server: time between tokens")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from bench.serving import transformers_serve
    from bench.serving.model_dir import write_model_dir

    model_dir = out / "qwen-tiny"
    if not (model_dir / "tokenizer.json").exists():
        write_model_dir("qwen-tiny", model_dir, dtype="float32")  # guidellm's tokenizer; transformers serve's model
    data = prompts_file(out, args)
    sides: dict[str, dict | None] = {}
    truth: dict[str, dict | None] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for tool in ("bench", "guidellm"):
        if args.server == "paced":
            proc, url, record = start_paced(out, tool, args)
        else:
            srv = transformers_serve.start(model_dir, out / f"{tool}-server.log", check_flags=False,
                                           flags={"--cb-num-blocks": "256", "--cb-max-batch-tokens": "1024"})
            url, record = srv.base_url, None
        model = "test-model" if args.server == "paced" else str(model_dir)  # the name each server serves
        try:
            sides[tool] = (run_bench(url, out, args, model) if tool == "bench"
                           else run_guidellm(url, out, args, model_dir, model, data))
        finally:
            stop_paced(proc) if args.server == "paced" else srv.stop()
        truth[tool] = server_truth(record, args.requests) if record else None
    columns = {"server log (bench's run)": figures(truth["bench"]), "bench openai": figures(sides["bench"]),
               "server log (guidellm's run)": figures(truth["guidellm"]), "guidellm 0.8.1": figures(sides["guidellm"])}
    if args.server != "paced":
        columns = {k: v for k, v in columns.items() if not k.startswith("server log")}
    title = (f"{args.server} server, {args.requests} requests, concurrency {args.concurrency}, "
             f"{args.input_len} in / {args.output_len} out" +
             (f", server TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms" if args.server == "paced" else ""))
    text = f"{title} ({started})\n\n{table(columns)}\n"
    print(text)
    (out / "peer.md").write_text(text)
    (out / "peer.json").write_text(json.dumps({"args": vars(args), "columns": columns,
                                               "own": {k: v["own"] for k, v in sides.items()},
                                               "bench_extra": sides["bench"]["extra"]}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
