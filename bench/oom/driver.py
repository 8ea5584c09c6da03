"""The driver of `bench oom`: the largest max_batch_size that fits, per configuration and length pair of a matrix.

`plan_searches` turns the matrix and the flags (`OomSettings`) into one search per configuration
(a cell with its batch size and workload set aside) and length pair, checked before any run;
`search_matrix` runs them (bench.oom.probes: every probe a worker through the supervisor, stored
as an `oom-probe` record; bench.oom.search: the boundary) and writes the frontier table.
`bench study` calls `search_matrix` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchInputError
from bench.files import check_output_dir, write_atomic


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


def search_matrix(matrix, settings: OomSettings, store: Path, console, report_dir: Path | None = None) -> tuple[int, str]:
    """Run the matrix's boundary searches, storing every probe; write report_dir/oom-frontier.md (default:
    bench.results.jsonl.search_report_dir).

    Return (how many searches could not be decided, the frontier table of the whole store).
    """
    from bench.oom.search import frontier_markdown, frontier_rows
    from bench.results import query
    from bench.results.jsonl import search_report_dir
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    searches, (lower, upper), cap = plan_searches(matrix, settings)
    report_dir = Path(report_dir or search_report_dir(store, matrix.name, "oom"))
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
    from bench.machine.failures import first_line
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
            console.print(f"{label}: probe at batch size {exc.outcome.batch_size} ended {exc.outcome.status}: "
                          f"{first_line(exc.outcome.error)} (whole text in the store)", style="red", highlight=False,
                          markup=False)
            continue
        ran = [p for p in b.probes if not p.reused]
        per_probe = sum(p.seconds for p in ran) / len(ran) if ran else 0.0
        console.print(f"{label}: largest fit {b.largest_fit}, smallest OOM {b.smallest_oom}; {len(b.probes)} probes "
                      f"({len(ran)} run, {per_probe:.1f} s each)" + (f"; FLAKY sizes {b.flaky_sizes}" if b.flaky_sizes else ""))
    return failed
