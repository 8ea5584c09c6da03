"""`bench study`: the whole study of a matrix in one command: run, OOM frontier, kernel profiles, accuracy, report.

Parses the flags and calls bench.study.driver.run_study, which checks the matrix's [study] table
(bench.study.plan) before the first step and runs each step through its own command's driver;
prints the plan (--dry-run) or the report.
"""

from __future__ import annotations


def register(sub) -> None:
    from bench.study.driver import STEPS

    r = sub.add_parser("study", help="run, OOM frontier, kernel profiles, accuracy and report of a matrix in one command "
                                     "(its [study] table says what the OOM search and the profile cover)",
                       description="Run `bench run`, `bench oom`, `bench profile` and `bench report` on one matrix "
                                   "that has a [study] table (e.g. --preset h200-study), printing each step's "
                                   "equivalent command. --dry-run lists the cells, searches and profiles with a time "
                                   "estimate from stored records, and needs no optional package (torchao).")
    r.add_argument("--preset", help="built-in matrix with a [study] table (e.g. h200-study)")
    r.add_argument("--matrix", help="matrix TOML file with a [study] table")
    r.add_argument("--steps", help=f"which steps, in order (default all: {','.join(STEPS)})")
    r.add_argument("--requests", type=int, help="override every workload's num_requests (a quick slice)")
    r.add_argument("--runs", type=int, help="override the matrix's runs (fresh worker processes per cell)")
    r.add_argument("--redo", action="store_true", help="measure and probe again what the stores already hold")
    r.add_argument("--dry-run", action="store_true", help="check everything, print the plan and an estimate, run nothing")
    r.add_argument("--history", action="append", default=[], help="more stores the --dry-run estimate may read (repeatable)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--report-dir", help="where report.md and dashboard.html go (default dashboards/<matrix>)")
    r.set_defaults(func=cmd_study)


def cmd_study(args) -> int:
    from rich.console import Console

    from bench.study.driver import run_study

    done = run_study(Console(stderr=True, soft_wrap=True), preset=args.preset, matrix_file=args.matrix,
                     steps=args.steps, requests=args.requests, runs=args.runs, redo=args.redo, dry_run=args.dry_run,
                     history=args.history, show_progress=not args.no_progress, report_dir=args.report_dir)
    if done.plan_text is not None:
        print(done.plan_text)
        return 0
    if done.report is not None:
        print(done.report)
    return done.exit_status
