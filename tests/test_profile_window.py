"""`bench run --profile-window`: each timed process profiles one decode-step window through the model it timed, after its
last timed pass, stored as that process's Profile record (bench.runner.windows, bench.execution.profile_window). How
`bench compare --profile` reads them: tests/test_attribution.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.execution.kernels import KernelTable
from bench.results.store import ResultStore
from tests.support.cli import bench_in_process

MATRIX = """name = "pw"
backends = ["{backend}"]
model = "qwen-tiny"
device = "cpu"
precisions = ["fp32"]
max_batch_sizes = [1, 2]
workloads = ["syn"]
trials = 1
runs = 2
warmup = 1
[workload.syn]
source = "synthetic"
num_requests = 2
input_len = 8
output_len = 4
"""


def _matrix(backend: str = "hf") -> Path:
    path = Path("pw.toml")
    path.write_text(MATRIX.format(backend=backend))
    return path


def _records(path: str) -> list[dict]:
    return list(ResultStore(path).records()) if Path(path).exists() else []


def test_every_run_process_profiles_a_window_of_each_cell_after_its_last_timed_pass():
    """Two cells of one build key (one worker a run), two runs: four windows, each a Profile record of its process (the
    run's run_id, `run` its index, the worker's pid), each with its own kernel table of the decode steps, all after the
    process's last timed pass (a profiler must not precede a timed pass in its process)."""
    proc = bench_in_process("run", "--matrix", str(_matrix()), "--no-progress", "--profile-window")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 profile window(s) in profiles/pw.jsonl" in " ".join(proc.stderr.split())  # the console wraps lines
    measured = _records("results/pw.jsonl")
    windows = _records("profiles/pw.jsonl")
    assert len(measured) == 4 and all(r["status"] == "ok" for r in measured)
    (run_id,) = {r["context"]["run_id"] for r in measured}
    assert sorted((r["run"], r["cell"]["max_batch_size"]) for r in windows) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    for w in windows:
        assert w["kind"] == "profile" and w["status"] == "ok" and w["context"]["run_id"] == run_id
        assert w["extra"]["tool"] == "torch" and w["extra"]["profile"]["from"] == "timed process"
        same = [m for m in measured if m["run"] == w["run"]]
        assert {m["environment"]["pid"] for m in same} == {w["environment"]["pid"]}  # the timed process itself
        assert w["started_at"] >= max(m["ended_at"] for m in same)  # after every timed pass of its process
        table = KernelTable.load(w["extra"]["kernel_table"])
        assert table.range("decode_step").instances == 4 and table.meta["run_id"] == run_id
        assert table.meta["run"] == w["run"] and w["extra"]["profile"]["step_ms"] > 0
        folder = Path(w["extra"]["kernel_table"]).parent
        assert folder.name == f"{w['cell_id']}-torch-{run_id}-r{w['run']}" and (folder / "categories.csv").is_file()
        assert folder.parent == (Path("profiles") / "pw").resolve()
    assert len({w["extra"]["kernel_table"] for w in windows}) == 4


def test_a_window_that_fails_stores_nothing_changes_no_figure_and_is_warned_about(monkeypatch):
    """A window whose folder cannot be made (a file in the way): the worker reports it, the run's measurements are all
    ok, no Profile record is stored, and the run warns naming the cell and the run."""
    from bench.runner import windows

    real = windows.window_job
    Path("blocked").write_text("a file where a folder would go")

    def blocked(plan, matrix_name, cell, context, run):
        job = real(plan, matrix_name, cell, context, run)
        return None if job is None else {**job, "out_dir": str(Path("blocked").resolve() / "w")}

    monkeypatch.setattr(windows, "window_job", blocked)
    m = _matrix()
    m.write_text(m.read_text().replace("max_batch_sizes = [1, 2]", "max_batch_sizes = [1]"))
    proc = bench_in_process("run", "--matrix", str(m), "--no-progress", "--profile-window")
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = _records("results/pw.jsonl")
    assert [(r["run"], r["status"]) for r in measured] == [(0, "ok"), (1, "ok")]
    assert _records("profiles/pw.jsonl") == []
    said = " ".join(proc.stderr.split())  # the console wraps long lines
    for run in (0, 1):  # the cell's label (with its options), the run, the error's first line
        assert re.search(rf"hf/fp32/bs1/syn [^:]*: the profile window of run {run} failed \(error: NotADirectoryError", said)
    assert "its timed figures stand" in said and "0 profile window(s)" in said


def test_profile_window_is_refused_before_any_work_where_no_cell_has_a_torch_model():
    proc = bench_in_process("run", "--matrix", str(_matrix("fake")), "--no-progress", "--profile-window")
    assert proc.returncode == 2 and "--profile-window profiles a window through a cell's torch model" in proc.stderr
    assert not Path("results/pw.jsonl").exists() and not Path("profiles").exists()


def test_a_profile_record_of_an_older_layout_is_a_sessions_window():
    """Records stored before `from` existed (every `bench profile` record until now) read as a profiling session's."""
    from bench.results.records import parse

    old = {"schema_version": 2, "kind": "profile", "cell_id": "c" * 16, "cell": {}, "status": "ok",
           "context": {"run_id": "r1", "command": "profile"},
           "extra": {"tool": "torch", "kernel_table": "t.json", "profile": {"tool": "torch", "step_ms": 1.0}}}
    assert parse(json.loads(json.dumps(old))).from_timed_process is False
    old["extra"]["profile"]["from"] = "timed process"
    assert parse(old).from_timed_process is True


def test_the_study_estimate_of_profile_sessions_leaves_the_timed_processes_windows_out():
    """A window a timed process profiled lasts the window alone: it is no session's time (bench.results.estimate)."""
    from bench.results.estimate import estimate_profiles
    from bench.results.records import (
        PROFILING_SESSION,
        TIMED_PROCESS,
        Profile,
        new_context,
        new_record,
    )
    from bench.spec.matrix import parse_matrix

    cell = parse_matrix({"name": "pw", "backends": ["hf"], "model": "qwen-tiny", "device": "cpu", "precisions": ["fp32"],
                         "max_batch_sizes": [1], "workloads": ["syn"],
                         "workload": {"syn": {"source": "synthetic", "num_requests": 1, "input_len": 8,
                                              "output_len": 4}}}).cells[0]

    def window(origin, seconds):
        extra = Profile.extra_of({"tool": "torch", "kernel_table": "t.json"}, origin)
        return new_record("profile", cell, {"status": "ok", "extra": extra, "started_at": 100.0,
                                            "ended_at": 100.0 + seconds}, context=new_context("profile"))

    assert estimate_profiles([cell], [window(TIMED_PROCESS, 2.0)])[0] is None
    assert estimate_profiles([cell], [window(TIMED_PROCESS, 2.0), window(PROFILING_SESSION, 30.0)])[0] == 30.0


def test_what_a_timed_window_cost_its_process_is_read_from_its_record_and_hostile_times_are_no_cost():
    """The attribution's own cost to a side measured with windows: each window's end less its start, lowest and
    highest; a record without both times, or with times that are no duration, gives no cost rather than a wrong one."""
    from types import SimpleNamespace as NS

    from bench.results.profile_windows import window_cost

    def rec(a, b, **profile):
        return NS(started_at=a, ended_at=b, profile=profile)

    assert window_cost({"torch": [rec(10.0, 12.5), rec(20.0, 21.0)]}) == (1.0, 2.5)
    assert window_cost({}) is None
    for a, b in [(None, 3.0), (1.0, None), ("1", 2.0), (5.0, 4.0), (float("nan"), 1.0), (0.0, float("inf"))]:
        assert window_cost({"torch": [rec(1.0, 2.0), rec(a, b)]}) is None, (a, b)
    # a window timed right after its cell's trials and profiled last: both stages are its cost; a hostile stage none
    assert window_cost({"torch": [rec(10.0, 12.5, timed_stage_s=1.5), rec(20.0, 21.0, timed_stage_s=10**400)]}) \
        == (1.0, 4.0)
    assert window_cost({"torch": [rec(0.0, 1.0, timed_stage_s=float("nan")), rec(0.0, 1.0, timed_stage_s=-3)]}) \
        == (1.0, 1.0)


def test_a_windows_timed_stage_is_said_to_the_supervisor_and_its_failure_when_its_turn_comes(monkeypatch):
    """The worker times each cell's window right after its trials (no profiler yet in the process) and profiles it
    after the last cell: the timed stage's events (start, timed) make a hang there the window's, not the next cell's
    (the supervisor's `after`), and a timed stage that raised is reported as that window's failure at its turn,
    with a recover() at once so the next cell runs on a clean model."""
    from types import SimpleNamespace as NS

    from bench.execution import profile_window as pw
    from bench.execution import worker

    events, recovered = [], []
    loaded = NS(recover=lambda: recovered.append(1))
    cell = NS(cell_id="c1")
    job = {"decode_steps": 4, "out_dir": "w"}
    monkeypatch.setattr(pw, "time_window", lambda loaded, cell, window: NS(result={"tool": "torch"}))
    got = worker.time_timed_window(loaded, cell, job, events.append)
    assert [(e["event"], e["phase"]) for e in events] == [("profile_window", "start"), ("profile_window", "timed")]
    assert got[2].result["timed_stage_s"] >= 0 and not recovered

    def broken(loaded, cell, window):
        raise RuntimeError("CUDA out of memory in the window")

    monkeypatch.setattr(pw, "time_window", broken)
    events.clear()
    got = worker.time_timed_window(loaded, cell, job, events.append)
    assert isinstance(got[2], RuntimeError) and recovered == [1] and [e["phase"] for e in events] == ["start", "timed"]
    events.clear()
    monkeypatch.setattr(pw, "profile_timed", lambda *a, **k: pytest.fail("profiled a window whose timing failed"))
    worker.profile_timed_window(loaded, cell, job, got[2], events.append)
    assert [e["phase"] for e in events] == ["start", "done"] and events[1]["status"] != "ok"
    assert "CUDA out of memory in the window" in events[1]["error"] and recovered == [1, 1]
