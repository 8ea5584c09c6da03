"""`bench run --dry-run`: the duration estimate from stored records (bench.results.estimate)."""

from types import SimpleNamespace

import pytest

from bench.cli import main
from bench.results import query
from bench.results.estimate import estimate_run
from bench.results.records import new_context
from bench.runner.matrix import plan, run_matrix
from bench.spec.matrix import load_matrix
from tests.support.records import make_record

MATRIX = """
name = "est"
backends = ["fake"]
model = "qwen-tiny"
device = "cpu"
precisions = ["bf16"]
max_batch_sizes = [{sizes}]
workloads = [{workloads}]
trials = 2
warmup = 1
runs = 2
[options]
step_ms = 1.0
[workload.a]
source = "synthetic"
input_len = 8
output_len = 16
num_requests = 4
[workload.b]
source = "synthetic"
input_len = 8
output_len = 64
num_requests = 4
"""


def _matrix(tmp_path, sizes="1, 2", workloads='"a"'):
    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(sizes=sizes, workloads=workloads))
    return load_matrix(path)


def _estimate(matrix, store, redo=False):
    records = query.load([store]) if store.exists() else []
    st = matrix.settings
    context = new_context("run", matrix=matrix.name, runs=st.runs, trials=st.trials, warmup=st.warmup)
    tokens = {"a": 4 * 16, "b": 4 * 64}
    return estimate_run(matrix, plan(matrix, records, context, redo), records, lambda spec: tokens[spec.name])


def test_estimate_comes_from_each_cells_own_records(tmp_path):
    matrix = _matrix(tmp_path)
    store = tmp_path / "s.jsonl"
    run_matrix(matrix, store, show_progress=False)
    est = _estimate(matrix, store, redo=True)
    records = query.load([store])
    for cell, ce in zip(matrix.cells, est.cells, strict=True):
        mine = [r for r in records if r.cell_id == cell.cell_id]
        latest_run = max(r.context.started_at for r in mine)
        trials = [r.ended_at - r.started_at for r in mine if r.context.started_at == latest_run]
        # one warm-up per process of the latest context (its trials share it): their mean
        processes = {r.run: sum(r.extra["warmup"]["warmup_pass_s"]) for r in mine if r.context.started_at == latest_run}
        assert len(processes) == 2
        warm = sum(processes.values()) / 2
        assert ce.source == "this cell's records" and ce.runs == 2
        assert ce.trial_s == pytest.approx(sum(trials) / len(trials))
        assert ce.warmup_s == pytest.approx(warm)
        assert ce.total_s == pytest.approx(2 * (warm + 2 * ce.trial_s))
    loads = [r.build["build_s"] + r.build["load_s"] for r in records]
    assert est.loads_s == pytest.approx(2 * sum(loads) / len(loads))  # one group, two runs
    assert est.known_s == pytest.approx(est.loads_s + sum(c.total_s for c in est.cells))
    # Nothing left to run: nothing to estimate.
    assert _estimate(matrix, store).cells == []


def test_estimate_scales_a_sibling_and_says_what_it_does_not_know(tmp_path):
    run_matrix(_matrix(tmp_path), tmp_path / "s.jsonl", show_progress=False)
    wider = _matrix(tmp_path, sizes="1, 2, 4", workloads='"a", "b"')
    est = _estimate(wider, tmp_path / "s.jsonl")
    by = {c.label: c for c in est.cells}
    b1 = next(c for label, c in by.items() if "/bs1/b" in label)
    ref = next(r for r in query.load([tmp_path / "s.jsonl"]) if r.cell["max_batch_size"] == 1)
    assert "scaled to 256 output tokens" in b1.source
    assert b1.trial_s == pytest.approx(256 / ref.metric("output_throughput"), rel=0.2)  # the latest record's rate
    unknown = [c for c in est.cells if c.total_s is None]
    assert {c.label.split("/")[2] for c in unknown} == {"bs4"}  # no record of batch size 4 anywhere
    text = est.text()
    assert "not known (2 cell(s)" in text and "bs4" in text and "worker process's start" in text


def test_dry_run_prints_the_estimate_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _matrix(tmp_path)
    assert main(["run", "--matrix", "m.toml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "no stored figure for any of the 2 cell(s)" in out
    assert not (tmp_path / "results" / "est.jsonl").exists()
    assert main(["run", "--matrix", "m.toml", "--no-progress", "--report-dir", "d"]) == 0
    capsys.readouterr()
    assert main(["run", "--matrix", "m.toml", "--dry-run", "--redo"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 cell(s)" in out and "this cell's records" in out


def test_the_accuracy_step_is_estimated_from_each_sessions_latest_stored_time():
    """A session's records carry the session process's own start and end; the latest ok run of it is its estimate,
    a failed one (it stopped early) is not, and a session with no stored record is named as not known."""
    from dataclasses import replace
    from types import SimpleNamespace

    from bench.results.estimate import estimate_accuracy

    def cell(cid):
        return SimpleNamespace(cell_id=cid, label=f"hf/bf16/{cid}")

    def acc(cid, start, end, status="ok"):
        return replace(make_record(cid, kind="accuracy", status=status), started_at=start, ended_at=end)

    base, bs8, compiled, int8 = cell("bs1"), cell("bs8"), cell("compiled"), cell("int8")
    planned = [(base, "baseline", [bs8]), (base, "cells", [compiled]), (base, "cells", [int8])]
    records = [acc("bs1", 100.0, 170.0), acc("bs8", 100.0, 170.0),  # one baseline session, 70 s
               acc("compiled", 10.0, 50.0), acc("compiled", 200.0, 230.0),  # measured twice: the latest, 30 s
               acc("int8", 300.0, 305.0, status="oom")]  # failed: not an estimate
    total, text = estimate_accuracy(planned, records)
    assert total == 100.0
    assert text == ("accuracy: 3 session(s); stored session times cover 2: 100 s; "
                    "not known: the session of hf/bf16/int8")
    assert estimate_accuracy(planned, []) == (None, "accuracy: 3 session(s); stored session times cover 0: 0 s; not known: "
                                              "the baseline session of hf/bf16/bs1; the session of hf/bf16/compiled; "
                                              "the session of hf/bf16/int8")


def test_a_cell_whose_warm_up_ran_out_of_memory_costs_one_process_up_to_the_failure(tmp_path):
    """On the H100 (2026-12-06) the study's 7 cells that ran out of memory under its 24 GB cap were 'not known' or
    estimated from a sibling that fits; their own records say what they cost: one process, the warm-up up to the OOM."""
    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(sizes="1, 2", workloads='"a"').replace("step_ms = 1.0", "step_ms = 1.0\nmemory_gb = 1.02"))
    matrix = load_matrix(path)  # the fake device: batch 1 fits (1.013 GB), batch 2 does not (1.025 GB)
    store = tmp_path / "s.jsonl"
    run_matrix(matrix, store, show_progress=False)
    oom = [r for r in query.load([store]) if r.status == "oom"]
    assert len(oom) == 1 and oom[0].error.startswith("warm-up: ") and oom[0].extra["startup"]["warmup_s"] > 0
    est = _estimate(matrix, store, redo=True)  # the same matrix again, from these records
    bs2 = next(c for c in est.cells if "/bs2/" in c.label)
    assert bs2.source == "this cell's warm-up, which ended in oom: one process" and (bs2.runs, bs2.trials) == (1, 0)
    assert bs2.total_s == pytest.approx(oom[0].extra["startup"]["warmup_s"])
    assert "not known" not in est.text() and "1 run(s) x (warm-up" in est.text()


@pytest.mark.parametrize("startup", [{"warmup_s": float("nan")}, {"warmup_s": -1.0}, {"warmup_s": float("inf")},
                                     {"warmup_s": True}, {"warmup_s": "3"}, ["not", "a", "dict"], None])
def test_a_failed_warm_up_without_a_usable_figure_stays_not_known(startup):
    """A store is untrusted input: a failed warm-up's seconds that are not a finite non-negative number are no figure."""
    from dataclasses import replace

    from bench.results.estimate import _failed_warmup_s

    rec = make_record("c", status="oom")
    assert _failed_warmup_s(replace(rec, extra={"startup": startup})) is None
    assert _failed_warmup_s(replace(rec, extra={"startup": {"warmup_s": 2.5}})) == 2.5


def test_cells_scored_from_the_runs_captures_take_their_measuring_out_of_the_sessions_into_the_run():
    """With the study's run capturing a cell's accuracy inputs, its session only scores files: the measuring its stored
    session record holds moves to the run step (capture_seconds), and a session of captured cells alone loads no
    model. A record that came from a capture already has no measuring in its session's time."""
    from dataclasses import replace
    from types import SimpleNamespace

    from bench.results.estimate import capture_seconds, estimate_accuracy

    def cell(cid):
        return SimpleNamespace(cell_id=cid, label=f"hf/bf16/{cid}")

    def acc(cid, start, end, measure_s, load_s, capture=None):
        r = make_record(cid, kind="accuracy")
        extra = {"accuracy": {"measure_s": measure_s, "load_s": {"cell": load_s}, **({"capture": capture} if capture else {})}}
        return replace(r, started_at=start, ended_at=end, extra=extra)

    base, bs8, c1, c8, int4 = cell("bs1"), cell("bs8"), cell("c1"), cell("c8"), cell("int4")
    planned = [(base, "baseline", [bs8]), (base, "cells", [c1, c8]), (base, "cells", [int4])]
    # the H100 study's sessions (2026-12-06, third session), measured in sessions: 78.4 s with bs8's 12.9 s of
    # measuring; 137.7 s with compiled bs1's 69.6 s and bs8's 27.1 s and one load of 1.3 s; int4wo 22.6 s
    records = [acc("bs1", 0.0, 78.4, 58.8, 0.3), acc("bs8", 0.0, 78.4, 12.9, 0.0),
               acc("c1", 100.0, 237.7, 69.6, 1.3), acc("c8", 100.0, 237.7, 27.1, 1.3), acc("int4", 300.0, 322.6, 20.5, 0.7)]
    captured = {"bs8", "c1", "c8"}  # int4's session stays (here: as if it had run out of memory in the run)
    total, text = estimate_accuracy(planned, records, captured)
    assert total == pytest.approx((78.4 - 12.9) + (137.7 - 69.6 - 27.1 - 1.3) + 22.6)
    assert "(3 cell(s) scored from the run's captures, their measuring counted in the run step)" in text
    seconds, line = capture_seconds([bs8, c1, c8, cell("new")], records)
    assert seconds == pytest.approx(12.9 + 69.6 + 27.1)
    assert line == "accuracy captures after the trials: 4 cell(s); stored measuring covers 3: 110 s; not known: hf/bf16/new"
    # records that came from captures: their session's time is already the scoring alone
    scored = [acc("c1", 400.0, 402.4, 8.9, 0.0, capture={"run_id": "r"}), acc("c8", 400.0, 402.4, 1.9, 0.0, capture={"run_id": "r"})]
    total, _ = estimate_accuracy([(base, "cells", [c1, c8])], scored, captured)
    assert total == pytest.approx(2.4)
    assert capture_seconds([c1, c8], scored)[0] == pytest.approx(10.8)
    # nothing captured: the sessions' stored times, as before
    assert estimate_accuracy(planned, records)[0] == pytest.approx(78.4 + 137.7 + 22.6)


def test_the_accuracy_step_run_n_at_a_time_is_estimated_as_its_schedules_makespan():
    """The study's shape (bench accuracy --parallel 3): per workload a baseline session of 66 s, then a compiled
    cell's 60 s and an int4wo cell's 30 s against it. Hand-computed: both baselines 0-66; then compiled A, int4 A,
    compiled B 66-126, 66-96, 66-126; int4 B 96-126: 126 s, where one at a time is their sum, 312 s."""
    from dataclasses import replace
    from types import SimpleNamespace

    from bench.results.estimate import estimate_accuracy

    def cell(cid):
        return SimpleNamespace(cell_id=cid, label=f"hf/bf16/{cid}")

    def acc(cid, seconds, concurrent=0):
        r = make_record(cid, kind="accuracy")
        return replace(r, started_at=1000.0, ended_at=1000.0 + seconds,
                       extra={"accuracy": {"concurrent_sessions": concurrent}})

    a, b = cell("base-1024"), cell("base-2048")
    planned = [(a, "baseline", []), (a, "cells", [cell("compiled-1024")]), (a, "cells", [cell("int4-1024")]),
               (b, "baseline", []), (b, "cells", [cell("compiled-2048")]), (b, "cells", [cell("int4-2048")])]
    records = [acc("base-1024", 66), acc("compiled-1024", 60), acc("int4-1024", 30),
               acc("base-2048", 66), acc("compiled-2048", 60), acc("int4-2048", 30)]
    total, text = estimate_accuracy(planned, records, parallel=3)
    assert total == 126.0
    assert text == "accuracy: 6 session(s); stored session times cover 6: 3 at a time: 126 s; one at a time: 312 s"
    # 2 at a time: the baselines 0-66; compiled A 66-126 and int4 A 66-96; compiled B 96-156; int4 B 126-156
    assert estimate_accuracy(planned, records, parallel=2)[0] == 156.0
    assert estimate_accuracy(planned, records) == (312.0, "accuracy: 6 session(s); stored session times cover 6: 312 s")
    # a session not known counts 0 s in the schedule and is named; times measured beside others are said to be so
    total, text = estimate_accuracy(planned[:3] + planned[3:5], records[:3] + [acc("base-2048", 66, concurrent=2)],
                                    parallel=3)
    assert total == 126.0 and text == ("accuracy: 5 session(s); stored session times cover 4: 3 at a time: 126 s; one "
                                       "at a time: 222 s (1 of them measured beside other sessions: not solo times); "
                                       "not known: the session of hf/bf16/compiled-2048")


def test_on_a_gpu_too_small_for_two_baseline_sessions_the_estimate_runs_them_one_after_the_other():
    """The same study shape with the sessions' stored peaks (session_peak_bytes) on an 80 GB card: the baselines hold
    46 GB each, so the second waits for the first (bench.execution.session_pool's memory rule, as the run applies it).
    Hand-computed: base A 0-66; at 66 base B (46) and compiled A (20) and int4 A (10): 66-132, 66-126, 66-96; then
    compiled B (30) and int4 B (10) 132-192 and 132-162: 192 s. On 200 GB: 126 s as without sizes."""
    from dataclasses import replace
    from types import SimpleNamespace

    from bench.results.estimate import estimate_accuracy

    def cell(cid):
        return SimpleNamespace(cell_id=cid, label=f"hf/bf16/{cid}")

    def acc(cid, seconds, peak_gb):
        r = make_record(cid, kind="accuracy")
        return replace(r, started_at=1000.0, ended_at=1000.0 + seconds,
                       extra={"accuracy": {"concurrent_sessions": 0, "session_peak_bytes": peak_gb * 1e9}})

    a, b = cell("base-1024"), cell("base-2048")
    planned = [(a, "baseline", []), (a, "cells", [cell("compiled-1024")]), (a, "cells", [cell("int4-1024")]),
               (b, "baseline", []), (b, "cells", [cell("compiled-2048")]), (b, "cells", [cell("int4-2048")])]
    records = [acc("base-1024", 66, 46), acc("compiled-1024", 60, 20), acc("int4-1024", 30, 10),
               acc("base-2048", 66, 46), acc("compiled-2048", 60, 30), acc("int4-2048", 30, 10)]
    total, text = estimate_accuracy(planned, records, parallel=3, capacity=80e9)
    assert total == 192.0
    assert text == ("accuracy: 6 session(s); stored session times cover 6: 3 at a time: 192 s; one at a time: 312 s "
                    "(the GPU's 80 GB shared by the sessions' stored peaks: 6 of 6 known)")
    assert estimate_accuracy(planned, records, parallel=3, capacity=200e9)[0] == 126.0
    assert estimate_accuracy(planned, records, parallel=3)[0] == 126.0  # no capacity known (a CPU machine)


def test_a_stored_session_peak_that_is_no_size_is_not_used():
    """session_peak_bytes comes from a store, untrusted: nan, inf, negative, zero, an integer beyond any float, a
    string or a flag is no size (the session is then not held back for memory), never an error; a later record
    without a usable peak leaves the earlier usable one."""
    from dataclasses import replace

    from bench.results.query import session_peaks

    def acc(cid, t, peak):
        r = make_record(cid, kind="accuracy")
        return replace(r, started_at=t, ended_at=t + 1, context=replace(r.context, started_at=t),
                       extra={"accuracy": {"session_peak_bytes": peak}})

    hostile = [float("nan"), float("inf"), -1, 0, 10 ** 400, "46e9", True, [1]]
    assert session_peaks([acc(f"c{i}", 1000.0, v) for i, v in enumerate(hostile)]) == {}
    assert session_peaks([acc("a", 1000.0, 46e9), acc("a", 2000.0, float("nan"))]) == {"a": 46e9}
    assert session_peaks([acc("a", 1000.0, 46e9), acc("a", 2000.0, 20e9)]) == {"a": 20e9}


def test_cells_measured_early_beside_their_baselines_are_scheduled_so():
    """bench.accuracy.early: at N > 1 a cells session of a group whose baseline session runs is measured early (beside
    the baselines) and scored after both. The study's shape, 4 at a time: both baselines (66 s) and the two 1024 cells
    (60 and 30 s) start at 0; at 30 compiled B (60 s), at 60 int4 B (30 s): 90 s, where with every cell session after
    its baseline it is 66 + 60 = 126 s. From records scored from an early capture: its load and measuring early, the
    scoring (the record's span) after."""
    from dataclasses import replace
    from types import SimpleNamespace

    from bench.results.estimate import estimate_accuracy

    def cell(cid):
        return SimpleNamespace(cell_id=cid, label=f"hf/bf16/{cid}")

    def acc(cid, seconds, capture=None, measure_s=None, load_s=0.0):
        r = make_record(cid, kind="accuracy")
        extra = {"accuracy": {"concurrent_sessions": 0, **({"capture": capture} if capture else {}),
                              **({"measure_s": measure_s, "load_s": {"cell": load_s}} if measure_s is not None else {})}}
        return replace(r, started_at=1000.0, ended_at=1000.0 + seconds, extra=extra)

    a, b = cell("base-1024"), cell("base-2048")
    cells = {n: cell(n) for n in ("compiled-1024", "int4-1024", "compiled-2048", "int4-2048")}
    planned = [(a, "baseline", []), (a, "cells", [cells["compiled-1024"]]), (a, "cells", [cells["int4-1024"]]),
               (b, "baseline", []), (b, "cells", [cells["compiled-2048"]]), (b, "cells", [cells["int4-2048"]])]
    records = [acc("base-1024", 66), acc("compiled-1024", 60), acc("int4-1024", 30),
               acc("base-2048", 66), acc("compiled-2048", 60), acc("int4-2048", 30)]
    early = set(cells)
    assert estimate_accuracy(planned, records, parallel=4)[0] == 126.0
    total, text = estimate_accuracy(planned, records, parallel=4, early=early)
    assert total == 90.0 and "(4 session(s) measured early, beside their baselines' sessions, and scored after them)" in text
    assert estimate_accuracy(planned, records, early=early)[0] == 312.0  # one at a time: nothing early
    # records scored from early captures: 2 s of scoring each, the capture's load and measuring early
    made = {"run_id": "r", "made_by": "accuracy session"}
    scored = records[:1] + records[3:4] + [acc(n, 2, made, measure_s=s - 3, load_s=3) for n, s in
                                           (("compiled-1024", 60), ("int4-1024", 30), ("compiled-2048", 60),
                                            ("int4-2048", 30))]
    assert estimate_accuracy(planned, scored, parallel=4, early=early)[0] == 92.0  # 90, and compiled B's 2 s after
    assert estimate_accuracy(planned, scored)[0] == 66 + 66 + 60 + 30 + 60 + 30 + 4 * 2


@pytest.mark.parametrize("capture, load_s", [(["made_by"], {"cell": 1.0}), ("made", {"cell": 1.0}),
                                             ({"made_by": 3}, {"cell": 1.0}),
                                             ({"made_by": "accuracy session"}, {"cell": float("nan")}),
                                             ({"made_by": "accuracy session"}, {"cell": True}),
                                             ({"made_by": "accuracy session"}, "1.0"),
                                             ({"made_by": "accuracy session"}, {"cell": -5.0})])
def test_a_stored_capture_or_load_time_that_is_not_one_counts_nothing_and_stops_nothing(capture, load_s):
    """A store is untrusted input (--history): a capture that is not a dict naming its maker, or load seconds that
    are not finite non-negative numbers, are no figure; before, a list raised AttributeError and a NaN load stopped the
    schedule's virtual clock for good."""
    from dataclasses import replace
    from types import SimpleNamespace

    from bench.results.estimate import estimate_accuracy

    a, x = SimpleNamespace(cell_id="a", label="a"), SimpleNamespace(cell_id="x", label="x")
    records = [replace(make_record("a", kind="accuracy"), started_at=0.0, ended_at=10.0, extra={"accuracy": {}}),
               replace(make_record("x", kind="accuracy"), started_at=0.0, ended_at=2.0,
                       extra={"accuracy": {"capture": capture, "load_s": load_s, "measure_s": 3.0}})]
    total, _ = estimate_accuracy([(a, "baseline", []), (a, "cells", [x])], records, parallel=3, early={"x"})
    made = isinstance(capture, dict) and isinstance(capture.get("made_by"), str)
    # an early capture: its 3 s of measuring (no valid load) early beside the baseline's 10 s, its 2 s of scoring after
    assert total == (12.0 if made else 10.0)


def test_a_gpu_warm_up_stored_before_the_every_batch_warm_up_is_estimated_a_measured_pass_longer():
    """On a GPU the hf warm-up runs every batch of the pass since 2026-12-07 (one batch per size before): a dry run from
    older records adds a measured pass per warm-up pass, and says so; newer records, CPU cells and other backends are
    read as stored."""
    from types import SimpleNamespace

    from bench.results.estimate import _warmup_then

    def rec(device="cuda", backend="hf", **warmup):
        return SimpleNamespace(cell={"device": device, "backend": backend},
                               extra={"warmup": {"warmup_pass_s": [3.0], **warmup}})

    seconds, note = _warmup_then(rec(), 12.0, 1)
    assert seconds == 15.0 and "before the every-batch warm-up" in note
    assert _warmup_then(rec(), 12.0, 2) == (27.0, note)
    assert _warmup_then(rec(batches_warmed=16), 12.0, 1) == (3.0, "")
    assert _warmup_then(rec(device="cpu"), 12.0, 1) == (3.0, "")
    assert _warmup_then(rec(backend="trtllm"), 12.0, 1) == (3.0, "")
    assert _warmup_then(rec(), None, 1) == (3.0, "")  # no measured pass to add: as stored
    assert _warmup_then(rec(), 12.0, 0) == (0.0, "")


@pytest.mark.parametrize("passes", [["x"], [float("nan")], [-5.0], [1e308, 1e308], {"a": 1}, [True]])
def test_a_stored_warm_up_that_is_no_number_of_seconds_leaves_the_cell_unknown(passes):
    """A store is untrusted input: a warm-up pass that is a string raised a TypeError out of `--dry-run`, and NaN, a
    negative or an overflowing sum went into the total as nan, -5 s or inf."""
    from types import SimpleNamespace

    from bench.results.estimate import _trial_s, _warmup_s, _warmup_then

    rec = SimpleNamespace(cell={"device": "cuda", "backend": "hf"}, extra={"warmup": {"warmup_pass_s": passes}})
    assert _warmup_s(rec) is None and _warmup_then(rec, 12.0, 1) == (None, "")
    bad = SimpleNamespace(started_at=None, ended_at=None, metric=lambda m: float("nan"))
    assert _trial_s(bad) is None


def test_a_compiled_cell_is_estimated_from_every_process_not_the_last_one_alone():
    """On an H100 (2026-12-07) the same compiled cell warmed up in 30.9 s in its first process (compiling, cold cache)
    and 11.8 s in its second: the latest alone made the study's run step 257 s where it took 396.6 s. Each process of
    the stored context stands for one of the processes to run: the mean, and the line names both cache states."""
    from bench.results.estimate import estimate_run

    cell = {"backend": "hf", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cuda",
            "options": {"compile": "reduce-overhead"}, "workload": {"name": "w"}}

    def rec(run, warm, cache, trial=0):
        from dataclasses import replace

        r = make_record("c1", trial=trial, run=run, cell=cell,
                        extra={"warmup": {"warmup_pass_s": [warm], "batches_warmed": 16}})
        return replace(r, build={"compile_cache": cache})

    records = [rec(0, 30.9, "cold"), rec(0, 30.9, "cold", trial=1), rec(1, 11.8, "warm"), rec(1, 11.8, "warm", trial=1)]
    planned = [SimpleNamespace(cell=SimpleNamespace(cell_id="c1", label="hf/bf16/bs1/w", max_batch_size=1,
                                                    build_key=lambda: SimpleNamespace(key_hash="k")), runs=[0, 1])]
    matrix = SimpleNamespace(settings=SimpleNamespace(trials=2, warmup=1))
    (ce,) = estimate_run(matrix, planned, records, lambda spec: 0).cells
    assert ce.warmup_s == pytest.approx((30.9 + 11.8) / 2) and ce.trial_s == pytest.approx(1.0)
    assert ce.total_s == pytest.approx(2 * ((30.9 + 11.8) / 2 + 2 * 1.0)) and ce.cache == "cold, then warm"
    one = [r for r in records if r.run == 1]  # a context of one process: its own figure, its own state
    (ce,) = estimate_run(matrix, planned, one, lambda spec: 0).cells
    assert ce.warmup_s == pytest.approx(11.8) and ce.cache == "warm"
    for hostile in (["cold"], {"a": 1}, 3, None):  # a store is untrusted: a state that is no text is not stated
        (ce,) = estimate_run(matrix, planned, [rec(0, 30.9, hostile), rec(1, 11.8, "warm")], lambda spec: 0).cells
        assert ce.cache == "warm" and ce.warmup_s == pytest.approx((30.9 + 11.8) / 2)
