"""Throughput and timing accuracy of the openai backend's streaming client; prints figures.

Targets (issue #10): >= 1,000 requests/s and >= 20,000 streamed chunks/s against the local test
server, TTFT error < 1 ms, and the client's own CPU time per request. The server runs in its
own process (python -m bench.serving.paced_server) so client and server do not share an event
loop or the GIL. TTFT error = client TTFT (send -> first chunk read) - server TTFT (handler
start -> first chunk written), matched per request by a prompt tag, on CLOCK_MONOTONIC, which
both processes read through time.perf_counter on Linux. It therefore includes loopback
transfer and the server's HTTP parsing: an upper bound on the client's own error. The
client-side TTFT error (server writes the first chunk -> client records it) isolates the
client's part: response transit, aiohttp and SSE parsing.

    python3 scripts/bench_openai_client.py            # ~30 s
    python3 scripts/bench_openai_client.py --quick    # ~10 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.serving.client import ClientConfig, ServeRequest, replay  # noqa: E402


def start_server(*args: str, record_file: str | None = None) -> tuple[subprocess.Popen, str]:
    """Return the server process and its base URL once it listens."""
    cmd = [sys.executable, "-m", "bench.serving.paced_server", "--port", "0", *args]
    if record_file:
        cmd += ["--record-file", record_file]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"test server did not start: {line!r}")
    return proc, line.split()[1]


def stop_server(proc: subprocess.Popen) -> None:
    proc.stdin.close()  # the server exits when stdin closes (and writes its record file)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def throughput(n: int, max_tokens: int, concurrency: int, server_args: tuple[str, ...]) -> dict:
    """Return requests/s, chunks/s and client CPU per request of one replay against a fresh server."""
    proc, url = start_server(*server_args)
    try:
        cfg = ClientConfig(url, model="test-model", timeout_s=60)
        # warm the server's code paths (not measured)
        asyncio.run(replay(cfg, [ServeRequest(f"w{i}", [i], 1, max_tokens) for i in range(concurrency)], concurrency))
        reqs = [ServeRequest(f"r{i}", [i % 1000, 7, 7, 7], 4, max_tokens) for i in range(n)]
        timings, st = asyncio.run(replay(cfg, reqs, concurrency))
    finally:
        stop_server(proc)
    failed = sum(t.error is not None for t in timings)
    dur = st.ended - st.started
    return {"requests": n, "max_tokens": max_tokens, "concurrency": concurrency, "failed": failed,
            "duration_s": dur, "req_per_s": (n - failed) / dur, "chunks_per_s": st.chunks / dur,
            "client_cpu_ms_per_request": st.client_cpu_s * 1000 / n, "client_cpu_s": st.client_cpu_s,
            "client_cpu_share": st.client_cpu_s / dur,
            # what one fully used core would sustain: the client's bound when the CPU is shared
            "req_per_client_cpu_s": n / st.client_cpu_s, "chunks_per_client_cpu_s": st.chunks / st.client_cpu_s}


def ttft_error(n: int, concurrency: int, ttft_ms: float, itl_ms: float) -> dict:
    """Return client-minus-server TTFT and ITL differences (ms) over n warm-connection requests."""
    with tempfile.TemporaryDirectory() as tmp:
        rec = str(Path(tmp) / "log.json")
        proc, url = start_server("--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), record_file=rec)
        try:
            cfg = ClientConfig(url, model="test-model", timeout_s=60)
            reqs = [ServeRequest(f"r{i}", [i], 1, 8) for i in range(n)]
            timings, _ = asyncio.run(replay(cfg, reqs, concurrency))
        finally:
            stop_server(proc)
        log = {e["prompt"][0]: e for e in json.loads(Path(rec).read_text())}
    ttft_err, itl_err, first_delay = [], [], []
    for i, t in enumerate(timings):
        if i < concurrency or t.error:  # the first `concurrency` requests open their connections
            continue
        e = log[i]
        ttft_err.append(((t.token_times[0] - t.start) - (e["t_chunks"][0] - e["t_recv"])) * 1000)
        # The client's own share: first chunk written by the server -> recorded by the client.
        first_delay.append((t.token_times[0] - e["t_chunks"][0]) * 1000)
        c, s = t.token_times, e["t_chunks"]
        itl_err += [((c[k + 1] - c[k]) - (s[k + 1] - s[k])) * 1000 for k in range(len(c) - 1)]
    q = statistics.quantiles(ttft_err, n=100)
    qi = statistics.quantiles([abs(x) for x in itl_err], n=100)
    return {"requests": len(ttft_err), "ttft_ms": ttft_ms, "itl_ms": itl_ms,
            "ttft_err_median_ms": statistics.median(ttft_err), "ttft_err_p90_ms": q[89], "ttft_err_p99_ms": q[98],
            "ttft_err_max_ms": max(ttft_err), "itl_abs_err_median_ms": statistics.median(itl_err and [abs(x) for x in itl_err]),
            "itl_abs_err_p99_ms": qi[98],
            "first_token_delay_median_ms": statistics.median(first_delay),
            "first_token_delay_p99_ms": statistics.quantiles(first_delay, n=100)[98]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    k = 1 if args.quick else 3
    load = os.getloadavg()[0]
    rows = {
        "requests (1 token each, c=64)": throughput(1000 * k, 1, 64, ()),
        "chunks (100 tokens each, c=64)": throughput(100 * k, 100, 64, ()),
        "paced (200 tok, itl 2 ms, c=128)": throughput(128 * k, 200, 128, ("--itl-ms", "2")),
    }
    acc = ttft_error(100 * k, 4, 20.0, 5.0)
    out = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "loadavg_1min_before": load,
           "python": sys.version.split()[0], "throughput": rows, "accuracy": acc}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    print(f"cpus={os.cpu_count()} loadavg(1 min) before={load:.2f} python={out['python']}")
    print(f"{'scenario':34} {'req/s':>7} {'chunks/s':>8} {'cpu ms/req':>10} {'client cpu %':>12} "
          f"{'req/cpu-s':>9} {'chunks/cpu-s':>12} {'failed':>6}")
    for name, r in rows.items():
        print(f"{name:34} {r['req_per_s']:7.0f} {r['chunks_per_s']:8.0f} {r['client_cpu_ms_per_request']:10.3f} "
              f"{100 * r['client_cpu_share']:12.0f} {r['req_per_client_cpu_s']:9.0f} {r['chunks_per_client_cpu_s']:12.0f} "
              f"{r['failed']:6d}")
    print(f"TTFT error (client - server, ms) over {acc['requests']} warm requests, server ttft {acc['ttft_ms']} ms: "
          f"median {acc['ttft_err_median_ms']:.3f}, p90 {acc['ttft_err_p90_ms']:.3f}, p99 {acc['ttft_err_p99_ms']:.3f}, "
          f"max {acc['ttft_err_max_ms']:.3f}")
    print(f"client-side TTFT error (server writes first chunk -> client records it, ms): median "
          f"{acc['first_token_delay_median_ms']:.3f}, p99 {acc['first_token_delay_p99_ms']:.3f}")
    print(f"ITL |error| (ms): median {acc['itl_abs_err_median_ms']:.3f}, p99 {acc['itl_abs_err_p99_ms']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
