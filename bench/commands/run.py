"""`bench run`: run a matrix (default: the CPU preset), store results, print the speedup table."""

from __future__ import annotations

from pathlib import Path

from bench.cli import parse_pairs
from bench.errors import BenchInputError


def register(sub) -> None:
    r = sub.add_parser("run", help="run a matrix (default: the CPU preset 'default') and print its speedup table")
    r.add_argument("--preset", help="built-in matrix (see `bench presets`)")
    r.add_argument("--matrix", help="matrix TOML file")
    r.add_argument("--store", help="result store (default results/<matrix>.jsonl)")
    r.add_argument("--only", help="run only matching cells, e.g. precision=bf16,max_batch_size=1|8")
    r.add_argument("--requests", type=int, help="override every workload's num_requests (a quick slice)")
    r.add_argument("--trials", type=int, help="override the matrix's trials per worker process")
    r.add_argument("--runs", type=int, help="override the matrix's runs: fresh worker processes per cell, each with "
                   "its own warm-up and trials (the table shows the spread between them)")
    r.add_argument("--redo", action="store_true",
                   help="measure cells already in the store again, as a new run (appended; the table shows the latest "
                        "run of each cell and lists earlier ones as history)")
    r.add_argument("--dry-run", action="store_true", help="validate and list the cells, run nothing")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--report-dir", help="where tables and dashboard go (default dashboards/<matrix>)")
    r.add_argument("--baseline", help="speedup baseline, e.g. backend=hf,precision=bf16,max_batch_size=1")
    r.add_argument("--executor", choices=["local", "ray"],
                   help="where build groups run (default: the matrix's executor, else local); see docs/scale-out.md")
    r.add_argument("--ray-address", help="the Ray cluster of --executor ray: auto, HOST:PORT or ray://HOST:10001 "
                   "(default: ray.init's own: RAY_ADDRESS, a running local cluster, or a new one)")
    r.add_argument("--devices", help="spread the matrix over these GPUs, one worker per GPU: cuda:0,cuda:1,... or all")
    r.set_defaults(func=cmd_run)


def load_selected_matrix(args):
    """Return the matrix named by --matrix / --preset, narrowed by --only/--requests/--trials."""
    from bench.spec import load_matrix, narrow

    if args.matrix and args.preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    matrix = load_matrix(args.matrix) if args.matrix else load_matrix(args.preset or "default", preset=True)
    return narrow(matrix, only=parse_pairs(args.only, "--only"), requests=args.requests, trials=args.trials,
                  runs=getattr(args, "runs", None), executor=getattr(args, "executor", None),
                  ray_address=getattr(args, "ray_address", None), devices=getattr(args, "devices", None))


def cmd_run(args) -> int:
    from rich.console import Console

    from bench.execution.matrix import run_matrix
    from bench.report.build import build_report
    from bench.spec import check_baseline

    matrix = load_selected_matrix(args)
    baseline = parse_pairs(args.baseline) or matrix.baseline
    check_baseline(baseline, matrix.cells)  # an ambiguous baseline fails now, not after the run
    store = Path(args.store or f"results/{matrix.name}.jsonl")
    console = Console(stderr=True)
    st = matrix.settings
    where = f"executor {st.executor}" + (f" on {','.join(st.devices)}" if st.devices else "") + (
        f" at {st.ray_address}" if st.ray_address else "")
    console.print(f"matrix [bold]{matrix.name}[/]: {len(matrix.cells)} cells x {st.runs} run(s) x {st.trials} trials -> "
                  f"{store} ({where})")
    if args.dry_run:
        for c in matrix.cells:
            print(f"{c.cell_id}  {c.label}")
        return 0
    summary = run_matrix(matrix, store, redo=args.redo, show_progress=not args.no_progress, console=console)
    console.print(
        f"done in {summary.elapsed_s:.1f} s: {summary.statuses or 'nothing new'}; {summary.skipped} trial(s) already "
        f"stored; run id {summary.run_id}"
    )
    report_dir = Path(args.report_dir or f"dashboards/{matrix.name}")
    try:
        paths = build_report([store], report_dir, baseline)
        print(paths["markdown"].read_text())
        console.print(f"tables: {paths['markdown']}, {paths['csv']}; dashboard: {paths['dashboard']}")
    except BenchInputError as exc:
        console.print(f"[yellow]report not built: {exc}")
    return 1 if summary.statuses.get("error") or summary.statuses.get("timeout") else 0
