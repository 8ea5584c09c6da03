"""Print the time to build the dashboard for a synthetic 10,000-result store and to open it in Chromium.

    python3 scripts/bench_dashboard.py [--results 10000] [--requests 100] [--out DIR]

Targets (issue #8): build < 10 s, open (page ready, measured in the page) < 3 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report.build import build_report  # noqa: E402
from tests.support import browser  # noqa: E402
from tests.support.synthetic import synthetic_records, write_store  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=100, help="per-request samples in each result")
    ap.add_argument("--out")
    args = ap.parse_args()
    # 10 workloads x 4 backends x 5 precisions x 10 batch sizes = 2,000 cells; trials fill up to --results.
    cells = 10 * 4 * 5 * 10
    trials = max(1, round(args.results / cells))
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-dash-"))
    out.mkdir(parents=True, exist_ok=True)
    workloads = [(f"wl{i}", 128 * (i + 1), 128) if i % 2 else (f"sharegpt{i}", None, None) for i in range(10)]
    recs = synthetic_records(workloads=workloads, backends=("hf", "trtllm", "vllm", "sglang"),
                             precisions=("bf16", "fp16", "int8", "int4", "fp32"), batch_sizes=tuple(2 ** k for k in range(10)),
                             trials=trials, requests=args.requests)
    store = out / "synthetic10k.jsonl"
    write_store(store, recs)
    print(f"store: {len(recs)} results, {store.stat().st_size / 1e6:.0f} MB, {args.requests} samples each")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths = build_report([store], out / "report")
    build_s = time.perf_counter() - t0
    size = paths["dashboard"].stat().st_size / 1e6
    print(f"build: {build_s:.2f} s (target < 10 s), dashboard.html {size:.1f} MB")
    if browser.chromium() is None:
        print("open: chromium not installed, not measured")
        return 0
    runs = [browser.page_status(paths["dashboard"]) for _ in range(3)]
    for r in runs:
        assert r["state"] == "ok", {k: v for k, v in r.items() if k != "dom"}
    ready = sorted(r["ready-ms"] for r in runs)[1] / 1000
    wall = sorted(r["wall_s"] for r in runs)[1]
    print(f"open: page ready {ready:.2f} s after navigation start (median of 3; target < 3 s); "
          f"chromium start-to-exit {wall:.2f} s; figures drawn {runs[0]['drawn']}/{runs[0]['expected']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
