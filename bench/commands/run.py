"""`bench run`: run a matrix (default: the CPU preset), store results, print the speedup table."""

from __future__ import annotations

import warnings
from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix
from bench.errors import BenchInputError
from bench.spec.narrow import parse_pairs


def register(sub) -> None:
    r = sub.add_parser("run", help="run a matrix (default: the CPU preset 'default') and print its speedup table",
                       description="Run every cell of a matrix (a preset or a TOML file) not yet in its result store, "
                                   "each in fresh worker processes, store one record per measured pass, then print "
                                   "the speedup table and write the tables and the dashboard. Without a terminal, "
                                   "one line per finished cell; a busy machine is warned about.")
    add_matrix_arguments(r, "run only matching cells, e.g. precision=bf16,max_batch_size=1|8")
    r.add_argument("--store", help="result store (default results/<matrix>.jsonl)")
    r.add_argument("--requests", type=int, help="override every workload's num_requests (a quick slice)")
    r.add_argument("--trials", type=int, help="override the matrix's trials per worker process")
    r.add_argument("--runs", type=int, help="override the matrix's runs: fresh worker processes per cell, each with "
                   "its own warm-up and trials (the table shows the spread between them)")
    r.add_argument("--redo", action="store_true",
                   help="measure cells already in the store again, as a new run (appended; the table shows the latest "
                        "run of each cell and lists earlier ones as history)")
    r.add_argument("--dry-run", action="store_true",
                   help="validate and list the cells, estimate the duration from stored records, run nothing")
    r.add_argument("--history", action="append", default=[],
                   help="more result stores whose records the --dry-run estimate may use (repeatable; the target store "
                        "is always read)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--report-dir", help="where tables and dashboard go (default dashboards/<matrix>)")
    r.add_argument("--baseline", help="speedup baseline, e.g. backend=hf,precision=bf16,max_batch_size=1")
    r.add_argument("--executor", choices=["local", "ray"],
                   help="where build groups run (default: the matrix's executor, else local); see docs/guide/scale-out.md")
    r.add_argument("--ray-address", help="the Ray cluster of --executor ray: auto, HOST:PORT or ray://HOST:10001 "
                   "(default: ray.init's own: RAY_ADDRESS, a running local cluster, or a new one)")
    r.add_argument("--devices", help="spread the matrix over these GPUs, one worker per GPU: cuda:0,cuda:1,... or all")
    r.add_argument("--engines", action="append",
                   help="load engine artifacts (`bench build`'s .tar files, or a folder of them) instead of compiling and "
                        "tuning here; one per build key (repeatable)")
    r.add_argument("--retune-on-mismatch", action="store_true",
                   help="with --engines: an artifact made with another torch, Triton, GPU or driver is not loaded and the "
                        "cell is built and tuned here (the records say so); without it such an artifact is refused")
    r.add_argument("--tuning-builds", type=int,
                   help="build each cell K times from cold, each in its own engine folder with --runs processes: the "
                        "table's tuning spread is the spread of the figure between the builds")
    r.set_defaults(func=cmd_run)


def run_estimate(matrix, store: Path, history: list, redo: bool = False):
    """Return the bench.results.estimate.Estimate of running the matrix into `store`, from the stored records."""
    from bench.results import query
    from bench.results.estimate import estimate_run
    from bench.results.records import new_context
    from bench.runner.matrix import plan
    from bench.workloads.workload import cached_workload

    target = [query.load([store])] if store.exists() else []
    extra = [query.load([h]) for h in history]
    records = [r for recs in target + extra for r in recs]
    st = matrix.settings
    context = new_context("run", matrix=matrix.name, baseline=matrix.baseline, gpu_memory_gb=st.gpu_memory_gb,
                          runs=st.runs, trials=st.trials, warmup=st.warmup)
    planned = plan(matrix, [r for recs in target for r in recs], context, redo)
    tokens: dict = {}

    def output_tokens(spec):
        if spec not in tokens:
            tokens[spec] = sum(r.output_len for r in cached_workload(spec, Path("workloads/cache"))[0].requests)
        return tokens[spec]

    return estimate_run(matrix, planned, records, output_tokens)


def statuses_text(statuses: dict) -> str:
    """Return '24 ok, 2 oom' (records written, by status), or 'nothing new'."""
    return ", ".join(f"{n} {status}" for status, n in statuses.items()) or "nothing new"


def written_text(paths: dict) -> str:
    """Return every file a report build wrote, named, e.g. 'tables: a.md, a.csv, a.html; report: r.md; dashboard: d.html'."""
    groups = (("tables", ("markdown", "csv", "html")), ("report", ("report",)), ("OOM frontier", ("frontier",)),
              ("kernels", ("kernels",)), ("dashboard", ("dashboard",)))
    parts = [f"{name}: " + ", ".join(str(paths[k]) for k in keys if k in paths)
             for name, keys in groups if any(k in paths for k in keys)]
    return "; ".join(parts)


def cmd_run(args) -> int:
    from rich.console import Console

    from bench.files import check_output_dir
    from bench.report.build import build_report
    from bench.report.dashboard import require_plotly
    from bench.runner.matrix import run_matrix
    from bench.spec.baseline import check_baseline

    matrix = load_selected_matrix(args)
    baseline = parse_pairs(args.baseline) or matrix.baseline
    check_baseline(baseline, matrix.cells)  # an ambiguous baseline fails now, not after the run
    if args.baseline:  # a named baseline must name a cell of the matrix (before --only: a slice may leave it out)
        check_baseline(baseline, load_selected_matrix(args, only=False).cells, must_match=True)
    store = Path(args.store or f"results/{matrix.name}.jsonl")
    report_dir = check_output_dir(args.report_dir or f"dashboards/{matrix.name}", "--report-dir")  # before the run
    console = Console(stderr=True, soft_wrap=True)
    st = matrix.settings
    where = f"executor {st.executor}" + (f" on {','.join(st.devices)}" if st.devices else "") + (
        f" at {st.ray_address}" if st.ray_address else "")
    console.print(f"matrix [bold]{matrix.name}[/]: {len(matrix.cells)} cells x {st.runs} run(s) x {st.trials} trials -> "
                  f"{store} ({where})")
    try:
        require_plotly()  # said before the run, which stores its records whatever the report needs
    except BenchInputError as exc:
        console.print(f"[yellow]warning: {exc}; the run stores its records, its report will not be built")
    if args.dry_run:
        for c in matrix.cells:
            print(f"{c.cell_id}  {c.label}")
        print(run_estimate(matrix, store, args.history, redo=args.redo).text())
        return 0
    summary = run_matrix(matrix, store, redo=args.redo, show_progress=not args.no_progress, console=console)
    console.print(f"done in {summary.elapsed_s:.1f} s: {statuses_text(summary.statuses)}; {summary.skipped} trial(s) "
                  f"already stored; run id {summary.run_id}", highlight=False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            paths = build_report([store], report_dir, baseline)
        markdown = paths["markdown"].read_text()
        print(markdown)
        for w in dict.fromkeys(str(w.message) for w in caught):
            if w not in markdown:  # the tables' own warnings are printed with them: once is enough
                console.print(f"warning: {w}", style="yellow", highlight=False, markup=False)
        console.print("wrote " + written_text(paths), highlight=False)
    except BenchInputError as exc:
        console.print(f"[yellow]report not built: {exc}")
    return 1 if summary.statuses.get("error") or summary.statuses.get("timeout") else 0
