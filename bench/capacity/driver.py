"""The driver of `bench capacity`: the largest load (request rate, concurrency or batch size) whose latency
percentiles meet an SLO, per configuration of a matrix.

`check_search` reads the SLO and the bounds before any work; `capacity_matrix` runs one search per
configuration (a cell with the searched axis set aside: `plan_searches`), every probe's passes
stored as capacity-probe records (bench.capacity.probes), and writes the report's capacity.md.
"""

from __future__ import annotations

from pathlib import Path

from bench.files import write_atomic


def check_search(slo_text: str, axis: str, lower: float | None, upper: float, tolerance: float | None) -> tuple[dict, float]:
    """Return (the SLO, the lower bound: one tolerance step, or 1, when none is given); BenchInputError if bad."""
    from bench.capacity.search import check_grid, parse_slo

    slo = parse_slo(slo_text)
    lower = lower if lower is not None else (tolerance or 1)
    check_grid(axis, lower, upper, tolerance)
    return slo, lower


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


def searched_upper(cell, axis: str, lower: float, upper: float) -> tuple[float, str | None]:
    """Return (the upper bound a cell's search probes, why it is below --upper or None).

    A count axis (max_batch_size, max_concurrency) is capped at the requests the cell's workload holds:
    a batch of 1e15 rows of a 4-request workload is a batch of 4, so every probe above 4 repeats the
    one at 4 and an answer above it says nothing. BenchInputError when even --lower is above it."""
    from bench.errors import BenchInputError

    if axis == "request_rate":
        return upper, None
    held = cell.workload.num_requests
    if lower > held:
        raise BenchInputError(f"capacity search: --lower {lower:g} is above the {held} requests workload "
                              f"{cell.workload.name!r} holds: a {axis} above them runs no more at once; lower --lower or "
                              "raise the workload's num_requests (--requests)")
    if upper <= held:
        return upper, None
    return held, (f"{cell.label}: --upper {upper:g} capped at {held}: workload {cell.workload.name!r} holds {held} "
                  f"requests, so a {axis} above {held} runs no more at once (raise num_requests with --requests to "
                  "search higher)")


def capacity_matrix(matrix, slo: dict, axis: str, lower: float, upper: float, tolerance: float | None,
                    strategy: str, store: Path, console, report_dir: Path | None = None) -> tuple[int, str]:
    """Run each configuration's capacity search (every probe stored); write report_dir/capacity.md (default:
    bench.results.jsonl.search_report_dir).

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
    from bench.results.jsonl import search_report_dir
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    report_dir = Path(report_dir or search_report_dir(store, matrix.name, "capacity"))
    cells = plan_searches(matrix, axis)
    uppers = [searched_upper(cell, axis, lower, upper) for cell in cells]  # before any work
    store = query.check_store_path(store, must_exist=False)
    st = matrix.settings
    context = new_context("capacity", matrix=matrix.name, gpu_memory_gb=st.gpu_memory_gb, runs=st.runs,
                          trials=st.trials, warmup=st.warmup)
    console.print(f"capacity search: {len(cells)} configuration(s), {axis} {lower:g}..{upper:g} ({strategy}), "
                  f"SLO {slo_text(slo)}, {st.runs} run(s) x {st.trials} trial(s) per probe -> {store}")
    parts, missed = [f"## Capacity under an SLO ({matrix.name}, run {context.run_id})", ""], 0
    search = {"lower": lower, "upper": upper, "tolerance": check_grid(axis, lower, upper, tolerance)[0], "strategy": strategy}
    with ResultStore(store).writer():
        for cell, (cell_upper, capped) in zip(cells, uppers, strict=True):
            if capped:
                console.print(capped, style="yellow", highlight=False, markup=False)
            runner = CapacityRunner(cell, axis, slo, store, runs=st.runs, trials=st.trials, warmup=st.warmup,
                                    timeout_s=st.timeout_s, build_timeout_s=st.build_timeout_s,
                                    gpu_memory_gb=st.gpu_memory_gb, context=context,
                                    search={**search, "upper": cell_upper})
            result = search_capacity(runner, axis, lower, cell_upper, tolerance, strategy, slo)
            label = search_label(cell.backend, cell.model, cell.precision, cell.workload.name, cell.max_batch_size, axis)
            missed += result.capacity is None
            busy = result.busy_text()
            console.print(f"{label}: capacity {result.capacity} (first miss {result.first_miss}) after "
                          f"{len(result.probes)} probes" + (f"; not a result: {busy}" if busy else ""),
                          style="yellow" if busy else None, highlight=False, markup=False)
            for p in result.probes:
                if p.failed:
                    console.print(f"{label}: probe at {axis} {p.value:g}: {p.failed} pass(es) failed: {p.error} (whole "
                                  "text in the store)", style="yellow", highlight=False, markup=False)
            parts.append(capacity_markdown(result, label))
    text = "\n".join(parts)
    path = write_atomic(Path(report_dir) / "capacity.md", text)
    console.print(f"report: {path}")
    return missed, text
