"""Command line: argument parsing only; each command calls one library function.

Exit status: 0 success, 1 a run finished with failed cells (error/timeout), 2 bad input
(nothing was run), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import BenchInputError


def _parse_baseline(text: str | None) -> dict | None:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise BenchInputError(f"--baseline wants key=value pairs, e.g. backend=hf,precision=bf16,max_batch_size=1; got {part!r}")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _load(args):
    from bench.spec import load_matrix, narrow

    if args.matrix and args.preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    matrix = load_matrix(args.matrix) if args.matrix else load_matrix(args.preset or "default", preset=True)
    return narrow(matrix, only=_parse_baseline(getattr(args, "only", None)),
                  requests=getattr(args, "requests", None), trials=getattr(args, "trials", None))


def cmd_run(args) -> int:
    from rich.console import Console

    from bench.matrix import run_matrix
    from bench.report.build import build_report

    matrix = _load(args)
    store = Path(args.store or f"results/{matrix.name}.jsonl")
    console = Console(stderr=True)
    console.print(f"matrix [bold]{matrix.name}[/]: {len(matrix.cells)} cells x {matrix.settings.trials} trials -> {store}")
    if args.dry_run:
        for c in matrix.cells:
            print(f"{c.cell_id}  {c.label}")
        return 0
    summary = run_matrix(matrix, store, redo=args.redo, show_progress=not args.no_progress, console=console)
    console.print(
        f"done in {summary.elapsed_s:.1f} s: {summary.statuses or 'nothing new'}; {summary.skipped} trial(s) already stored"
    )
    report_dir = Path(args.report_dir or f"dashboards/{matrix.name}")
    try:
        paths = build_report([store], report_dir, _parse_baseline(args.baseline) or matrix.baseline)
        print(paths["markdown"].read_text())
        console.print(f"tables: {paths['markdown']}, {paths['csv']}; dashboard: {paths['dashboard']}")
    except BenchInputError as exc:
        console.print(f"[yellow]report not built: {exc}")
    return 1 if summary.statuses.get("error") or summary.statuses.get("timeout") else 0


def cmd_report(args) -> int:
    from bench.report.build import build_report

    stores = args.stores or sorted(str(p) for p in Path("results").glob("*.jsonl"))
    if not stores:
        raise BenchInputError("no result stores given and none found in results/: run `bench run` first")
    out = Path(args.out or ("dashboards/" + (Path(stores[0]).stem if len(stores) == 1 else "combined")))
    paths = build_report(stores, out, _parse_baseline(args.baseline))
    print(paths["markdown"].read_text())
    print(f"tables: {paths['markdown']}, {paths['csv']}; dashboard: {paths['dashboard']}", file=sys.stderr)
    return 0


def cmd_presets(args) -> int:
    from bench.spec import list_presets, load_matrix

    for name in list_presets():
        m = load_matrix(name, preset=True)
        print(f"{name:16s} {len(m.cells):4d} cells  {m.description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench", description="Benchmark LLM inference backends across a matrix of configurations.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a matrix (default: the CPU preset 'default') and print its speedup table")
    r.add_argument("--preset", help="built-in matrix (see `bench presets`)")
    r.add_argument("--matrix", help="matrix TOML file")
    r.add_argument("--store", help="result store (default results/<matrix>.jsonl)")
    r.add_argument("--only", help="run only matching cells, e.g. precision=bf16,max_batch_size=1")
    r.add_argument("--requests", type=int, help="override every workload's num_requests (a quick slice)")
    r.add_argument("--trials", type=int, help="override the matrix's trials per cell")
    r.add_argument("--redo", action="store_true", help="re-run cells already in the store (appends new records)")
    r.add_argument("--dry-run", action="store_true", help="validate and list the cells, run nothing")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--report-dir", help="where tables and dashboard go (default dashboards/<matrix>)")
    r.add_argument("--baseline", help="speedup baseline, e.g. backend=hf,precision=bf16,max_batch_size=1")
    r.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", help="rebuild tables and dashboard from result stores (runs nothing)")
    rep.add_argument("stores", nargs="*", help="result stores (default: every results/*.jsonl)")
    rep.add_argument("--out", help="output folder (default dashboards/<store>)")
    rep.add_argument("--baseline", help="speedup baseline, e.g. backend=hf,precision=bf16,max_batch_size=1")
    rep.set_defaults(func=cmd_report)

    pr = sub.add_parser("presets", help="list built-in matrices")
    pr.set_defaults(func=cmd_presets)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchInputError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted; every finished cell is in the store, re-run to continue", file=sys.stderr)
        return 130
