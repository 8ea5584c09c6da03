"""Wall time of one matrix run serially and through the local executor on two (fake) GPUs.

The fake backend on device "cuda" needs no GPU: each cell's pass sleeps `--wall-ms` of real
time (its clock is virtual otherwise), so the figure is the executor's overlap plus what each
worker process costs to start (Python, bench, torch for the cuda fingerprint). Expected: the
two-device run takes about half the serial one. Figures go in a dated record under docs/measurements/.

    python3 scripts/bench_executor_local.py [--groups 4] [--trials 2] [--wall-ms 2000] [--devices 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PRECISIONS = ("bf16", "int4", "fp16", "int8", "fp32")


def matrix(groups: int, trials: int, wall_ms: float, devices: int | None):
    from bench.spec.matrix import parse_matrix

    data = {"backends": ["fake"], "model": "qwen-tiny", "precisions": list(PRECISIONS[:groups]),
            "max_batch_sizes": [1], "workloads": ["w"], "trials": trials, "warmup": 0, "options": {"wall_ms": wall_ms},
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}}
    if devices:
        data["devices"] = [f"cuda:{i}" for i in range(devices)]
    else:
        data["device"] = "cuda"
    return parse_matrix(data)


def timed_run(m, folder: Path) -> float:
    from bench.runner.matrix import run_matrix

    t0 = time.perf_counter()
    summary = run_matrix(m, folder / "store.jsonl", engines_dir=folder / "engines",
                         workload_cache=folder / "workloads", show_progress=False)
    elapsed = time.perf_counter() - t0
    assert summary.statuses == {"ok": len(m.cells) * m.settings.trials}, summary.statuses
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=4, help="build groups (one cell each), at most 5")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--wall-ms", type=float, default=2000.0, help="real sleep of each measured pass")
    ap.add_argument("--devices", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        serial = timed_run(matrix(args.groups, args.trials, args.wall_ms, None), Path(d) / "serial")
        parallel = timed_run(matrix(args.groups, args.trials, args.wall_ms, args.devices), Path(d) / "parallel")
    sleep_s = args.groups * args.trials * args.wall_ms / 1000
    print(f"{args.groups} build groups x {args.trials} trials x {args.wall_ms:g} ms of sleep = {sleep_s:.1f} s of passes")
    print(f"serial (device = 'cuda'):               {serial:.1f} s")
    print(f"local executor, {args.devices} devices:           {parallel:.1f} s")
    print(f"parallel / serial: {parallel / serial:.2f} (ideal {1 / args.devices:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
