"""Early accuracy sessions: a cell's runtime figures captured beside its baseline's session, scored once the Reference
exists (`bench accuracy --parallel N`, N > 1; a study's accuracy step).

A cell session used to wait for its baseline's session, which writes the Reference (the baseline's logits, greedy
tokens and noise floors) the cell is scored against, so a compiled cell's session (its compile, then its decode
steps) ran only after the baseline's host-bound one: on the study's H100, 2026-12-06, 72 s of baseline session, then
50-70 s of cell sessions, one after the other on the critical path. Nothing of a cell's measuring needs the Reference
where the reference is the dataset's answers: the teacher-forced sequences are the prompts and their answers. So an
early session (job mode "capture", bench.accuracy.session.run_captures) runs the cell's teacher-forced answers and its
greedy tokens through its own runtime beside the baseline's session, as `bench run --accuracy-capture` does in the
timed process (bench.execution.accuracy_capture: the same code and capture format), and the cell's own session, after
both, scores the capture against the Reference (bench.accuracy.runtime.captured_figures) without loading the model.
A capture that failed or cannot be used leaves the cell to be measured in that session as before; the figures are
the session's (tests/test_accuracy_parallel.py checks them equal to one session at a time). The schedule is
bench.execution.session_pool's (early sessions paired with the session that scores them).
"""

from __future__ import annotations

from pathlib import Path


def capturable(base, cells: list, settings) -> list:
    """Return the cells of a session against `base` that an early session may capture before the baseline's Reference
    exists (`bench accuracy --parallel N`, N > 1): hf cells, where the reference is the dataset's answers (a
    baseline-greedy reference is the baseline's own tokens, known only once its session ran). The one rule, for the
    driver and the dry run's estimate."""
    from bench.workloads.references import has_answers

    if settings.reference == "baseline-greedy" or not has_answers(base.workload):
        return []
    return [c for c in cells if c.backend == "hf"]


def capture_specs(matrix, base, cells: list, settings, context) -> dict:
    """Return {cell_id: capture spec} of an early session's cells: the spec `bench run --accuracy-capture` hands the
    timed process (bench.runner.matrix.capture_specs), made by this invocation's accuracy session."""
    from bench.execution.accuracy_capture import EARLY, capture_dir, capture_key
    from bench.workloads.references import accuracy_workload, answers_path

    _wl, wl_file, _answers = accuracy_workload(base.workload, settings)
    run = {"run_id": context.run_id, "commit": context.commit, "dirty": context.dirty, "made_by": EARLY}
    return {c.cell_id: {"folder": str(capture_dir(matrix.name, c.cell_id, settings)),
                        "workload_file": str(Path(wl_file).resolve()), "answers_file": str(answers_path(wl_file).resolve()),
                        "settings": capture_key(settings), "max_total_len": base.workload.max_total_len, "run": run}
            for c in cells}
