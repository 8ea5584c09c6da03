"""`bench capacity`: the largest request rate, concurrency or batch size whose latency percentiles meet an SLO.

Parses the flags and calls bench.capacity.driver.capacity_matrix; prints its report
(docs/guide/capacity.md).
"""

from __future__ import annotations

from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    r = sub.add_parser(
        "capacity",
        help="find the largest load (request rate, concurrency or batch size) whose latency percentiles meet an SLO",
        description="Brackets the load by doubling, then bisects to --tolerance; each probe is a full measured pass "
        "of the cell (the matrix's runs, trials and warm-up), stored as a record (docs/guide/capacity.md).",
    )
    add_matrix_arguments(r, "search only matching cells, e.g. backend=openai")
    r.add_argument("--slo", required=True, help="latency bounds in ms, e.g. ttft_p99_ms=500,tpot_p99_ms=50 "
                   "(ttft | tpot | e2el, p50 | p90 | p99)")
    r.add_argument("--axis", default="request_rate",
                   help="request_rate (open loop, openai), max_concurrency (closed loop, openai) or max_batch_size")
    r.add_argument("--lower", type=float, help="smallest load to probe (default: one tolerance step, or 1)")
    r.add_argument("--upper", type=float, required=True, help="largest load to probe")
    r.add_argument("--tolerance", type=float,
                   help="resolution of the answer (default: 1 for integer axes, lower/4 req/s for request_rate)")
    r.add_argument("--strategy", default="grow", help="grow (double, then bisect; default) or bisect")
    r.add_argument("--runs", type=int, help="override the matrix's runs: fresh worker processes per probe")
    r.add_argument("--trials", type=int, help="override the matrix's trials per worker process")
    r.add_argument("--requests", type=int, help="override every workload's num_requests")
    r.add_argument("--store", help="result store (default results/<matrix>-capacity.jsonl)")
    r.add_argument("--report-dir", help="where capacity.md goes (default dashboards/<matrix> for the default store, else dashboards/<store name>)")
    r.set_defaults(func=cmd_capacity)


def cmd_capacity(args) -> int:
    from rich.console import Console

    from bench.capacity.driver import capacity_matrix, check_search
    slo, lower = check_search(args.slo, args.axis, args.lower, args.upper, args.tolerance)  # exit 2 before any work
    matrix = load_selected_matrix(args)
    store = Path(args.store or f"results/{matrix.name}-capacity.jsonl")
    missed, text = capacity_matrix(matrix, slo, args.axis, lower, args.upper, args.tolerance, args.strategy, store,
                                   Console(stderr=True), args.report_dir)
    print(text)
    return 1 if missed else 0
