"""`bench capacity`: the largest request rate, concurrency or batch size whose latency percentiles meet an SLO.

`capacity_matrix` is the library entry. One search per configuration of the matrix (a cell with
the searched axis set aside); every probe's passes are stored as capacity-probe records.
"""

from __future__ import annotations

from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix
from bench.files import write_atomic


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
    r.add_argument("--report-dir", help="where capacity.md goes (default dashboards/<matrix>)")
    r.set_defaults(func=cmd_capacity)


def cmd_capacity(args) -> int:
    from rich.console import Console

    from bench.capacity.search import check_grid, parse_slo

    slo = parse_slo(args.slo)  # bad SLOs and bounds exit 2 before any work
    lower = args.lower if args.lower is not None else (args.tolerance or 1)
    check_grid(args.axis, lower, args.upper, args.tolerance)
    matrix = load_selected_matrix(args)
    store = Path(args.store or f"results/{matrix.name}-capacity.jsonl")
    missed, text = capacity_matrix(matrix, slo, args.axis, lower, args.upper, args.tolerance, args.strategy, store,
                                   Console(stderr=True), Path(args.report_dir or f"dashboards/{matrix.name}"))
    print(text)
    return 1 if missed else 0


def plan_searches(matrix, axis: str) -> list:
    """Return one cell per configuration: the matrix's cells with the searched axis set aside (first of each)."""
    from bench.capacity.probes import check_axis

    seen: dict = {}
    for cell in matrix.cells:
        check_axis(cell, axis)
        options = tuple((k, v) for k, v in cell.options if k != axis)
        size = None if axis == "max_batch_size" else cell.max_batch_size
        seen.setdefault((cell.backend, cell.model, cell.precision, cell.device, cell.workload, size, options), cell)
    return list(seen.values())


def capacity_matrix(matrix, slo: dict, axis: str, lower: float, upper: float, tolerance: float | None,
                    strategy: str, store: Path, console, report_dir: Path) -> tuple[int, str]:
    """Run each configuration's capacity search (every probe stored); write report_dir/capacity.md.

    Return (how many configurations had no load meeting the SLO, the report's Markdown).
    """
    from bench.capacity.probes import CapacityRunner
    from bench.capacity.search import (
        capacity_markdown,
        check_grid,
        search_capacity,
        search_label,
        slo_text,
    )
    from bench.results import query
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    cells = plan_searches(matrix, axis)
    store = query.check_store_path(store, must_exist=False)
    st = matrix.settings
    context = new_context("capacity", matrix=matrix.name, gpu_memory_gb=st.gpu_memory_gb, runs=st.runs,
                          trials=st.trials, warmup=st.warmup)
    console.print(f"capacity search: {len(cells)} configuration(s), {axis} {lower:g}..{upper:g} ({strategy}), "
                  f"SLO {slo_text(slo)}, {st.runs} run(s) x {st.trials} trial(s) per probe -> {store}")
    parts, missed = [f"## Capacity under an SLO ({matrix.name}, run {context.run_id})", ""], 0
    search = {"lower": lower, "upper": upper, "tolerance": check_grid(axis, lower, upper, tolerance)[0], "strategy": strategy}
    with ResultStore(store).writer():
        for cell in cells:
            runner = CapacityRunner(cell, axis, slo, store, runs=st.runs, trials=st.trials, warmup=st.warmup,
                                    timeout_s=st.timeout_s, build_timeout_s=st.build_timeout_s,
                                    gpu_memory_gb=st.gpu_memory_gb, context=context, search=search)
            result = search_capacity(runner, axis, lower, upper, tolerance, strategy, slo)
            label = search_label(cell.backend, cell.model, cell.precision, cell.workload.name, cell.max_batch_size, axis)
            missed += result.capacity is None
            console.print(f"{label}: capacity {result.capacity} (first miss {result.first_miss}) after "
                          f"{len(result.probes)} probes")
            parts.append(capacity_markdown(result, label))
    text = "\n".join(parts)
    path = write_atomic(Path(report_dir) / "capacity.md", text)
    console.print(f"report: {path}")
    return missed, text
