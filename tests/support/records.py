"""Typed records for tests, built by the one constructor (bench.results.records.new_record)."""

from __future__ import annotations


def make_record(cell_id="a", trial=0, status="ok", *, run=0, run_id="run-1", started_at=1.0, commit="c" * 40,
                cell=None, kind="measurement", env=None, cap=None, baseline=None, extra=None, **metrics):
    """Return a typed record for tests, built by the one constructor (bench.results.records.new_record)."""
    from bench.results.records import RunContext, new_record

    cell = cell or {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cpu",
                    "options": {}, "workload": {"name": "w"}}
    ctx = RunContext(run_id=run_id, command="test", matrix="t", commit=commit, dirty=False, gpu_memory_gb=cap,
                     started_at=started_at, baseline=baseline)
    outcome = {"cell_id": cell_id, "trial": trial, "status": status, "metrics": metrics or None, "extra": extra,
               "started_at": started_at + trial, "ended_at": started_at + trial + 1}
    return new_record(kind, cell, outcome, context=ctx, run=run, environment=env or {"cpu": "test", "torch": "x"})
