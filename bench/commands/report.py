"""`bench report`: rebuild tables and the dashboard from result stores (runs nothing).

Parses the flags and calls bench.report.driver.report_stores; prints each report.md and names the files.
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    rep = sub.add_parser("report", help="rebuild tables and dashboard from result stores (runs nothing)")
    rep.add_argument("stores", nargs="*", help="result stores, folders of stores (their *.jsonl, e.g. one per night) or "
                     "quoted globs (default: every results/*.jsonl); 2+ stores add a comparison view; a folder, glob or "
                     "the default holding several matrices gets one report per matrix")
    rep.add_argument("--report-dir", "--out", dest="out", metavar="DIR",
                     help="output folder (default dashboards/<store> for one store, dashboards/combined for several: name one "
                     "when you compare stores; with several matrices, DIR/<store or matrix> each, DIR default "
                     "dashboards); --out is the same option")
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
    for one in built:
        if len(built) > 1:  # a folder of several matrices: one report each, each said apart
            print(f"## {', '.join(one.stores)}\n", file=sys.stderr)
        if one.error is not None:
            print(f"bench: error: report of {', '.join(one.stores)} not built: {one.error}", file=sys.stderr)
            continue
        if one.printed:
            print(one.printed)
        for w in one.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(one.files_text(), file=sys.stderr)
    return 2 if any(one.error is not None for one in built) else 0
