"""False-alarm and detection rates of `bench compare`'s statistics, simulated on the fake backend's timing model.

    python3 scripts/regression_power.py [--comparisons 2000] [--trials 3] [--out DIR]

One row per trial_cv: false alarms on identical runs, detections of a 10% slowdown
(docs/guide/regressions.md). A study of the comparison's statistics, not a product figure, so it
lives beside the package, not in it.

Each simulated comparison draws BASE and HEAD trials from the fake backend's virtual clock
(bench/backends/fake/backend.py: per-decode-step Gaussian noise `noise`, `slowdown` multiplies every
duration), run in-process, summarized by bench.metrics.pass_metrics, and then multiplied by a
per-trial drift factor exp(N(0, trial_cv)). The drift stands for what a real machine adds
between runs (clocks, thermals, co-tenants): the fake backend's per-step noise is independent
per step, so it averages out over a trial's hundreds of steps and alone would make every test
look perfect. Each comparison then goes through bench.results.compare.compare_metric, the function
`bench compare` uses.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backends.fake.backend import FakeLoaded  # noqa: E402
from bench.metrics import pass_metrics  # noqa: E402
from bench.results.compare import compare_metric  # noqa: E402
from bench.results.stats import REGRESSED  # noqa: E402
from bench.workloads.request import Request  # noqa: E402

REQUESTS = [Request(f"r{i}", tuple(range(16 + 4 * (i % 4))), 16 + 2 * (i % 3)) for i in range(16)]


def fake_trials(n: int, *, slowdown: float, step_noise: float, trial_cv: float, seed: int,
                metric: str = "output_throughput", max_batch_size: int = 4) -> list[float]:
    """Return `metric` of n measured trials of the fake backend with per-trial drift."""
    loaded = FakeLoaded({})
    options = {"noise": step_noise, "slowdown": slowdown, "seed": seed}
    drift = random.Random(seed ^ 0x5EED)
    out = []
    loaded.run(REQUESTS[:max_batch_size], max_batch_size, options)  # warm-up, excluded as in the worker
    for _ in range(n):
        run = loaded.run(REQUESTS, max_batch_size, options)
        value = pass_metrics(run.timings, run.started, run.ended)[metric]
        d = math.exp(drift.gauss(0.0, trial_cv))
        out.append(value / d if metric.endswith("throughput") else value * d)
    return out


def rates(*, comparisons: int, trials: int, trial_cv: float, step_noise: float = 0.05, slowdown: float = 1.10,
          metric: str = "output_throughput", factor: float = 0.05, confidence: float = 0.99, seed: int = 0) -> dict:
    """Return {false_alarm, detection} fractions over seeded comparisons (identical vs slowed HEAD)."""
    false_alarms = detections = 0
    for i in range(comparisons):
        s = seed * 10_000_000 + 3 * i
        base = fake_trials(trials, slowdown=1.0, step_noise=step_noise, trial_cv=trial_cv, seed=s, metric=metric)
        same = fake_trials(trials, slowdown=1.0, step_noise=step_noise, trial_cv=trial_cv, seed=s + 1, metric=metric)
        slow = fake_trials(trials, slowdown=slowdown, step_noise=step_noise, trial_cv=trial_cv, seed=s + 2, metric=metric)
        kw = {"factor": factor, "confidence": confidence, "test": "t"}
        false_alarms += compare_metric("sim", metric, base, same, **kw).verdict == REGRESSED
        detections += compare_metric("sim", metric, base, slow, **kw).verdict == REGRESSED
    return {"trial_cv": trial_cv, "trials": trials, "comparisons": comparisons, "step_noise": step_noise,
            "slowdown": slowdown, "factor": factor, "confidence": confidence, "metric": metric,
            "false_alarm": false_alarms / comparisons, "detection": detections / comparisons}


def rates_markdown(rows: list[dict]) -> str:
    """Return the rates as the Markdown table docs/guide/regressions.md shows."""
    lines = ["| trial CV | trials | comparisons | false alarms (identical) | detected 10% slowdown |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['trial_cv']:.1%} | {r['trials']} | {r['comparisons']} | {r['false_alarm']:.2%} | {r['detection']:.2%} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--comparisons", type=int, default=2000)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--confidence", type=float, default=0.99)
    p.add_argument("--cv", default="0,0.005,0.01,0.015,0.02,0.03,0.05", help="per-trial drift CVs to simulate")
    p.add_argument("--out", help="write results.json and results.md here")
    args = p.parse_args(argv)
    rows = [rates(comparisons=args.comparisons, trials=args.trials, trial_cv=float(cv), confidence=args.confidence)
            for cv in args.cv.split(",")]
    table = rates_markdown(rows)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(rows, indent=1))
        (out / "results.md").write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
