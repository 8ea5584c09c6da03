"""The profile windows of a run's timed processes (`bench run --profile-window`): which cells get one, the job each
worker gets, and the Profile record each window makes.

Every run process of a profilable cell (hf, one process: no tensor parallelism), after its last timed pass, profiles one
window of the decode step through the model it timed (bench.execution.profile_window, the window `bench compare
--profile` makes, torch.profiler only: nsys and ncu wrap a process from its start). Each window is stored as a Profile
record in the matrix's profile store (`profiles/<matrix>.jsonl`, where `bench profile` writes and `bench compare`
reads), carrying the run's context (its run_id) and `run` = the process's run index, its kernel table in a folder of
its own (bench.execution.profile_window.timed_window_dir). `bench compare` attributes a cell from the windows of the very
processes it compares (bench.results.profile_windows). A window that fails stores nothing and changes no timed figure:
the run warns, naming the cell and the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchInputError


@dataclass(frozen=True)
class WindowPlan:
    """Where a run's windows go and which cells get one."""

    store: Path  # the profile store (Profile records)
    root: Path  # its folder: each window's files under <root>/<matrix>/
    cells: frozenset[str]  # cell ids of the cells profiled


def plan_windows(matrix, console=None) -> WindowPlan:
    """Return the run's WindowPlan; BenchInputError, before any work, where no cell can be profiled or the executor
    runs its workers elsewhere. The cells left out are named on the console."""
    from bench.execution.profile_window import PROFILABLE_BACKENDS
    from bench.execution.supervisor import worker_ranks
    from bench.results.profile_windows import default_profile_store
    from bench.results.query import check_store_path

    if matrix.settings.executor == "ray":
        raise BenchInputError("--profile-window writes each window's kernel table beside this machine's profile store, "
                              "and the Ray executor's workers run on other nodes: run it with --executor local")
    cells = [c for c in matrix.cells if c.backend in PROFILABLE_BACKENDS and worker_ranks(c.build_key()) == 1]
    if not cells:
        raise BenchInputError(f"--profile-window profiles a window through a cell's torch model in its timed process: "
                              f"none of the {len(matrix.cells)} cell(s) is one (backends {list(PROFILABLE_BACKENDS)}, "
                              "one process: no tensor parallelism); narrow with --only backend=hf")
    left = [c.label for c in matrix.cells if c not in cells]
    if left and console is not None:
        console.print(f"--profile-window: no window for {', '.join(left)} (not an hf cell in one process)",
                      highlight=False, markup=False)
    store = check_store_path(default_profile_store(matrix.name), must_exist=False)
    return WindowPlan(store, store.parent, frozenset(c.cell_id for c in cells))


def window_job(plan: WindowPlan | None, matrix_name: str, cell, context, run: int) -> dict | None:
    """Return the window job of one run process of a cell (bench.execution.profile_window.timed_window_job), or None: no
    window for it."""
    from bench.execution.profile_window import timed_window_dir, timed_window_job

    if plan is None or cell.cell_id not in plan.cells:
        return None
    folder = timed_window_dir(plan.root, matrix_name, cell.cell_id, context.run_id, run).resolve()
    return timed_window_job(folder, {"run_id": context.run_id, "run": run})


def window_record(event: dict, cell, context, run: int, workload: dict, build: dict, environment: dict):
    """Return the Profile record of a timed process's window from its worker's done event (status ok)."""
    from bench.results.records import TIMED_PROCESS, Profile, new_record

    outcome = {"trial": 0, "status": "ok", "metrics": None, "started_at": event.get("started_at"),
               "ended_at": event.get("ended_at"), "extra": Profile.extra_of(event["window"], TIMED_PROCESS)}
    return new_record("profile", cell, outcome, context=context, run=run, workload=workload, build=build,
                      environment=environment)


def window_warning(event: dict, label: str, run: int) -> str:
    """Return the run's warning for a window that failed (or was lost with its worker)."""
    from bench.machine.failures import first_line

    return (f"{label}: the profile window of run {run} failed ({event.get('status')}: {first_line(event.get('error'))}); "
            "its timed figures stand, and that process has no window: `bench compare --profile` reads the windows of the "
            "cell's other processes, or profiles sessions where none has one")
