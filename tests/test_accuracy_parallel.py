"""`bench accuracy --parallel N`: sessions side by side give the serial run's figures; a session that runs out of memory
beside others runs again alone and says so; bad input is refused before any session (bench.accuracy.driver,
bench.execution.session_pool)."""

from pathlib import Path

import pytest

TWO_WORKLOADS = """
name = "par"
backends = ["hf"]
model = "qwen-tiny-trained"
device = "cpu"
precisions = ["fp32", "bf16"]
max_batch_sizes = [2]
workloads = ["w1", "w2"]
baseline = { precision = "fp32" }
[options]
cache = "dynamic"
[[exclude]]                      # a cell against w1's baseline; w2's baseline alone
precision = "bf16"
workload = "w2"
[accuracy]
prompts = 2
answer_tokens = 6
generate_tokens = 4
prefix_k = 4
[workload.w1]
source = "sharegpt"
tokenizer = "qwen-tiny-trained"
num_requests = 3
seed = 1
max_input_len = 128
max_total_len = 256
[workload.w2]
source = "sharegpt"
tokenizer = "qwen-tiny-trained"
num_requests = 3
seed = 2
max_input_len = 256
max_total_len = 512
"""


def _matrix():
    from bench.spec.matrix import parse_matrix

    return parse_matrix({"name": "par", "backends": ["hf"], "model": "qwen-tiny", "precisions": ["fp32", "bf16"],
                         "max_batch_sizes": [1], "workloads": ["w1", "w2"], "device": "cpu",
                         "baseline": {"precision": "fp32"},
                         "workload": {w: {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 2}
                                      for w in ("w1", "w2")}})


class Tally:
    """How many fake sessions run now, and that count at each start."""

    def __init__(self):
        self.running, self.at_once = 0, []


class FakeSession:
    """An accuracy session without a process: it ends at its `polls`-th poll with `session` (its result dict, the
    driver's bookkeeping keys added), counted in `tally` while it runs; nothing kills it."""

    def __init__(self, session: dict, tally: Tally, polls: int):
        self.session, self.tally, self.polls, self.left = session, tally, 0, polls
        tally.running += 1
        tally.at_once.append(tally.running)

    def poll(self):
        self.polls += 1
        if self.polls < self.left:
            return None
        self.tally.running -= 1
        return {"log": "the.log", "_started": 1.0, "_ended": 2.0, "workload": {}, **self.session}

    def kill(self):
        raise AssertionError("nothing is killed")


def test_an_out_of_memory_beside_another_session_runs_again_alone_and_its_record_says_so(monkeypatch, capsys):
    """Fake sessions (no process): w1's baseline fails (an error: final), w2's runs out of memory beside it, runs
    again alone once w1's has ended, and runs out of memory alone too: that is its record, which says so."""
    from bench.accuracy import driver as A
    from bench.spec.cells import AccuracySpec

    m = _matrix()
    calls, tally = [], Tally()
    at_once = tally.at_once

    def Fake(session):
        return FakeSession(session, tally, polls=2)

    def start_session(mode, base, cells, *args, **kwargs):
        calls.append((mode, base.workload.name, [c.label for c in cells]))
        if base.workload.name == "w1":
            return Fake({"status": "error", "error": "ValueError: boom"})
        return Fake({"status": "oom", "error": "accuracy session exited with status 1; log x:\ntorch.OutOfMemoryError: "
                                               "CUDA out of memory"})

    monkeypatch.setattr(A, "_start_session", start_session)
    records, failed = A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), Path("acc.jsonl"), parallel=2)
    assert [c[:2] for c in calls] == [("baseline", "w1"), ("baseline", "w2"), ("baseline", "w2")]  # w2's again
    assert at_once == [1, 2, 1]  # the re-run started with nothing beside it
    by = {(r.cell["precision"], r.cell["workload"]["name"]): r for r in records}
    assert [(k, r.status) for k, r in by.items()] == [(("fp32", "w1"), "error"), (("bf16", "w1"), "error"),
                                                      (("fp32", "w2"), "oom"), (("bf16", "w2"), "error")]
    ends = [line for line in capsys.readouterr().err.splitlines() if line.startswith("accuracy +")]
    assert len(ends) == 3 and "out of memory while 1 other session(s) ran beside it: run again alone" in ends[1], ends
    assert "; error: ValueError: boom" in ends[0] and "; oom: accuracy session exited with status 1" in ends[2], ends
    assert by[("fp32", "w1")].accuracy["concurrent_sessions"] == 1 and "rerun_alone" not in by[("fp32", "w1")].accuracy
    alone = by[("fp32", "w2")].accuracy
    assert alone["concurrent_sessions"] == 0
    assert alone["rerun_alone"] == {"reason": "out of memory while 1 other session(s) ran beside it: run again alone",
                                    "concurrent_sessions": 1, "first_error": "accuracy session exited with status 1; "
                                    "log x:", "first_log": "the.log"}
    base2 = next(c for c in m.cells if c.precision == "fp32" and c.workload.name == "w2")
    assert by[("bf16", "w2")].error.startswith(f"its baseline {base2.label} failed: ")  # no session for it
    assert failed == 4
    # one at a time: nothing runs beside anything, so an out-of-memory is final at once
    calls.clear(), at_once.clear()
    records, _ = A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), Path("serial.jsonl"))
    assert [c[:2] for c in calls] == [("baseline", "w1"), ("baseline", "w2")] and at_once == [1, 1]
    assert all(r.accuracy["concurrent_sessions"] == 0 and "rerun_alone" not in r.accuracy for r in records)


def test_sigterm_kills_every_running_session_and_keeps_what_is_stored(monkeypatch):
    """SIGTERM (`timeout`, a job's end) while two sessions run: w1's ended and is stored, w2's is killed; the records
    stored stay (bench.interrupts: SIGTERM as Ctrl-C)."""
    import os
    import signal

    from bench.accuracy import driver as A
    from bench.results import query
    from bench.spec.cells import AccuracySpec

    m = _matrix()
    handles = []

    class Fake:
        def __init__(self, workload):
            self.workload, self.polls, self.killed = workload, 0, False

        def poll(self):
            self.polls += 1
            if self.workload == "w1":
                return {"status": "error", "error": "ValueError: boom", "_started": 1.0, "_ended": 2.0}
            if self.polls == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return None

        def kill(self):
            self.killed = True

    def start_session(mode, base, *args, **kwargs):
        handles.append(Fake(base.workload.name))
        return handles[-1]

    def unhandled(signum, frame):  # what the test process does with a SIGTERM the driver does not handle
        raise AssertionError("SIGTERM reached the process, not the driver")

    monkeypatch.setattr(A, "_start_session", start_session)
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        with pytest.raises(KeyboardInterrupt):
            A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), Path("acc.jsonl"), parallel=2)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # put back when the driver ends (bench.interrupts)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [(h.workload, h.killed) for h in handles] == [("w1", False), ("w2", True)]
    stored = {(r.cell["precision"], r.cell["workload"]["name"]) for r in query.load([Path("acc.jsonl")])}
    assert stored == {("fp32", "w1"), ("bf16", "w1")}  # w1's baseline and its cell (not measured: baseline failed)


def test_what_is_run_again_alone():
    """The whole session where it ran out of memory, or where the free memory cut its baseline's noise-floor batch;
    else the cells of it that ran out of memory (a baseline whose figures stand is not measured again)."""
    from types import SimpleNamespace

    from bench.accuracy.driver import _again_alone

    a, b = SimpleNamespace(cell_id="a"), SimpleNamespace(cell_id="b")
    ok = {"status": "ok", "cells": {"a": {"status": "ok"}, "b": {"status": "oom", "error": "CUDA out of memory\n..."}},
          "log": "l", "baseline": {"generation_floor": {"bf16": {"what": "bf16 twin", "batch_cut_by_memory": False}}}}
    mode, cells, note = _again_alone(("baseline", [a, b], None), ok, 2)
    assert (mode, cells) == ("cells", [b]) and note["first_error"] == "CUDA out of memory"
    assert note["reason"] == "out of memory while 2 other session(s) ran beside it: run again alone"
    assert _again_alone(("cells", [a], None), {**ok, "cells": {"a": {"status": "error"}}}, 1) is None
    assert _again_alone(("cells", [a], None), {"status": "error", "error": "x"}, 1) is None
    assert _again_alone(("cells", [a, b], None), {"status": "oom", "error": "killed"}, 1)[:2] == ("cells", [a, b])
    cut = {**ok, "cells": {}, "baseline": {"generation_floor": {"bf16": {"what": "bf16 twin", "batch_cut_by_memory": True}}}}
    mode, cells, note = _again_alone(("baseline", [a], None), cut, 1)
    assert (mode, cells) == ("baseline", [a]) and note["reason"].startswith("its noise floor's greedy batch cut by the "
                                                                           "free memory while 1 other session(s)")


def test_a_parallel_that_is_not_a_positive_integer_is_refused_before_any_session(monkeypatch, tmp_path, capsys):
    from bench.accuracy import driver as A
    from bench.cli import main
    from bench.errors import BenchInputError
    from bench.spec.cells import AccuracySpec

    monkeypatch.setattr(A, "_start_session", lambda *a, **k: pytest.fail("a session started"))
    m = _matrix()
    for bad in (0, -2, 1.5, True):
        with pytest.raises(BenchInputError, match=r"--parallel must be .*: how many accuracy sessions run at once"):
            A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), Path("acc.jsonl"), parallel=bad)
    (tmp_path / "m.toml").write_text(TWO_WORKLOADS)
    assert main(["accuracy", "--matrix", str(tmp_path / "m.toml"), "--parallel", "0"]) == 2
    assert "--parallel must be a positive integer, got 0" in capsys.readouterr().err
    assert not Path("acc.jsonl").exists() and not Path("results").exists()


FIGURES = ("tokens", "kl_mean", "kl_p99", "top1", "top1_lower", "top5", "ppl_base", "ppl_cell", "identical_prefix_rate",
           "determinism_differing_tokens")


@pytest.mark.slow
def test_two_at_a_time_gives_the_figures_and_verdicts_of_one_at_a_time(tmp_path, capsys):
    """Two baselines (two workloads) and a cell against one, on the trained CPU model: `--parallel 2` runs the
    baselines side by side (their records say so) and gives every figure, greedy token and verdict of `--parallel 1`."""
    from bench.cli import main
    from bench.results import query

    (tmp_path / "m.toml").write_text(TWO_WORKLOADS)
    got, out, err = {}, {}, {}
    for n in (1, 2):
        store = tmp_path / f"p{n}.jsonl"
        assert main(["accuracy", "--matrix", str(tmp_path / "m.toml"), "--parallel", str(n), "--redo",
                     "--store", str(store)]) == 0, capsys.readouterr().err[-3000:]
        out[n], err[n] = capsys.readouterr()
        got[n] = {(r.cell["precision"], r.cell["workload"]["name"]): r for r in query.accuracies(query.load([store]))}
    said = "other session(s) ran beside its session: these seconds are not a solo time"
    assert said in out[2] and said not in out[1]
    assert set(got[1]) == set(got[2]) == {("fp32", "w1"), ("bf16", "w1"), ("fp32", "w2")}
    assert all(r.accuracy["concurrent_sessions"] == 0 for r in got[1].values())
    assert all(got[2][("fp32", w)].accuracy["concurrent_sessions"] >= 1 for w in ("w1", "w2"))  # side by side
    for key, serial in got[1].items():
        side = got[2][key]
        assert serial.ok and side.ok
        assert {k: serial.metrics.get(k) for k in FIGURES} == {k: side.metrics.get(k) for k in FIGURES}, key
        assert serial.verdict == side.verdict and serial.accuracy["greedy"] == side.accuracy["greedy"], key
        assert serial.accuracy["floor"] == side.accuracy["floor"] or key[0] != "fp32", key
        assert serial.accuracy["generation_floor"] == side.accuracy["generation_floor"] or key[0] != "fp32", key
    assert got[2][("bf16", "w1")].metrics["kl_mean"] > 0  # a cell that differs from its baseline: a figure to compare
    # two at a time, the bf16 cell's runtime was captured by an early session beside the baselines' (bench.accuracy.early)
    # and scored against w1's Reference once it was written; one at a time, measured in its own session after it
    # (whether another session still ran when the early one started is the two baselines' race: not asserted here)
    early = got[2][("bf16", "w1")].accuracy
    assert early["capture"]["made_by"] == "accuracy session", early.get("capture")
    assert early["measured_through"].startswith("the cell's own runtime (its batch function), in a session of its own")
    assert "captured by an early session of its own, not waiting for its baseline's" in out[2]
    assert not got[1][("bf16", "w1")].accuracy.get("capture")
    # side by side, each session's end is said as it happens (the verdicts print in plan order); one at a time, not
    ends = [line for line in err[2].splitlines() if line.startswith("accuracy +")]
    assert len(ends) == 4 and sum("the baseline session of" in e for e in ends) == 2, ends
    assert sum("an early capture session (1 cell(s) against" in e for e in ends) == 1, ends
    assert all(" ended after " in e for e in ends) and "accuracy +" not in err[1]


def test_sessions_whose_stored_peaks_do_not_fit_the_gpu_together_run_one_after_another(monkeypatch, capsys):
    """The second invocation knows each baseline session's peak from the first's records (session_peak_bytes): on a
    GPU of 80 GB two sessions of 46 GB do not start side by side; where the GPU is 200 GB they do."""
    from bench.accuracy import driver as A
    from bench.spec.cells import AccuracySpec

    m = _matrix()
    tally = Tally()
    at_once = tally.at_once
    failed = {"status": "error", "error": "ValueError: boom", "peak_memory_bytes": 46e9, "log": "x.log"}
    monkeypatch.setattr(A, "_start_session", lambda *a, **k: FakeSession(failed, tally, polls=3))
    store = Path("peaks.jsonl")
    monkeypatch.setattr(A, "shared_memory", lambda cells: 80e9)
    records, _ = A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), store, parallel=2)
    assert at_once == [1, 2]  # nothing stored yet: no size known, both baselines side by side
    assert all(r.accuracy["session_peak_bytes"] == 46e9 for r in records if r.cell["precision"] == "fp32")
    at_once.clear()
    A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), store, parallel=2)
    assert at_once == [1, 1]  # 46 + 46 GB (and a context each) do not fit 80 GB: the second waited
    assert "memory: 1 session(s) waited for others to end" in capsys.readouterr().out
    at_once.clear()
    monkeypatch.setattr(A, "shared_memory", lambda cells: 200e9)
    A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), store, parallel=2)
    assert at_once == [1, 2]


def test_a_cell_scored_from_its_early_capture_keeps_that_sessions_peak_and_company(monkeypatch):
    """The scoring session loads no model and holds no GPU memory: the record of a cell scored from an early capture
    carries the early session's peak (the memory rule's size of that session next time) and the larger of the two
    sessions' counts of others beside them; a cell measured in the session keeps that session's own."""
    from types import SimpleNamespace

    from bench.accuracy import driver as A

    m = _matrix()
    base, cell, other = m.cells[0], m.cells[1], m.cells[2]
    seen = {}

    def fake_record(c, b, figures, session, *args, concurrent=0, rerun=None):
        seen[c.cell_id] = (session.get("peak_memory_bytes"), concurrent)
        return SimpleNamespace(cell_id=c.cell_id)

    monkeypatch.setattr(A, "_record", fake_record)
    g = A._Group(base, [], Path("."), {cell.cell_id: [], other.cell_id: []})
    task = SimpleNamespace(payload=("cells", [cell, other], None), beside=set())
    session = {"status": "ok", "_started": 1.0, "_ended": 2.0, "peak_memory_bytes": None,
               "cells": {cell.cell_id: {"status": "ok", "capture": {"made_by": "accuracy session"}},
                         other.cell_id: {"status": "ok"}}}
    made = {cell.cell_id: ("f", 2, 30e9), other.cell_id: ("g", 3, 40e9)}  # other's capture was refused: measured here
    A._store(g, task, session, None, None, [], [], made=made)
    assert seen == {cell.cell_id: (30e9, 2), other.cell_id: (None, 0)}


def test_an_early_capture_that_fails_leaves_its_cell_to_its_own_session_and_says_so(monkeypatch, capsys):
    """Fake sessions: the early session ends without a capture (a timeout with no error text); the console says so
    and the cell's own session, after its baseline's, is started with no capture to score: it measures the cell."""
    from bench.accuracy import driver as A
    from bench.accuracy import early
    from bench.spec.cells import AccuracySpec
    from bench.spec.matrix import parse_matrix

    m = parse_matrix({"name": "par", "backends": ["hf"], "model": "qwen-tiny", "precisions": ["fp32", "bf16"],
                      "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu", "baseline": {"precision": "fp32"},
                      "workload": {"w": {"source": "sharegpt", "num_requests": 2}}})
    tally, started = Tally(), []
    ended = {"capture": {"status": "timeout", "error": None},
             "baseline": {"status": "error", "error": "ValueError: boom"}, "cells": {"status": "error", "error": "x"}}

    def fake_start(mode, base, cells, *args, captures=None, specs=None):
        started.append((mode, [c.max_batch_size for c in cells], dict(captures or {})))
        return FakeSession(ended[mode], tally, polls=2 if mode == "capture" else 4)

    monkeypatch.setattr(A, "_start_session", fake_start)
    monkeypatch.setattr(early, "capture_specs", lambda *a, **k: {})
    monkeypatch.setattr(A, "usable_captures", lambda *a, **k: {})
    A.accuracy_matrix(m, m.cells, AccuracySpec(prompts=2), Path("early.jsonl"), parallel=2)
    assert [s[0] for s in started] == ["baseline", "capture"]  # the failed baseline: its cells' session never starts
    assert "its early capture failed (timeout: ): measured in its session instead" in capsys.readouterr().out
