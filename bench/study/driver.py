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
search, a failed session) does not stop the later steps; the exit status is then 1. Each step's
time and failures go to <report dir>/study.json as soon as it ends (a study run in parts keeps
every part's figures). A study stopped by SIGTERM (`timeout`, a job scheduler) or Ctrl-C writes the
time its unfinished step had run as a cut part; the invocation that finishes the step adds it, so
a step resumed across calls is timed whole (`cut_s` holds the parts of steps not yet finished).
A dry run returns the plan and an estimate from stored records.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BenchInputError, choices
from bench.files import write_atomic
from bench.interrupts import sigterm_as_ctrl_c
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
    _check_stores(steps, stores)  # a store a later step cannot read: refused now, not after the run step's GPU time
    timings: dict[str, float] = {}
    failed: dict[str, int] = {}
    report = None
    record = _Summary(report_dir, name, commands, stores, redo)
    with sigterm_as_ctrl_c():  # `timeout` stops a study as Ctrl-C does: the step in progress is kept as cut
        for step in steps:
            if step == "accuracy" and plan.accuracy_matrix is None:
                console.print(f"[yellow]study: {plan.accuracy_note}", highlight=False)
                continue  # cells bench accuracy cannot measure, and no [study.accuracy] table asked for them
            t0 = time.monotonic()
            try:
                report = _step(step, plan, stores, commands, report_dir, redo, show_progress, console, failed) or report
            except BaseException:  # stopped (SIGTERM, Ctrl-C) or crashed: the part it ran is kept as cut
                record.cut(step, time.monotonic() - t0)
                raise
            timings[step] = time.monotonic() - t0
            record.done(step, timings[step], failed.get(step, 0))
    path, summary = record.path, record.summary
    console.print("study: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
                  + f"; this invocation {sum(timings.values()):.0f} s; all steps so far "
                  f"{sum(summary['steps_s'].values()):.0f} s; {path}")
    return StudyOutcome(steps_s=timings, failed=failed, report=report, summary=path)


def _to_stderr(text: str) -> None:
    """Print a step's per-cell text on stderr: the study's stdout is its report's."""
    print(text, file=sys.stderr)


def _read_summary(path: Path) -> dict:
    """Return an earlier study.json, checked: the figures it adds to are numbers (a file is untrusted input); a
    BenchInputError that names it and the fix otherwise, before any step runs and with the file left as it is."""
    from bench.checks import check_number

    fix = f"move {path} away or delete it (it holds only the earlier steps' times), or pass another --report-dir"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BenchInputError(f"{path} is not a study summary bench wrote ({exc}): {fix}") from exc
    shapes = ("steps_s", "failed", "cut_s")  # {step: seconds}, {step: count}, {step: [seconds, ...]}
    if not isinstance(summary, dict) or not all(isinstance(summary.get(k, {}), dict) for k in shapes):
        raise BenchInputError(f"{path} is not a study summary bench wrote (not an object of steps_s, failed, cut_s): {fix}")
    calls = summary.get("invocations", [])  # [{started, redo, steps_s, cut?}]: each invocation's own parts
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("steps_s", {}), dict)
                                              for c in calls):
        raise BenchInputError(f"{path}: invocations must be a list of objects with steps_s: {fix}")
    for key, step, value in ((k, st, v) for k in shapes for st, v in summary.get(k, {}).items()):
        if key == "cut_s" and not isinstance(value, list):
            raise BenchInputError(f"{path}: cut_s[{step!r}] must be a list of seconds, got {value!r}: {fix}")
        for number in (value if key == "cut_s" else [value]):
            check_number(number, f"{path}: {key}[{step!r}]", integer=key == "failed", minimum=0, hint=fix)
    return summary


def _step(step: str, plan, stores: dict, commands: dict, report_dir: Path, redo: bool, show_progress: bool, console,
          failed: dict) -> str | None:
    """Run one step through its command's driver; its failures go to `failed`. Return the report's text (report step)."""
    if step == "run":
        failed["run"] = _run(plan.matrix, stores["run"], redo, show_progress, console, commands["run"],
                             capture=plan.accuracy_matrix is not None)
    elif step == "oom":
        failed["oom"] = _oom(plan, stores["oom"], redo, console, commands, report_dir)
    elif step == "profile" and plan.profile is not None:
        failed["profile"] = _profile(plan, stores["profile"], redo, console, commands["profile"])
    elif step == "accuracy":
        from bench.accuracy.driver import accuracy_matrix

        console.print(f"[bold]study: accuracy[/] ({commands['accuracy']})")
        _, failed["accuracy"] = accuracy_matrix(plan.accuracy_matrix, plan.matrix.cells, plan.matrix.accuracy,
                                                stores["accuracy"], redo=redo, printer=_to_stderr,
                                                parallel=plan.accuracy_parallel)
    elif step == "report":
        failed["report"], report = _report(stores, report_dir, plan.matrix, console, commands["report"])
        return report
    return None


class _Summary:
    """report_dir/study.json, written after every step: each finished step's seconds (with the cut parts of it that
    earlier invocations ran) and failures, the cut parts of unfinished steps, the commands and the stores. A study
    run in parts (--steps run, then --steps oom,profile,report) keeps every part's figures."""

    def __init__(self, report_dir: Path, name: str, commands: dict, stores: dict, redo: bool = False):
        report_dir.mkdir(parents=True, exist_ok=True)
        self.path = report_dir / "study.json"
        summary = _read_summary(self.path) if self.path.is_file() else {}
        if summary.get("matrix") != name:
            summary = {}
        self.redo = redo
        self.summary = {"matrix": name, "steps_s": summary.get("steps_s", {}), "failed": summary.get("failed", {}),
                        "cut_s": summary.get("cut_s", {}), "commands": commands,
                        "stores": {k: str(v) for k, v in stores.items()},
                        "invocations": summary.get("invocations", [])}
        self.this = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "redo": redo, "steps_s": {}}
        self.summary["invocations"].append(self.this)
        self._write()

    def done(self, step: str, seconds: float, failed: int) -> None:
        """A step ended: its time is this part plus the cut parts earlier invocations ran of it, plus, where an
        earlier invocation finished it and this one resumed it (no --redo: only what the stores lacked ran), the
        earlier time: a study re-run with the same command after a cut is timed whole, never as its last call."""
        cut = sum(self.summary["cut_s"].pop(step, []))  # with --redo the step began afresh: its cut parts are not it
        earlier = 0.0 if self.redo else self.summary["steps_s"].get(step, 0.0) + cut
        self.summary["steps_s"][step] = earlier + seconds
        self.summary["failed"][step] = failed
        self.this["steps_s"][step] = seconds
        self._write()

    def cut(self, step: str, seconds: float) -> None:
        """A step was stopped: the seconds it ran wait in cut_s for the invocation that finishes it."""
        self.summary["cut_s"].setdefault(step, []).append(seconds)
        self.this["cut"] = {step: seconds}
        self._write()

    def _write(self) -> None:
        write_atomic(self.path, json.dumps(self.summary, indent=1))  # never half a file, whenever the study is stopped


def _run(matrix, store: Path, redo: bool, show_progress: bool, console, command: str, capture: bool = False) -> int:
    """Run the study's matrix; where the study judges accuracy, each cell's first run also captures its accuracy inputs
    in the timed process (bench.execution.accuracy_capture), which that step scores instead of compiling again."""
    from bench.runner.matrix import run_matrix

    console.print(f"[bold]study: run[/] ({command})")
    summary = run_matrix(matrix, store, redo=redo, show_progress=show_progress, console=console, accuracy_capture=capture)
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


def _profile(plan, store: Path, redo: bool, console, command: str) -> int:
    """Profile the study's profile cells; resumed (no --redo), only those the store holds no whole profile of, as the
    run and OOM steps reuse what their stores hold. Return how many sessions failed."""
    from bench.profiling.driver import profile_matrix
    from bench.results import query
    from bench.study.plan import profile_cells_left

    console.print(f"[bold]study: profile[/] ({command})")
    cells = plan.profile_matrix.cells
    left = profile_cells_left(plan, query.load([store]) if store.is_file() and not redo else [], redo)
    if len(left) < len(cells):
        console.print(f"profile: {len(cells) - len(left)} of {len(cells)} cell(s) already profiled in {store} "
                      "(--redo profiles them again)", highlight=False)
    if not left:
        return 0
    return profile_matrix(replace(plan.profile_matrix, cells=tuple(left)), plan.profile, Path("profiles"), store,
                          printer=_to_stderr)[1]


def _check_stores(steps: list[str], stores: dict) -> None:
    """Read the stores of the steps after the first that resume from them (OOM, profile, accuracy): one bench cannot
    read is refused before any step runs, named with the fix, and left as it is. The first step's own driver checks
    its store before it does any work."""
    from bench.results import query

    for step in steps[1:]:
        store = stores.get(step)
        if store is not None and store.is_file():
            try:
                query.load([store])
            except BenchInputError as exc:
                raise BenchInputError(f"{exc}. The study's {step} step resumes from {store}: move it away (its step "
                                      "then starts afresh) or give the store bench wrote; no step has run") from exc


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
