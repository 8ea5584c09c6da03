"""The driver of `bench run`: the run of a matrix, then its report (a study's `run` and `report` steps).

`run_and_report` checks everything a run needs before it starts (the baseline, the report folder;
a missing plotly is said before the run, which stores its records whatever the report needs),
runs the matrix (bench.runner.matrix.run_matrix: every record stored as it arrives) and builds
the report of its store (bench.report.build.build_report). A dry run lists the cells and the
estimate from stored records instead (bench.runner.matrix.run_estimate).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError


@dataclass(frozen=True)
class RunAndReport:
    """What `bench run` did: the dry run's plan, or the run's summary and its report (or why there is none)."""

    plan_text: str | None = None  # a dry run: the cells and the estimate (nothing ran)
    summary: object | None = None  # bench.runner.matrix.RunSummary
    markdown: str | None = None  # the speedup tables, as written
    paths: dict = field(default_factory=dict)  # every file the report wrote, by kind
    warnings: tuple[str, ...] = ()  # the report's warnings that its tables do not already print
    report_error: str | None = None  # why no report was built

    @property
    def exit_status(self) -> int:
        """Return 1 if a cell failed (error, timeout), else 0."""
        statuses = self.summary.statuses if self.summary is not None else {}
        return 1 if statuses.get("error") or statuses.get("timeout") else 0


def run_and_report(matrix, console, *, store: str | Path | None = None, report_dir: str | Path | None = None,
                   baseline: str | None = None, all_cells=None, redo: bool = False, dry_run: bool = False,
                   history: list = (), show_progress: bool = True, accuracy_capture: bool = False,
                   profile_window: bool = False) -> RunAndReport:
    """Run the matrix into its store (default results/<matrix>.jsonl) and build its report (default
    dashboards/<store name>: `--store results/head.jsonl` reports into dashboards/head/, never over another
    store's report).

    baseline: the --baseline text (default: the matrix's); a named one must match a cell of all_cells
    (the matrix before --only). Progress and the run's lines go to `console`. profile_window: each run process of
    an hf cell also profiles one decode-step window through its timed model (bench.runner.windows).
    """
    from bench.files import check_output_dir
    from bench.report.dashboard import require_plotly
    from bench.runner.matrix import run_estimate, run_matrix, statuses_text
    from bench.spec.baseline import check_baseline
    from bench.spec.narrow import parse_pairs

    chosen = parse_pairs(baseline) or matrix.baseline
    check_baseline(chosen, matrix.cells)  # an ambiguous baseline fails now, not after the run
    if baseline:  # a named baseline must name a cell of the matrix (before --only: a slice may leave it out)
        check_baseline(chosen, all_cells if all_cells is not None else matrix.cells, must_match=True)
    from bench.results.jsonl import store_name

    store = Path(store or f"results/{matrix.name}.jsonl")
    # The report is the store's: named after it, so two stores of one matrix never share a folder.
    report_dir = check_output_dir(report_dir or f"dashboards/{store_name(store)}", "--report-dir")  # before the run
    st = matrix.settings
    where = f"executor {st.executor}" + (f" on {','.join(st.devices)}" if st.devices else "") + (
        f" at {st.ray_address}" if st.ray_address else "")
    console.print(f"matrix [bold]{matrix.name}[/]: {len(matrix.cells)} cells x {st.runs} run(s) x {st.trials} trials -> "
                  f"{store} ({where})")
    try:
        require_plotly()  # said before the run, which stores its records whatever the report needs
    except BenchInputError as exc:
        console.print(f"[yellow]warning: {exc}; the run stores its records, its report will not be built")
    if dry_run:
        lines = [f"{c.cell_id}  {c.label}" for c in matrix.cells]
        return RunAndReport(plan_text="\n".join([*lines, run_estimate(matrix, store, history, redo=redo).text()]))
    summary = run_matrix(matrix, store, redo=redo, show_progress=show_progress, console=console,
                         accuracy_capture=accuracy_capture, all_cells=all_cells, profile_window=profile_window)
    console.print(f"done in {summary.elapsed_s:.1f} s: {statuses_text(summary.statuses)}; {summary.skipped} trial(s) "
                  "already stored" + (f"; run id {summary.run_id}" if summary.run_id else "")
                  + (f"; {summary.windows} profile window(s) in {summary.profile_store}" if profile_window else ""),
                  highlight=False)
    return _with_report(summary, store, report_dir, chosen)


def _with_report(summary, store: Path, report_dir: Path, baseline: dict | None) -> RunAndReport:
    from bench.report.build import build_report

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            paths = build_report([store], report_dir, baseline)
    except BenchInputError as exc:
        return RunAndReport(summary=summary, report_error=str(exc))
    markdown = paths["markdown"].read_text()
    # The tables' own warnings are printed with them: once is enough.
    rest = tuple(w for w in dict.fromkeys(str(w.message) for w in caught) if w not in markdown)
    return RunAndReport(summary=summary, markdown=markdown, paths=paths, warnings=rest)


def written_text(paths: dict) -> str:
    """Return every file a report build wrote, named, e.g. 'tables: a.md, a.csv, a.html; report: r.md; dashboard: d.html'."""
    groups = (("tables", ("markdown", "csv", "html")), ("report", ("report",)), ("OOM frontier", ("frontier",)),
              ("kernels", ("kernels",)), ("dashboard", ("dashboard",)))
    parts = [f"{name}: " + ", ".join(str(paths[k]) for k in keys if k in paths)
             for name, keys in groups if any(k in paths for k in keys)]
    return "; ".join(parts)
