"""`bench oom`: find the largest max_batch_size that fits for each configuration of a matrix.

`search_matrix` is the library entry (`bench study` calls it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix
from bench.errors import BenchInputError
from bench.files import check_output_dir, write_atomic


def register(sub) -> None:
    r = sub.add_parser(
        "oom",
        help="search the OOM boundary (largest max_batch_size that fits) per backend x precision x options x lengths",
        description="Probes each configuration of the matrix with one full batch of worst-case requests "
        "(see docs/guide/oom.md); the matrix's max_batch_sizes are ignored except as default bounds.",
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


@dataclass(frozen=True)
class OomSettings:
    """What `bench oom` searches: lengths, bounds, strategy, probe shape, memory cap (its flags)."""

    lengths: tuple[tuple[int, int], ...] | None = None  # None: each workload's worst case
    lower: int | None = None  # None: the matrix's smallest max_batch_size
    upper: int | None = None  # None: its largest
    strategy: str = "grow"
    decode_steps: int = 4
    confirm: bool = True
    gpu_memory_gb: float | None = None  # None: the matrix's
    redo: bool = False


def cmd_oom(args) -> int:
    from rich.console import Console

    matrix = load_selected_matrix(args)
    settings = OomSettings(lengths=tuple(parse_lengths(args.lengths)) if args.lengths else None, lower=args.lower,
                           upper=args.upper, strategy=args.strategy, decode_steps=args.decode_steps,
                           confirm=not args.no_confirm, gpu_memory_gb=args.gpu_memory_gb, redo=args.redo)
    store = Path(args.store or f"results/{matrix.name}-oom.jsonl")
    failed, table = search_matrix(matrix, settings, store, Console(stderr=True, soft_wrap=True),
                                  Path(args.report_dir or f"dashboards/{matrix.name}"))
    print(table)
    return 1 if failed else 0


def plan_searches(matrix, settings: OomSettings, check_devices: bool = True) -> tuple[dict, tuple[int, int], float | None]:
    """Return (one search per configuration and length pair, the batch-size bounds, the cap); BenchInputError if bad.

    A configuration is a cell with its batch size and workload set aside. Nothing runs here.
    check_devices=False skips the cap's check against the device (planning on another machine).
    """
    from bench.machine.memory_cap import check_cap
    from bench.oom.search import check_bounds, probe_lengths

    sizes = sorted({c.max_batch_size for c in matrix.cells})
    lower = settings.lower if settings.lower is not None else sizes[0]
    upper = settings.upper if settings.upper is not None else sizes[-1]
    check_bounds(lower, upper, settings.strategy)
    cap = settings.gpu_memory_gb if settings.gpu_memory_gb is not None else matrix.settings.gpu_memory_gb
    if check_devices:
        check_cap(cap, [c.device for c in matrix.cells])
    searches: dict = {}
    for cell in matrix.cells:
        pairs = settings.lengths or [workload_lengths(cell.workload)]
        for in_len, out_len in pairs:
            probe_lengths(in_len, out_len, settings.decode_steps)  # validates before any run
            key = (cell.backend, cell.model, cell.precision, cell.device, cell.options, in_len, out_len)
            searches.setdefault(key, (cell, in_len, out_len))
    return searches, (lower, upper), cap


def search_matrix(matrix, settings: OomSettings, store: Path, console, report_dir: Path) -> tuple[int, str]:
    """Run the matrix's boundary searches, storing every probe; write report_dir/oom-frontier.md.

    Return (how many searches could not be decided, the frontier table of the whole store).
    """
    from bench.oom.search import frontier_markdown, frontier_rows
    from bench.results import query
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    searches, (lower, upper), cap = plan_searches(matrix, settings)
    store = query.check_store_path(store, must_exist=False)
    check_output_dir(report_dir, "--report-dir")
    console.print(f"OOM search: {len(searches)} configuration(s), batch sizes {lower}..{upper} ({settings.strategy}), "
                  f"memory cap {'none' if cap is None else f'{cap:g} GB'} -> {store}")
    context = new_context("oom", matrix=matrix.name, gpu_memory_gb=cap, warmup=0)
    with ResultStore(store).writer():
        failed = _search_all(searches, settings, store, cap, matrix, context, console, (lower, upper))
    table = frontier_markdown(frontier_rows(query.load([store]))) if store.exists() else frontier_markdown([])
    path = write_atomic(Path(report_dir) / "oom-frontier.md", table)
    console.print(f"frontier: {path}")
    return failed, table


def _search_all(searches: dict, settings: OomSettings, store: Path, cap, matrix, context, console,
                bounds: tuple[int, int]) -> int:
    """Run every configuration's boundary search; return how many could not be decided."""
    from bench.oom.probes import ProbeRunner, find_boundary
    from bench.oom.search import ProbeFailed

    lower, upper = bounds
    failed = 0
    for cell, in_len, out_len in searches.values():
        runner = ProbeRunner(cell, in_len, out_len, store, decode_steps=settings.decode_steps, gpu_memory_gb=cap,
                             redo=settings.redo, matrix_name=matrix.name, timeout_s=matrix.settings.timeout_s,
                             build_timeout_s=matrix.settings.build_timeout_s, context=context)
        label = f"{cell.backend}/{cell.precision} {in_len}/{out_len}"
        try:
            b = find_boundary(runner, lower, upper, settings.strategy, confirm=settings.confirm)
        except ProbeFailed as exc:
            failed += 1
            console.print(f"[red]{label}: {exc}")
            continue
        ran = [p for p in b.probes if not p.reused]
        per_probe = sum(p.seconds for p in ran) / len(ran) if ran else 0.0
        console.print(f"{label}: largest fit {b.largest_fit}, smallest OOM {b.smallest_oom}; {len(b.probes)} probes "
                      f"({len(ran)} run, {per_probe:.1f} s each)" + (f"; FLAKY sizes {b.flaky_sizes}" if b.flaky_sizes else ""))
    return failed
