"""`bench compare BASE HEAD`: regression verdicts between two stores or two commits' results.

Parses the flags and calls bench.study.compare.compare (the verdicts, their attribution from profiles, and with
--profile the profiles it needs); prints its Markdown, its warnings and its headline (rows judged, and not).
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    c = sub.add_parser(
        "compare",
        help="compare two result stores (or two commits in one store); exit 1 if any cell regressed, 4 if rows were "
             "not judged",
        description="Match cells by cell_id and judge each metric over runs (fresh worker processes; "
        "`bench run --runs 3`): a regression needs statistical "
        "significance AND a change of at least --factor in the metric's bad direction. "
        "Exit status: 0 no regression, every row judged; 1 a regression (whatever else); 2 bad input; 3 a profile "
        "record not stored (--profile); 4 no regression, but some rows were not judged (kernels differ: the sides ran "
        "different tuned kernels; inconclusive: too few runs; a metric missing on one side), so the comparison does "
        "not pass a gate.",
    )
    c.add_argument("base", help="base result store (JSONL), a folder of stores (its *.jsonl) or a quoted glob")
    c.add_argument("head", help="head result store, folder or quoted glob; may be the same file with --base/--head-commit")
    c.add_argument("--base-commit", help="use only base records measured at this commit (prefix of environment.commit)")
    c.add_argument("--head-commit", help="use only head records measured at this commit")
    c.add_argument("--metrics", help="comma-separated metrics (default: throughputs, TTFT/TPOT/E2E, peak memory)")
    c.add_argument("--factor", type=float, default=0.05, help="minimum change to call a regression (default 0.05 = 5%%)")
    c.add_argument("--confidence", type=float, default=0.99, help="confidence level of the interval (default 0.99)")
    c.add_argument("--test", default="t", choices=("t", "mannwhitney"),
                   help="t: Student t on log trial values (default); mannwhitney: exact rank test (needs >= 5 trials a side)")
    c.add_argument("--base-only", metavar="K=V,...",
                   help="compare only the base side's cells matching these key=value pairs (`bench run --only`'s syntax): "
                        "with --head-only, two cells of one store (e.g. plant=none against plant=Qwen2MLP:2); an option "
                        "they choose differently is ignored in matching. Measured in turns by one `bench run` (one "
                        "matrix holding both), their runs are compared round by round (a paired test)")
    c.add_argument("--head-only", metavar="K=V,...", help="compare only the head side's cells matching these pairs")
    c.add_argument("--ignore-option", action="append", default=[], metavar="KEY",
                   help="match cells ignoring this option (repeatable), e.g. to compare slowdown=1.1 with 1.0")
    c.add_argument("--pool", action="store_true",
                   help="pool every compatible run of a cell on each side (default: each cell's latest run)")
    c.add_argument("--allow-env-mismatch", action="store_true",
                   help="compare even when GPU, driver or library versions differ (a warning instead of an error)")
    c.add_argument("--markdown", metavar="FILE", help="also write the Markdown report (for a pull-request comment) here")
    c.add_argument("--profiles", nargs=2, metavar=("BASE", "HEAD"),
                   help="profile stores (`bench profile` records) of the base and head sides, for where the time of each "
                        "regressed cell went (default: each side's profiles/<matrix>.jsonl)")
    c.add_argument("--profile", action="store_true",
                   help="profile the regressed cells that have no stored profile first (a window of a few decode steps "
                        "in each of --profile-processes processes a side, sides measured at this checkout's commit), "
                        "then attribute their change; a side whose runs were measured with `bench run --profile-window` "
                        "is attributed from its timed processes' own windows, with no new session")
    c.add_argument("--profile-tool", choices=("torch", "nsys"), default="torch",
                   help="the profiler --profile runs (default torch: torch.profiler, CPU ops on a CPU)")
    c.add_argument("--decode-steps", type=int, default=None,
                   help="decode steps in each --profile window (default 4: the window `bench run --profile-window` "
                        "profiles in each timed process)")
    c.add_argument("--profile-processes", type=int, default=3,
                   help="session processes --profile profiles per side, one window each, their mean attributed "
                        "(default 3: a host-bound step moves from process to process, and one window may not be "
                        "typical of the runs)")
    c.add_argument("--dashboard", metavar="FILE", help="also write the comparison and its attribution as one HTML page")
    c.add_argument("--json", metavar="FILE", help="also write the verdicts and the attribution as JSON (for scripts)")
    c.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    from bench.study.compare import compare

    comparison, markdown, store_warnings = compare(
        args.base, args.head, markdown_file=args.markdown, metrics=args.metrics, ignore_options=args.ignore_option,
        base_commit=args.base_commit, head_commit=args.head_commit, factor=args.factor, confidence=args.confidence,
        test=args.test, allow_env_mismatch=args.allow_env_mismatch, pool=args.pool, profile=args.profile,
        profiles=args.profiles, tool=args.profile_tool, decode_steps=args.decode_steps,
        processes=args.profile_processes, dashboard=args.dashboard,
        json_file=args.json, base_only=args.base_only, head_only=args.head_only)
    for w in store_warnings:
        print(f"bench compare: warning: {w}", file=sys.stderr)
    print(markdown)
    for w in comparison.warnings:
        print(f"bench compare: warning: {w}", file=sys.stderr)
    print(f"bench compare: {comparison.headline()}", file=sys.stderr)
    return comparison.exit_status
