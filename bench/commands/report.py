"""`bench report`: rebuild tables and the dashboard from result stores (runs nothing)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from bench.errors import BenchInputError
from bench.spec.narrow import parse_pairs


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
    from bench.report.build import build_report, load_kernels

    stores = args.stores or sorted(str(p) for p in Path("results").glob("*.jsonl"))
    profiles = args.profiles or ([] if args.stores else sorted(str(p) for p in Path("profiles").glob("*.jsonl")))
    if not stores and profiles:
        stores, profiles = profiles, []  # kernel profiles only: a dashboard with the kernel panel
    if not stores:
        raise BenchInputError("no result stores given and none found in results/: run `bench run` first")
    out = Path(args.out or ("dashboards/" + (_name(stores[0]) if len(stores) == 1 else "combined")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = build_report(stores, out, parse_pairs(args.baseline), kernels=load_kernels(args.kernels),
                             profiles=profiles, pool=args.pool)
    printed = paths["report"].read_text() if "report" in paths else ""
    if printed:
        print(printed)
    for w in dict.fromkeys(str(w.message) for w in caught):
        if w not in printed:  # the tables' own warnings are printed with them: once is enough
            print(f"warning: {w}", file=sys.stderr)
    written = ", ".join(str(paths[k]) for k in ("report", "markdown", "csv", "html", "kernels", "frontier") if k in paths)
    print(f"tables: {written}; dashboard: {paths.get('dashboard', '(none: no workload results)')}", file=sys.stderr)
    return 0


def _name(store: str) -> str:
    """Return the default report folder's name for a store, a folder of stores or a glob."""
    import glob

    p = Path(store)
    if glob.has_magic(store):
        return p.parent.name or "combined"
    return p.name if p.is_dir() else p.stem
