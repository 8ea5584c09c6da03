"""`bench run`: run a matrix (default: the CPU preset), store results, print the speedup table.

Parses the flags and calls bench.study.run.run_and_report (the run driver, then the report);
prints the tables it wrote and names its files.
"""

from __future__ import annotations

from bench.cli import add_matrix_arguments, load_selected_matrix


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
    r.add_argument("--cores", metavar="scheduled|fastest",
                   help="override the matrix's `cores`: 'fastest' pins each GPU worker's trials to the cores that probe "
                        "fastest as they begin (a host whose cores run at different speeds spreads a host-bound cell's "
                        "processes; docs/guide/results.md); 'scheduled' (the default) leaves them to the OS")
    r.add_argument("--redo", action="store_true",
                   help="measure cells already in the store again, as a new run (appended; the table shows the latest "
                        "run of each cell and lists earlier ones as history)")
    r.add_argument("--dry-run", action="store_true",
                   help="validate and list the cells, estimate the duration from stored records, run nothing")
    r.add_argument("--history", action="append", default=[],
                   help="more result stores whose records the --dry-run estimate may use (repeatable; the target store "
                        "is always read)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--report-dir", help="where tables and dashboard go (default dashboards/<store name>: "
                   "--store results/head.jsonl writes dashboards/head/)")
    r.add_argument("--baseline", help="speedup baseline, e.g. backend=hf,precision=bf16,max_batch_size=1")
    r.add_argument("--executor", choices=["local", "ray"],
                   help="where build groups run (default: the matrix's executor, else local); see docs/guide/scale-out.md")
    r.add_argument("--ray-address", help="the Ray cluster of --executor ray: auto, HOST:PORT or ray://HOST:10001 "
                   "(default: ray.init's own: RAY_ADDRESS, a running local cluster, or a new one)")
    r.add_argument("--devices", help="spread the matrix over these GPUs, one worker per GPU: cuda:0,cuda:1,... or all")
    r.add_argument("--engines", action="append",
                   help="load engine artifacts (`bench build`'s .tar files, or a folder of them) instead of compiling and "
                        "tuning here; one per build key (repeatable). An artifact is code, as a pickle is: loading one "
                        "runs the pickles and compiled source it holds. Only trusted artifacts load: those `bench build` "
                        "made on this machine, and those --trust or --trust-file name; any other is refused (exit 2) "
                        "before any worker starts. See docs/guide/trust.md")
    r.add_argument("--trust", action="append", metavar="DIGEST",
                   help="with --engines: load the artifact of this digest (its full 64 hex digits, as the refusal shows) "
                        "though it was made elsewhere; only for artifacts from someone you trust (repeatable)")
    r.add_argument("--trust-file", action="append", metavar="FILE",
                   help="with --engines: a file of trusted artifact digests, one a line (# comments)")
    r.add_argument("--retune-on-mismatch", action="store_true",
                   help="with --engines: an artifact made with another torch, Triton, GPU or driver is not loaded and the "
                        "cell is built and tuned here (the records say so); without it such an artifact is refused")
    r.add_argument("--tuning-builds", type=int,
                   help="build each cell K times from cold, each in its own engine folder with --runs processes: the "
                        "table's tuning spread is the spread of the figure between the builds")
    r.add_argument("--accuracy-capture", action="store_true",
                   help="after each cell's timed trials (its first run), feed the [accuracy] prompts through the same "
                        "model and compiled step and keep its logits and greedy tokens: `bench accuracy` then scores the "
                        "cell from them instead of loading and compiling it again (bench study does this)")
    r.add_argument("--profile-window", action="store_true",
                   help="after the timed trials of every run process of each hf cell, profile one window of a few "
                        "decode steps through the model it timed (torch.profiler) and store it in profiles/<matrix>.jsonl "
                        "as that process's profile: `bench compare --profile` then explains a regression from the very "
                        "processes it compares, with no profiling session of its own")
    r.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from rich.console import Console

    from bench.study.run import run_and_report, written_text

    matrix = load_selected_matrix(args)
    console = Console(stderr=True, soft_wrap=True)
    done = run_and_report(matrix, console, store=args.store, report_dir=args.report_dir, baseline=args.baseline,
                          all_cells=load_selected_matrix(args, only=False).cells
                          if args.baseline or args.accuracy_capture else None,
                          redo=args.redo, dry_run=args.dry_run, history=args.history,
                          show_progress=not args.no_progress, accuracy_capture=args.accuracy_capture,
                          profile_window=args.profile_window)
    if done.plan_text is not None:
        print(done.plan_text)
        return 0
    if done.report_error is not None:
        console.print(f"[yellow]report not built: {done.report_error}")
        return done.exit_status
    print(done.markdown)
    for w in done.warnings:
        console.print(f"warning: {w}", style="yellow", highlight=False, markup=False)
    console.print("wrote " + written_text(done.paths), highlight=False)
    return done.exit_status
