"""`bench report`: rebuild tables and the dashboard from result stores (runs nothing).

Parses the flags and calls bench.report.driver.report_stores; prints report.md and names the files.
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    rep = sub.add_parser("report", help="rebuild tables and dashboard from result stores (runs nothing)")
    rep.add_argument("stores", nargs="*", help="result stores, folders of stores (their *.jsonl, e.g. one per night) or "
                     "quoted globs (default: every results/*.jsonl); 2+ stores add a comparison view")
    rep.add_argument("--report-dir", "--out", dest="out", metavar="DIR",
                     help="output folder (default dashboards/<store> for one store, dashboards/combined for several: name one "
                     "when you compare stores); --out is the same option")
    rep.add_argument("--baseline", help="speedup baseline, e.g. backend=hf,precision=bf16,max_batch_size=1 "
                     "(default: the baseline the stored matrix named)")
    rep.add_argument("--pool", action="store_true",
                     help="pool every run of a cell into its row (refused when their environments differ); default: "
                          "each row is the cell's latest run, earlier runs are listed as history")
    rep.add_argument("--kernels", action="append", default=[],
                     help="kernel table CSV/JSON (backend, precision, range|category, kernels_per_instance, "
                          "time_per_instance_us); repeatable")
    rep.add_argument("--profiles", action="append", default=[],
                     help="`bench profile` record store (profiles/<matrix>.jsonl) for the kernel panel; repeatable "
                          "(default with no stores given: every profiles/*.jsonl)")
    rep.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from bench.report.driver import report_stores

    built = report_stores(args.stores, args.out, baseline=args.baseline, kernels=args.kernels, profiles=args.profiles,
                          pool=args.pool)
    if built.printed:
        print(built.printed)
    for w in built.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(built.files_text(), file=sys.stderr)
    return 0
