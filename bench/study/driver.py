"""The driver of `bench study`: the whole study of a matrix in one command: run, OOM frontier, profiles, accuracy, report.

The same drivers as the five commands, in order, each step's equivalent command line printed
before it runs:

1. `bench run`      -> results/<matrix>.jsonl (bench.runner.matrix.run_matrix)
2. `bench oom`      -> results/<matrix>-oom.jsonl (bench.oom.driver.search_matrix), one search per
                       entry of the matrix's [study.oom] `searches`
3. `bench profile`  -> profiles/<matrix>.jsonl (bench.profiling.driver.profile_matrix)
4. `bench accuracy` -> results/<matrix>-accuracy.jsonl (bench.accuracy.driver.accuracy_matrix): every
                       cell (or those of [study.accuracy] `only`) against its baseline, through its
                       own runtime, with the matrix's [accuracy] settings and thresholds
5. `bench report`   -> dashboards/<matrix>/report.md and dashboard.html over all four stores

What steps 2-4 cover comes from the matrix file's [study] table (bench.study.plan). Everything is
checked before the first step runs. A step that fails (a cell's error or timeout, an undecided
search, a failed session) does not stop the later steps; the exit status is then 1. Each
invocation adds its steps' times and failures to <report dir>/study.json (a study run in parts
keeps every part's figures). A dry run returns the plan and an estimate from stored records.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BenchInputError, choices
from bench.study.plan import STEPS


@dataclass(frozen=True)
class StudyOutcome:
    """What `bench study` did: the dry run's plan, or each step's time and failures and the report's text."""

    plan_text: str | None = None  # a dry run: the plan and the estimate (nothing ran)
    steps_s: dict = field(default_factory=dict)  # step -> seconds, this invocation
    failed: dict = field(default_factory=dict)  # step -> how many of its parts failed
    report: str | None = None  # report.md as written by the report step
    summary: Path | None = None  # study.json

    @property
    def exit_status(self) -> int:
        """Return 1 if any step failed, else 0."""
        return 1 if any(self.failed.values()) else 0


def run_study(console, *, preset: str | None = None, matrix_file: str | None = None, steps: str | None = None,
              requests: int | None = None, runs: int | None = None, redo: bool = False, dry_run: bool = False,
              history: list = (), show_progress: bool = True, report_dir: str | Path | None = None) -> StudyOutcome:
    """Check the study of a matrix with a [study] table, then run its steps (`steps`: 'run,oom'; None: all, in order)."""
    from bench.spec.baseline import check_baseline
    from bench.spec.matrix import check_cuda, load_matrix
    from bench.spec.narrow import narrow
    from bench.study.plan import dry_run_text, step_commands, study_plan, study_source

    steps = [s.strip() for s in (",".join(STEPS) if steps is None else steps).split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        raise BenchInputError(f"--steps: unknown step {bad[0] if bad else '(none)'!r}; steps are {choices(STEPS)}")
    path = study_source(preset, matrix_file)
    # Planning (--dry-run) needs no optional package (torchao, ...); a real run checks them here, before any work.
    with warnings.catch_warnings(record=True) as said:  # held back: a refusal below is then the one line printed
        warnings.simplefilter("always")
        matrix = narrow(load_matrix(path, check_installed=not dry_run), requests=requests, runs=runs)
    if not dry_run:  # GPU cells on a machine without CUDA: refused before any step
        check_cuda(matrix.cells)
    for w in dict.fromkeys(str(w.message) for w in said):
        warnings.warn(w, stacklevel=2)
    plan = study_plan(path, matrix, check_devices=not dry_run)
    check_baseline(matrix.baseline, matrix.cells)
    name = matrix.name
    stores = {"run": Path(f"results/{name}.jsonl"), "oom": Path(f"results/{name}-oom.jsonl"),
              "profile": Path(f"profiles/{name}.jsonl"), "accuracy": Path(f"results/{name}-accuracy.jsonl")}
    report_dir = Path(report_dir or f"dashboards/{name}")
    commands = step_commands(plan, preset, matrix_file, requests, runs)
    if dry_run:
        return StudyOutcome(plan_text=dry_run_text(plan, steps, stores, history, commands, redo))
    from bench.files import check_output_dir

    check_output_dir(report_dir, "--report-dir")  # before any step runs
    if "report" in steps:
        from bench.report.dashboard import require_plotly

        try:
            require_plotly()  # the study's last step: refused now, not after its GPU time
        except BenchInputError as exc:
            raise BenchInputError(f"{exc}; or leave the report out (--steps {','.join(s for s in steps if s != 'report')})") from exc
    timings: dict[str, float] = {}
    failed: dict[str, int] = {}
    report = None
    for step in steps:
        if step == "accuracy" and plan.accuracy_matrix is None:
            console.print(f"[yellow]study: {plan.accuracy_note}", highlight=False)
            continue  # cells bench accuracy cannot measure, and no [study.accuracy] table asked for them
        t0 = time.monotonic()
        if step == "run":
            failed["run"] = _run(plan.matrix, stores["run"], redo, show_progress, console, commands["run"])
        elif step == "oom":
            failed["oom"] = _oom(plan, stores["oom"], redo, console, commands, report_dir)
        elif step == "profile" and plan.profile is not None:
            from bench.profiling.driver import profile_matrix

            console.print(f"[bold]study: profile[/] ({commands['profile']})")
            _, failed["profile"] = profile_matrix(plan.profile_matrix, plan.profile, Path("profiles"), stores["profile"],
                                                  printer=_to_stderr)
        elif step == "accuracy":
            from bench.accuracy.driver import accuracy_matrix

            console.print(f"[bold]study: accuracy[/] ({commands['accuracy']})")
            _, failed["accuracy"] = accuracy_matrix(plan.accuracy_matrix, plan.matrix.cells, plan.matrix.accuracy,
                                                    stores["accuracy"], redo=redo, printer=_to_stderr)
        elif step == "report":
            failed["report"], report = _report(stores, report_dir, plan.matrix, console, commands["report"])
        timings[step] = time.monotonic() - t0
    path, summary = _summarize(report_dir, name, timings, failed, commands, stores)
    console.print("study: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
                  + f"; this invocation {sum(timings.values()):.0f} s; all steps so far "
                  f"{sum(summary['steps_s'].values()):.0f} s; {path}")
    return StudyOutcome(steps_s=timings, failed=failed, report=report, summary=path)


def _to_stderr(text: str) -> None:
    """Print a step's per-cell text on stderr: the study's stdout is its report's."""
    print(text, file=sys.stderr)


def _summarize(report_dir: Path, name: str, timings: dict, failed: dict, commands: dict, stores: dict) -> tuple[Path, dict]:
    """Write report_dir/study.json and return (its path, what it holds): every step's time and failures so far
    (earlier invocations' kept), the commands, the stores."""
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "study.json"
    # A study run in parts (--steps run, then --steps oom,profile,report) keeps every part's figures.
    summary = json.loads(path.read_text()) if path.is_file() else {}
    if summary.get("matrix") != name:
        summary = {}
    summary = {"matrix": name, "steps_s": {**summary.get("steps_s", {}), **timings},
               "failed": {**summary.get("failed", {}), **failed}, "commands": commands,
               "stores": {k: str(v) for k, v in stores.items()}}
    path.write_text(json.dumps(summary, indent=1))
    return path, summary


def _run(matrix, store: Path, redo: bool, show_progress: bool, console, command: str) -> int:
    from bench.runner.matrix import run_matrix

    console.print(f"[bold]study: run[/] ({command})")
    summary = run_matrix(matrix, store, redo=redo, show_progress=show_progress, console=console)
    console.print(f"run: {summary.elapsed_s:.0f} s: {summary.statuses or 'nothing new'}; {summary.skipped} trial(s) already "
                  f"stored" + (f"; run id {summary.run_id}" if summary.run_id else ""))
    return summary.statuses.get("error", 0) + summary.statuses.get("timeout", 0)


def _oom(plan, store: Path, redo: bool, console, commands: dict, report_dir: Path) -> int:
    from bench.oom.driver import search_matrix

    failed = 0
    for i, settings in enumerate(plan.oom):
        console.print(f"[bold]study: oom[/] ({commands[f'oom{i}']})")
        n, _ = search_matrix(plan.oom_matrix, replace(settings, redo=redo), store, console, report_dir)
        failed += n
    return failed


def _report(stores: dict, report_dir: Path, matrix, console, command: str) -> tuple[int, str | None]:
    """Return (1 if no report was built, else 0; report.md's text)."""
    from bench.report.build import build_report

    console.print(f"[bold]study: report[/] ({command})")
    runs = [str(stores[k]) for k in ("run", "oom", "accuracy") if stores[k].exists()]
    profiles = [str(stores["profile"])] if stores["profile"].exists() else []
    if not runs and not profiles:
        console.print("[yellow]report not built: no store was written")
        return 1, None
    try:
        paths = build_report(runs or profiles, report_dir, matrix.baseline, profiles=profiles if runs else [])
    except BenchInputError as exc:
        console.print(f"[yellow]report not built: {exc}")
        return 1, None
    console.print(f"report: {paths['report']}; dashboard: {paths.get('dashboard')}")
    return 0, paths["report"].read_text()
