"""`bench oom`: find the largest max_batch_size that fits for each configuration of a matrix."""

from __future__ import annotations

from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix
from bench.errors import BenchInputError
from bench.files import write_atomic


def register(sub) -> None:
    r = sub.add_parser(
        "oom",
        help="search the OOM boundary (largest max_batch_size that fits) per backend x precision x options x lengths",
        description="Probes each configuration of the matrix with one full batch of worst-case requests "
        "(see docs/oom.md); the matrix's max_batch_sizes are ignored except as default bounds.",
    )
    add_matrix_arguments(r, "search only matching cells, e.g. precision=bf16")
    r.add_argument("--lengths", help="input x output lengths to search, e.g. 1024x1024,2048x2048 "
                   "(default: each workload's max_input_len x its longest output)")
    r.add_argument("--lower", type=int, help="smallest batch size to probe (default: the matrix's smallest)")
    r.add_argument("--upper", type=int, help="largest batch size to probe (default: the matrix's largest)")
    r.add_argument("--strategy", default="grow", help="grow (exponential growth, then bisection; default) or bisect")
    r.add_argument("--decode-steps", type=int, default=4, help="decode steps a probe runs at the final length")
    r.add_argument("--gpu-memory-gb", type=float, help="emulate a smaller device: cap the memory a cell may use (GB)")
    r.add_argument("--no-confirm", action="store_true", help="skip re-probing the largest fitting size")
    r.add_argument("--store", help="result store (default results/<matrix>-oom.jsonl)")
    r.add_argument("--report-dir", help="where oom-frontier.md goes (default dashboards/<matrix>)")
    r.add_argument("--redo", action="store_true", help="probe again even where a probe is stored")
    r.set_defaults(func=cmd_oom)


def parse_lengths(text: str) -> list[tuple[int, int]]:
    """Return [(input, output)] from '1024x1024,2048x2048'; BenchInputError otherwise."""
    out = []
    for part in text.split(","):
        try:
            a, b = part.lower().split("x")
            pair = (int(a), int(b))
        except ValueError:
            raise BenchInputError(f"--lengths wants INPUTxOUTPUT pairs such as 1024x1024,2048x2048; got {part!r}") from None
        if min(pair) <= 0:
            raise BenchInputError(f"--lengths: lengths must be positive, got {part!r}")
        out.append(pair)
    return out


def workload_lengths(spec) -> tuple[int, int]:
    """Return the worst case (input, output) a workload spec allows: its KV cache reaches max_total_len."""
    if spec.source == "synthetic":
        return spec.input_len, spec.output_len
    if spec.output_len:
        return spec.max_input_len, spec.output_len
    room = spec.max_total_len - spec.max_input_len
    return spec.max_input_len, min(room, spec.max_output_len) if spec.max_output_len else room


def cmd_oom(args) -> int:
    from rich.console import Console

    from bench.execution.memory_cap import check_cap
    from bench.oom.search import check_bounds, frontier_markdown, frontier_rows, probe_lengths
    from bench.results import query
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    matrix = load_selected_matrix(args)
    sizes = sorted({c.max_batch_size for c in matrix.cells})
    lower = args.lower if args.lower is not None else sizes[0]
    upper = args.upper if args.upper is not None else sizes[-1]
    check_bounds(lower, upper, args.strategy)
    cap = args.gpu_memory_gb if args.gpu_memory_gb is not None else matrix.settings.gpu_memory_gb
    check_cap(cap, [c.device for c in matrix.cells])
    given = parse_lengths(args.lengths) if args.lengths else None

    # One search per configuration (batch size and workload set aside) and per length pair.
    searches: dict = {}
    for cell in matrix.cells:
        pairs = given or [workload_lengths(cell.workload)]
        for in_len, out_len in pairs:
            probe_lengths(in_len, out_len, args.decode_steps)  # validates before any run
            key = (cell.backend, cell.model, cell.precision, cell.device, cell.options, in_len, out_len)
            searches.setdefault(key, (cell, in_len, out_len))

    store = query.check_store_path(args.store or f"results/{matrix.name}-oom.jsonl", must_exist=False)
    console = Console(stderr=True)
    console.print(f"OOM search: {len(searches)} configuration(s), batch sizes {lower}..{upper} ({args.strategy}), "
                  f"memory cap {'none' if cap is None else f'{cap:g} GB'} -> {store}")
    failed = 0
    context = new_context("oom", matrix=matrix.name, gpu_memory_gb=cap, warmup=0)
    with ResultStore(store).writer():
        failed = _search_all(searches, args, store, cap, matrix, context, console, (lower, upper))
    table = frontier_markdown(frontier_rows(query.load([store]))) if store.exists() else frontier_markdown([])
    path = write_atomic(Path(args.report_dir or f"dashboards/{matrix.name}") / "oom-frontier.md", table)
    print(table)
    console.print(f"frontier: {path}")
    return 1 if failed else 0


def _search_all(searches: dict, args, store: Path, cap, matrix, context, console, bounds: tuple[int, int]) -> int:
    """Run every configuration's boundary search; return how many could not be decided."""
    from bench.oom.probes import ProbeRunner, find_boundary
    from bench.oom.search import ProbeFailed

    lower, upper = bounds
    failed = 0
    for cell, in_len, out_len in searches.values():
        runner = ProbeRunner(cell, in_len, out_len, store, decode_steps=args.decode_steps, gpu_memory_gb=cap,
                             redo=args.redo, matrix_name=matrix.name, timeout_s=matrix.settings.timeout_s,
                             build_timeout_s=matrix.settings.build_timeout_s, context=context)
        label = f"{cell.backend}/{cell.precision} {in_len}/{out_len}"
        try:
            b = find_boundary(runner, lower, upper, args.strategy, confirm=not args.no_confirm)
        except ProbeFailed as exc:
            failed += 1
            console.print(f"[red]{label}: {exc}")
            continue
        ran = [p for p in b.probes if not p.reused]
        per_probe = sum(p.seconds for p in ran) / len(ran) if ran else 0.0
        console.print(f"{label}: largest fit {b.largest_fit}, smallest OOM {b.smallest_oom}; {len(b.probes)} probes "
                      f"({len(ran)} run, {per_probe:.1f} s each)" + (f"; FLAKY sizes {b.flaky_sizes}" if b.flaky_sizes else ""))
    return failed
