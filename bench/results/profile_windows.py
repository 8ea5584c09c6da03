"""Which profile windows stand for a side of a comparison: the windows of its own timed processes where it has them,
else the latest profiling invocation's.

A regressed cell's side is attributed from its stored Profile records (bench.results.attribution). Two kinds:

- windows of the timed processes (`bench run --profile-window`): each run process profiled one window through the model
  it had just timed, after its trials; the record carries the run's context and `run`, so a window is matched to the
  process whose figures the side compares, (run_id, run). Where any of the side's compared processes has one, those
  windows are the side's: a host-bound step moves 10-40 % between processes of one GPU host, so a window of another
  process explains another process's step;
- windows of profiling sessions (`bench profile`, `bench compare --profile`): the latest ok invocation of the cell,
  preferring one made at the side's commit, all of its processes (`--processes N`); read where the side's processes have
  no window, as before windows of the timed processes existed (a record without `from` is a session's).

Profile records are untrusted data: a kernel table they name is opened only under its profile store's folder (the path
as stored, or its last three parts there: `table_file`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from bench.checks import is_finite_number
from bench.errors import BenchInputError

PROFILE_DIR = Path("profiles")
TIMED_PROCESSES = "the timed processes"
SESSIONS = "profiling sessions"


def default_profile_store(matrix: str) -> Path:
    """Return a matrix's profile store where `bench profile`, `bench run --profile-window` and `bench compare --profile`
    write by default and `bench compare` looks first: profiles/<matrix>.jsonl."""
    return PROFILE_DIR / f"{matrix}.jsonl"


@dataclass(frozen=True)
class WindowsFrom:
    """Where a side's windows came from: the timed processes (how many of the side's runs have one, and those runs'
    own step time) or profiling sessions."""

    source: str  # TIMED_PROCESSES or SESSIONS
    runs: int  # the side's compared runs (processes with an ok trial)
    with_window: int  # of them, those whose window is read (0 for sessions)
    runs_step_us: float | None = None  # the mean step (TPOT, µs) of the runs that have a window; None for sessions
    # what the windows cost their processes (lowest and highest seconds, profiler, trace and kernel table included;
    # from the records' start and end), the attribution's own cost to a side measured with windows; None: not stored
    cost_s: tuple[float, float] | None = None

    @property
    def timed(self) -> bool:
        return self.source == TIMED_PROCESSES

    def to_dict(self) -> dict:
        out = {"from": self.source, "runs": self.runs}
        if self.timed:
            out.update(runs_with_window=self.with_window, runs_step_us=self.runs_step_us,
                       window_cost_s=list(self.cost_s) if self.cost_s else None)
        return out


def profile_stores(side_paths, matrices: set[str], explicit: str | Path | None) -> list[Path]:
    """Return the profile stores of a side: the one given, else profiles/<matrix>.jsonl of each of its matrices, here
    and beside the result store's folder (`bench profile`'s and `bench study`'s default), those that exist."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise BenchInputError(f"profile store {str(path)!r} does not exist: give the profile records' store "
                                  "(`bench profile` writes profiles/<matrix>.jsonl), or leave --profiles out")
        return [path]
    candidates = []
    for matrix in sorted(m for m in matrices if m):
        candidates.append(default_profile_store(matrix))
        for store in side_paths:
            candidates.append(Path(store).resolve().parent.parent / PROFILE_DIR / f"{matrix}.jsonl")
    out: list[Path] = []
    for c in candidates:
        if c.is_file() and all(c.resolve() != o.resolve() for o in out):
            out.append(c)
    return out


def table_file(named: str | None, store: Path) -> Path | None:
    """Return the kernel table a profile record names, only where it lies under its store's folder; else None."""
    if not named:
        return None
    root = store.resolve().parent
    p = Path(named)
    for candidate in ([p] if p.is_absolute() else [root / p]) + ([root / Path(*p.parts[-3:])] if len(p.parts) >= 3 else []):
        try:
            resolved = candidate.resolve()
        except OSError:
            continue
        if resolved.is_file() and resolved.is_relative_to(root):
            return resolved
    return None


def side_windows(records: list, cell_runs, commits: tuple[str, ...], step_metric: str) -> tuple[dict[str, list],
                                                                                               WindowsFrom]:
    """Return ({tool: the Profile records whose windows stand for this side of the cell, by process}, where they came
    from): the windows of the side's own timed processes where any has one, else the latest profiling invocation's
    (`sessions_of`). `step_metric`: the runs' step time (TPOT, ms) the timed windows' processes are averaged on."""
    ok = cell_runs.ok_records
    processes = {r.process_key for r in ok}
    timed: dict[str, dict] = {}
    for r in records:
        if (r.ok and r.cell_id == cell_runs.cell_id and r.kernel_table and r.from_timed_process
                and r.process_key in processes):
            timed.setdefault(r.tool, {})[r.process_key] = r  # a store holding a record twice counts it once
    if timed:
        chosen = {tool: [by_key[k] for k in sorted(by_key)] for tool, by_key in timed.items()}
        windowed = set().union(*(set(by_key) for by_key in timed.values()))
        per_run: dict[tuple, list[float]] = {}
        for r in ok:
            v = r.metric(step_metric)
            if r.process_key in windowed and v is not None:
                per_run.setdefault(r.process_key, []).append(v)
        means = [sum(v) / len(v) * 1e3 for v in per_run.values()]
        step = sum(means) / len(means) if means and all(math.isfinite(m) and m > 0 for m in means) else None
        return chosen, WindowsFrom(TIMED_PROCESSES, len(processes), len(windowed), step, window_cost(chosen))
    return sessions_of(records, cell_runs, commits), WindowsFrom(SESSIONS, len(processes), 0)


def window_cost(chosen: dict[str, list]) -> tuple[float, float] | None:
    """Return the lowest and highest seconds one timed window took in its process (each record's end less its
    start, plus its unprofiled stage where that ran apart, right after the cell's trials: `timed_stage_s`), or None
    where a record does not say (a record from before windows were timed, or a hostile one)."""
    costs = []
    for recs in chosen.values():
        for r in recs:
            a, b = r.started_at, r.ended_at
            if not (is_finite_number(a) and is_finite_number(b)) or not math.isfinite(b - a) or b < a:
                return None
            apart = r.profile.get("timed_stage_s", 0.0)
            costs.append(float(b - a) + (float(apart) if is_finite_number(apart) and apart > 0 else 0.0))
    return (min(costs), max(costs)) if costs else None


def sessions_of(records: list, cell_runs, commits: tuple[str, ...]) -> dict[str, list]:
    """Return {tool: the latest ok profiling-session records of this exact cell}, preferring those made at the side's
    commit: the latest record's and the other ok ones of its invocation (`bench profile --processes N`: one window per
    process), by process."""
    mine = [r for r in records if r.ok and r.cell_id == cell_runs.cell_id and r.kernel_table and not r.from_timed_process]
    measured = {c.split("+")[0] for c in commits}
    at_commit = [r for r in mine if r.context.commit and any(r.context.commit.startswith(c) for c in measured)]
    chosen = at_commit if len(measured) == 1 and at_commit else mine
    latest: dict[str, object] = {}
    for r in sorted(chosen, key=lambda r: (r.context.started_at or 0.0, r.ended_at or 0.0)):
        latest[r.tool] = r
    out: dict[str, list] = {}
    for tool, last in latest.items():
        same = {}  # one record per process of the latest invocation (a store holding a record twice counts it once)
        for r in chosen:
            if r.tool == tool and r.context.run_id == last.context.run_id:
                same[r.run] = r
        out[tool] = [same[k] for k in sorted(same)]
    return out
