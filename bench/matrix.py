"""Runs a matrix: resumes from the store, builds workloads, runs build groups, stores results.

Cells are grouped by BuildKey (one worker builds or loads once per group). Each finished
(cell, trial) becomes one stored record the moment its event arrives, so an interrupted run
loses nothing it finished; the next run skips what is stored unless asked to redo.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from bench import SCHEMA_VERSION
from bench.runner import GroupItem, GroupJob, run_group
from bench.spec import Matrix
from bench.store import ResultStore


@dataclass
class RunSummary:
    planned: int = 0  # (cell, trial) pairs in the matrix
    skipped: int = 0  # already stored
    statuses: dict = field(default_factory=dict)  # status -> count of records written
    elapsed_s: float = 0.0


def plan(matrix: Matrix, store: ResultStore, redo: bool = False) -> list[tuple[object, list[int]]]:
    """Return [(cell, trials still to measure)] in matrix order."""
    trials = list(range(matrix.settings.trials))
    if redo:
        return [(c, trials) for c in matrix.cells]
    done: dict[str, set] = {}
    final_cells: set[str] = set()
    for rec in store.records():
        if (rec.get("settings") or {}).get("gpu_memory_gb") != matrix.settings.gpu_memory_gb:
            continue  # measured under another memory cap: a different measurement
        if rec.get("status") == "ok":
            done.setdefault(rec["cell_id"], set()).add(rec.get("trial", 0))
        elif rec.get("status") in ("oom", "unsupported"):
            final_cells.add(rec["cell_id"])  # a batch that did not fit does not fit on a re-run
    out = []
    for cell in matrix.cells:
        if cell.cell_id in final_cells:
            continue
        todo = [t for t in trials if t not in done.get(cell.cell_id, set())]
        if todo:
            out.append((cell, todo))
    return out


def run_matrix(
    matrix: Matrix,
    store_path: str | Path,
    *,
    redo: bool = False,
    engines_dir: str | Path = "engines",
    workload_cache: str | Path = "workloads/cache",
    show_progress: bool = True,
    console=None,
) -> RunSummary:
    """Run every cell of the matrix not yet stored; return what happened."""
    from bench.memcap import check_cap, env_for
    from bench.workload import cached_workload

    started = time.monotonic()
    check_cap(matrix.settings.gpu_memory_gb, [c.device for c in matrix.cells])  # before any work
    store = ResultStore(store_path)
    todo = plan(matrix, store, redo)
    summary = RunSummary(planned=len(matrix.cells) * matrix.settings.trials)
    summary.skipped = summary.planned - sum(len(t) for _, t in todo)

    workloads: dict = {}
    for cell, _ in todo:
        if cell.workload not in workloads:
            workloads[cell.workload] = cached_workload(cell.workload, Path(workload_cache))

    groups: OrderedDict = OrderedDict()
    for cell, trials in todo:
        groups.setdefault(cell.build_key(), []).append(
            GroupItem(cell, list(trials), str(workloads[cell.workload][1]))
        )

    from bench.progress import MatrixProgress

    total_cells = len(matrix.cells)
    with MatrixProgress(total_cells, total_cells - len(todo), enabled=show_progress, console=console) as progress:
        for key, items in groups.items():
            by_id = {it.cell.cell_id: it for it in items}
            received = dict.fromkeys(by_id, 0)
            state = group_state(key)

            def on_event(event, by_id=by_id, received=received, state=state):
                kind = event.get("event")
                absorb_group_event(state, event)
                if kind == "start":
                    progress.current(by_id[event["cell_id"]].cell.label, event["trial"])
                elif kind == "result":
                    item = by_id[event["cell_id"]]
                    record = make_record(item.cell, event, workloads[item.cell.workload][0], state, matrix)
                    store.append(record)
                    summary.statuses[record["status"]] = summary.statuses.get(record["status"], 0) + 1
                    received[item.cell.cell_id] += 1
                    # A failed trial ends its cell (the worker skips the remaining trials).
                    if record["status"] != "ok" or received[item.cell.cell_id] == len(item.trials):
                        progress.advance(item.cell.label, record["status"])

            job = GroupJob(
                build_key=key,
                items=items,
                engines_dir=Path(engines_dir),
                warmup=matrix.settings.warmup,
                build_timeout_s=matrix.settings.build_timeout_s,
                cell_timeout_s=matrix.settings.timeout_s,
                log_dir=Path(store_path).parent / "logs", log_prefix=f"{Path(store_path).stem}-{key.key_hash}",
                env=env_for(matrix.settings.gpu_memory_gb),
            )
            progress.current(f"building {key.backend}/{key.precision} ({key.key_hash[:8]})", None)
            run_group(job, on_event)
    summary.elapsed_s = time.monotonic() - started
    return summary


def group_state(key) -> dict:
    """Return the context a build group's records share, before its worker has said anything."""
    return {"env": {}, "build": {"key_hash": key.key_hash}}


def absorb_group_event(state: dict, event: dict) -> None:
    """Update a group's record context from a worker event (its environment, its build)."""
    if event.get("event") == "env":
        state["env"] = event["environment"]
    elif event.get("event") == "built":
        state["build"] = {"key_hash": state["build"]["key_hash"], **{k: v for k, v in event.items() if k != "event"}}


def make_record(cell, event: dict, workload, state: dict, matrix: Matrix) -> dict:
    """Return the stored result record for one (cell, trial) outcome. The one record layout."""
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": cell.cell_id,
        "cell": cell.to_dict(),
        "trial": event["trial"],
        "status": event["status"],
        "metrics": event.get("metrics"),
        "extra": event.get("extra", {}),
        "samples": event.get("samples"),
        "error": event.get("error"),
        "workload": workload.summary(),
        "build": state["build"],
        "environment": state["env"],
        "settings": {"trials": matrix.settings.trials, "warmup": matrix.settings.warmup, "matrix": matrix.name,
                     "gpu_memory_gb": matrix.settings.gpu_memory_gb},
        "started_at": event.get("started_at"),
        "ended_at": event.get("ended_at", time.time()),
    }
