"""Prints false-alarm and detection rates of `bench compare` on the fake backend's timing model.

    python3 scripts/regression_power.py [--comparisons 2000] [--trials 3] [--out DIR]

One row per trial_cv: false alarms on identical runs, detections of a 10% slowdown. The
simulation is bench.results.power (docs/regressions.md); this script only parses and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results.power import rates, rates_markdown  # noqa: E402


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
