"""Runner and matrix logic with the fake backend in real worker subprocesses."""

import json

import pytest

from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from tests.support.matrices import fake_matrix

matrix = fake_matrix


def statuses(path):
    return [(r["cell"]["max_batch_size"], r["trial"], r["status"]) for r in ResultStore(path).records()]


def test_ok_run_stores_every_trial_and_resumes(tiny_sharegpt, tmp_path):
    m = matrix(tiny_sharegpt)
    store = tmp_path / "s.jsonl"
    summary = run_matrix(m, store, show_progress=False)
    assert summary.statuses == {"ok": 4}
    recs = list(ResultStore(store).records())
    r = recs[0]
    assert r["workload"]["num_requests"] == 8 and len(r["workload"]["content_hash"]) == 16
    assert r["metrics"]["output_len_mismatches"] == 0
    assert r["environment"]["python"] and "commit" in r["environment"]
    # fake timing model: bs 4 amortises the per-step cost, so throughput is higher
    by_bs = {x["cell"]["max_batch_size"]: x["metrics"]["output_throughput"] for x in recs}
    assert by_bs[4] > by_bs[1]
    again = run_matrix(m, store, show_progress=False)
    assert again.statuses == {} and again.skipped == 4
    redo = run_matrix(m, store, redo=True, show_progress=False)
    assert redo.statuses == {"ok": 4} and len(list(ResultStore(store).records())) == 8


def test_oom_cell_recorded_and_matrix_goes_on(tiny_sharegpt, tmp_path):
    # memory model: 1 GB weights + bs * (longest prompt + output <= 60) * 512 KiB:
    # bs 1 needs <= 1.032 GB, bs 4 about 1.1 GB; 1.06 GB fits bs 1 only.
    m = matrix(tiny_sharegpt, options={"memory_gb": 1.06})
    store = tmp_path / "s.jsonl"
    run_matrix(m, store, show_progress=False)
    assert statuses(store) == [(1, 0, "ok"), (1, 1, "ok"), (4, 0, "oom")]
    # The OOM came in the warm-up: its record still says what the worker's start cost and how long the warm-up ran
    oom = [r for r in ResultStore(store).records() if r["status"] == "oom"][0]
    assert oom["error"].startswith("warm-up: ") and oom["extra"]["startup"]["launch"].startswith(("fork", "exec"))
    assert oom["extra"]["startup"]["warmup_s"] >= 0 and "load_s" in oom["extra"]["startup"]
    assert run_matrix(m, store, show_progress=False).statuses == {}  # OOM is final


def test_crash_is_error_and_next_group_runs(tiny_sharegpt, tmp_path):
    m = matrix(tiny_sharegpt, max_batch_sizes=[1], options={"fail": ["crash", "none"]})
    store = tmp_path / "s.jsonl"
    run_matrix(m, store, show_progress=False)
    recs = list(ResultStore(store).records())
    by_fail = {(r["cell"]["options"]["fail"], r["trial"]): r["status"] for r in recs}
    assert by_fail[("crash", 0)] == "error" and "status 3" in recs[0]["error"]
    assert ("crash", 1) not in by_fail  # a death ends its cell, as any failed trial does
    assert by_fail[("none", 0)] == "ok" and by_fail[("none", 1)] == "ok"


def test_a_hang_ends_its_cell_and_a_fresh_worker_takes_the_next(tiny_sharegpt, tmp_path):
    """One timeout record for the trial that hung, the cell's other trials dropped: one timeout, not three."""
    import time

    m = matrix(tiny_sharegpt, max_batch_sizes=[1], trials=3, timeout_s=3, warmup=0, options={"fail": ["hang", "none"]})
    store = tmp_path / "s.jsonl"
    t0 = time.monotonic()
    run_matrix(m, store, show_progress=False)
    elapsed = time.monotonic() - t0
    by_fail = [(r["cell"]["options"]["fail"], r["trial"], r["status"]) for r in ResultStore(store).records()]
    assert by_fail == [("hang", 0, "timeout"), ("none", 0, "ok"), ("none", 1, "ok"), ("none", 2, "ok")]
    assert 3 <= elapsed < 8  # one timeout (plus worker start-ups), not three (9 s and more)
    rec = next(ResultStore(store).records())
    assert "no progress within 3 s" in rec["error"] and "log " in rec["error"]


def test_a_hang_in_the_warm_up_ends_its_cell(tiny_sharegpt, tmp_path):
    m = matrix(tiny_sharegpt, max_batch_sizes=[1, 4], trials=2, timeout_s=1, warmup=1, options={"fail": "hang"})
    store = tmp_path / "s.jsonl"
    run_matrix(m, store, show_progress=False)
    assert statuses(store) == [(1, 0, "timeout"), (4, 0, "timeout")]  # each cell once, in its own fresh worker


def test_build_oom_and_sigkill(tiny_sharegpt, tmp_path):
    m = matrix(tiny_sharegpt, max_batch_sizes=[1], options={"fail": ["build-oom", "sigkill"]})
    store = tmp_path / "s.jsonl"
    run_matrix(m, store, show_progress=False)
    recs = list(ResultStore(store).records())
    by_fail = {r["cell"]["options"]["fail"]: r for r in recs}
    assert by_fail["build-oom"]["status"] == "oom" and "build" in by_fail["build-oom"]["error"]
    # A SIGKILL alone is not an OOM (tests/test_worker_logs.py plants the OOM killer's evidence)
    assert by_fail["sigkill"]["status"] == "error" and "killed by SIGKILL" in by_fail["sigkill"]["error"]


def test_injected_error_is_error(tiny_sharegpt, tmp_path):
    m = matrix(tiny_sharegpt, max_batch_sizes=[1], warmup=0, options={"fail": "error"})
    store = tmp_path / "s.jsonl"
    summary = run_matrix(m, store, show_progress=False)
    assert summary.statuses == {"error": 1}
    rec = next(ResultStore(store).records())
    assert "injected error" in rec["error"]
    assert json.dumps(rec)  # serialisable


def test_worker_failure_after_build_keeps_its_own_message(tiny_sharegpt, tmp_path):
    """A failure the worker reports itself (here: its workload file vanished) reaches the record
    with the worker's traceback, and the group goes on with a fresh worker for the next cell."""
    from bench.execution.supervisor import GroupItem, GroupJob, supervise_group
    from bench.workloads.workload import cached_workload

    m = matrix(tiny_sharegpt, max_batch_sizes=[1, 4], trials=1, warmup=0)
    _, wl_file = cached_workload(m.cells[0].workload, tmp_path / "cache")
    items = [GroupItem(m.cells[0], [0], str(tmp_path / "gone.json")), GroupItem(m.cells[1], [0], str(wl_file))]
    events = []
    job = GroupJob(m.cells[0].build_key(), items, tmp_path / "engines", warmup=0, build_timeout_s=30,
                   cell_timeout_s=30, log_dir=tmp_path / "logs", log_prefix="w")
    supervise_group(job, events.append)
    results = {e["cell_id"]: e for e in events if e.get("event") == "result"}
    first = results[m.cells[0].cell_id]
    assert first["status"] == "error" and "gone.json" in first["error"] and "FileNotFoundError" in first["error"]
    assert results[m.cells[1].cell_id]["status"] == "ok"


def test_the_resume_plan_reads_only_the_matrix_cells_of_a_shared_store_without_samples(tiny_sharegpt, tmp_path):
    """A nightly store holds many matrices' records; the run driver plans from its own cells' records only, with
    their per-request samples and telemetry dropped, and plans exactly as from every record."""
    from bench.results import query
    from bench.runner.matrix import new_context, plan

    store = tmp_path / "s.jsonl"
    other, mine = matrix(tiny_sharegpt, max_batch_sizes=[2]), matrix(tiny_sharegpt, max_batch_sizes=[1, 4], runs=2)
    assert run_matrix(other, store, show_progress=False).statuses == {"ok": 2}
    assert run_matrix(mine, store, show_progress=False).statuses == {"ok": 8}
    ids = {c.cell_id for c in mine.cells}
    slim = query.load_cells(store, ids)
    full = query.load([store])
    assert len(full) == 10 and len(slim) == 8 and {r.cell_id for r in slim} == ids
    assert all(r.samples == [] and not r.telemetry for r in slim) and all(r.samples for r in full)
    context = new_context("run", matrix=mine.name, baseline=mine.baseline, gpu_memory_gb=None, runs=2, trials=2,
                          warmup=1, tuning_builds=1)
    assert plan(mine, slim, context) == plan(mine, full, context) == []
    def lost(r):  # one trial of a run lost (as a killed invocation leaves it): both plan the same resume
        return r.run == 1 and r.trial == 1 and r.cell["max_batch_size"] == 4

    resumed = plan(mine, [r for r in slim if not lost(r)], context)
    assert [(p.cell.cell_id, p.runs) for p in resumed] == [
        (p.cell.cell_id, p.runs) for p in plan(mine, [r for r in full if not lost(r)], context)]
    assert [p.runs for p in resumed] == [[2]]


def test_a_capture_that_hangs_or_fails_blames_no_cell_and_the_next_cell_runs(tiny_sharegpt, tmp_path):
    """An accuracy capture runs after its cell's trials (bench.execution.accuracy_capture): a worker that hangs there
    is killed as a capture's timeout, not as the next cell's, and one that fails there goes on. Both cells' results
    stand and the outcome of each capture is an event the run warns about."""
    import os

    from bench.execution.supervisor import GroupItem, GroupJob, supervise_group
    from bench.workloads.workload import cached_workload

    m = matrix(tiny_sharegpt, max_batch_sizes=[1, 4], trials=1, warmup=0)
    _, wl_file = cached_workload(m.cells[0].workload, tmp_path / "cache")
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)  # reading it blocks: a capture that hangs
    spec = {"folder": str(tmp_path / "cap"), "answers_file": str(tmp_path / "none.json"),
            "settings": {"prompts": 2, "answer_tokens": 4, "generate_tokens": 2, "reference": "auto"}, "max_total_len": 64}
    items = [GroupItem(m.cells[0], [0], str(wl_file), {**spec, "workload_file": str(fifo)}),
             GroupItem(m.cells[1], [0], str(wl_file), {**spec, "workload_file": str(tmp_path / "gone.json")})]
    events = []
    job = GroupJob(m.cells[0].build_key(), items, tmp_path / "engines", warmup=0, build_timeout_s=30,
                   cell_timeout_s=2, log_dir=tmp_path / "logs", log_prefix="w")
    supervise_group(job, events.append)
    results = {e["cell_id"]: e["status"] for e in events if e.get("event") == "result"}
    assert results == {m.cells[0].cell_id: "ok", m.cells[1].cell_id: "ok"}
    done = {e["cell_id"]: e for e in events if e.get("event") == "accuracy_capture" and e["phase"] == "done"}
    assert done[m.cells[0].cell_id]["status"] == "timeout" and "no progress within 2 s" in done[m.cells[0].cell_id]["error"]
    assert done[m.cells[1].cell_id]["status"] == "error" and "gone.json" in done[m.cells[1].cell_id]["error"]
    assert not (tmp_path / "cap").exists()


def _order(path):
    return [(r["cell"]["options"]["slowdown"], r["trial"], r["status"]) for r in ResultStore(path).records()]


def test_interleaved_order_takes_the_trials_of_a_process_in_turns(tiny_sharegpt, tmp_path):
    """`order = "interleaved"`: the cells one process measures (twins that differ only in options not built, here the
    fake backend's slowdown) are all warmed up, then measured one trial of each a round; "cells" (the default) measures
    each cell's trials in turn. The records say which order they were taken in."""
    kw = dict(max_batch_sizes=[1], trials=3, options={"slowdown": [1.0, 2.0]})
    store = tmp_path / "cells.jsonl"
    run_matrix(matrix(tiny_sharegpt, **kw), store, show_progress=False)
    assert _order(store) == [(1.0, 0, "ok"), (1.0, 1, "ok"), (1.0, 2, "ok"), (2.0, 0, "ok"), (2.0, 1, "ok"), (2.0, 2, "ok")]
    assert {json.dumps(r["extra"].get("order")) for r in ResultStore(store).records()} == {"null"}
    store = tmp_path / "interleaved.jsonl"
    run_matrix(matrix(tiny_sharegpt, order="interleaved", **kw), store, show_progress=False)
    recs = list(ResultStore(store).records())
    assert _order(store) == [(1.0, 0, "ok"), (2.0, 0, "ok"), (1.0, 1, "ok"), (2.0, 1, "ok"), (1.0, 2, "ok"), (2.0, 2, "ok")]
    assert len({r["environment"]["pid"] for r in recs}) == 1 and all(r["extra"]["order"] == {"interleaved": 2} for r in recs)
    # the same figures either way: the virtual clock's passes do not depend on the order
    tok_s = {(r["cell"]["options"]["slowdown"], r["trial"]): r["metrics"]["output_throughput"] for r in recs}
    assert tok_s[(2.0, 0)] == pytest.approx(tok_s[(1.0, 0)] / 2)


def test_interleaved_order_blames_a_warm_up_hang_on_its_own_cell(tiny_sharegpt, tmp_path):
    """Every cell's warm-up comes first in an interleaved process, so a hang in the second cell's warm-up must end that
    cell (the worker's warmup event names it), not the first, whose trials a fresh worker then runs."""
    m = matrix(tiny_sharegpt, max_batch_sizes=[1], trials=2, warmup=1, timeout_s=1, order="interleaved",
               options={"wall_ms": [0, 4000]})
    store = tmp_path / "s.jsonl"
    run_matrix(m, store, show_progress=False)
    got = [(r["cell"]["options"]["wall_ms"], r["trial"], r["status"]) for r in ResultStore(store).records()]
    assert got == [(4000, 0, "timeout"), (0, 0, "ok"), (0, 1, "ok")]


def test_an_unknown_order_is_refused_naming_the_orders(tiny_sharegpt):
    from bench.errors import BenchInputError

    with pytest.raises(BenchInputError, match="order must be one of 'cells', 'interleaved', got 'random'"):
        matrix(tiny_sharegpt, order="random")


def test_the_ray_executor_blames_a_warm_up_as_the_local_one_does():
    from bench.execution.executors.ray_cluster import _track

    pending = {("a", 0), ("b", 0)}
    assert _track({"event": "warmup", "cell_id": "b", "trial": 0}, pending, ("a", 0)) == ("b", 0)
    assert _track({"event": "result", "cell_id": "b", "trial": 0}, pending, ("b", 0)) is None and pending == {("a", 0)}
