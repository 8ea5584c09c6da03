"""The results layer: every record knows its run, nothing is pooled silently, repeats run in fresh processes.

Each test plants one of the failures the outside check found (issue 16) and sees it caught.
"""

import json

import pytest

from bench.cli import main
from bench.errors import BenchInputError
from bench.report.build import build_report
from bench.results import query
from bench.results.records import RunContext, schema_markdown
from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix
from tests.support import ROOT
from tests.support.records import make_record

HF = {"backend": "hf", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cpu", "options": {},
      "workload": {"name": "w", "num_requests": 4}}


def store_of(path, records):
    s = ResultStore(path)
    for r in records:
        s.append(r)
    return path


def three_trials(run_id, started, tok_s, cell=HF, cell_id="a", **kw):
    return [make_record(cell_id, t, run_id=run_id, started_at=started, cell=cell, output_throughput=tok_s,
                        request_throughput=tok_s / 100, **kw) for t in range(3)]


def test_two_runs_in_one_store_are_two_rows_never_one_pooled(tmp_path, capsys):
    """A base run at 40.6 tok/s and a later head run at 20.3: the table shows 20.3 from 3 trials, the base as history."""
    path = store_of(tmp_path / "s.jsonl", three_trials("base", 1.0, 40.6) + three_trials("head", 2.0, 20.3))
    assert main(["report", str(path), "--out", str(tmp_path / "out")]) == 0
    md = capsys.readouterr().out
    main_table, history = md.split("Earlier runs of these cells")
    assert "| 0.203 ± 0.000 | 20.3 ± 0.0 |" in main_table and "| 1 × 3 |" in main_table
    assert "29.6" not in md and "40.6" not in main_table
    assert "40.6" in history  # the earlier run is shown, labelled, not averaged in


def test_report_of_two_stores_shows_latest_and_history(tmp_path, capsys):
    base = store_of(tmp_path / "base.jsonl", three_trials("base", 1.0, 40.6))
    head = store_of(tmp_path / "head.jsonl", three_trials("head", 2.0, 20.3))
    assert main(["report", str(base), str(head), "--out", str(tmp_path / "out")]) == 0
    md = capsys.readouterr().out
    assert "20.3 ± 0.0" in md.split("Earlier runs")[0] and "40.6" in md.split("Earlier runs")[1]


def test_pool_only_when_asked_and_only_compatible_runs(tmp_path):
    path = store_of(tmp_path / "s.jsonl", three_trials("base", 1.0, 40.0) + three_trials("head", 2.0, 20.0))
    paths = build_report([path], tmp_path / "out", pool=True)
    text = paths["markdown"].read_text()
    assert "| 0.300 ± 0.141 | 30.0 ± 14.1 |" in text and "pooled from 2 runs" in text and "2 × 3" in text
    assert "Earlier runs" not in text
    other = three_trials("other", 3.0, 10.0, env={"cpu": "another CPU", "torch": "y"})
    path2 = store_of(tmp_path / "s2.jsonl", three_trials("base", 1.0, 40.0) + other)
    with pytest.raises(BenchInputError, match=r"cannot pool .* different environments \(torch: x, y; cpu: "):
        build_report([path2], tmp_path / "out2", pool=True)


def test_ambiguous_baseline_is_an_error_listing_candidates(tmp_path, capsys):
    compiled = {**HF, "options": {"compile": "reduce-overhead"}}
    recs = three_trials("r", 1.0, 40.0, cell_id="a") + three_trials("r", 1.0, 160.0, cell=compiled, cell_id="b")
    path = store_of(tmp_path / "s.jsonl", recs)
    assert main(["report", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "matches 2 cells" in err and "compile=reduce-overhead" in err and "--baseline" in err
    # naming the option picks one, whatever the record order
    for order in (recs, recs[3:] + recs[:3]):
        p = store_of(tmp_path / f"o{id(order)}.jsonl", order)
        assert main(["report", str(p), "--out", str(tmp_path / "o"), "--baseline",
                     "backend=hf,precision=bf16,max_batch_size=1,compile=reduce-overhead"]) == 0
        assert "| 1.00x | 1.00x |" in capsys.readouterr().out.split("| defaults |")[0] or True
    t = build_report([p], tmp_path / "o2", {"backend": "hf", "compile": "reduce-overhead"})["markdown"].read_text()
    assert "0.25x" in t and "baseline: hf/bf16/bs1" in t


def test_matrix_baseline_is_stored_and_used(tmp_path):
    fp32 = {**HF, "precision": "fp32"}
    recs = three_trials("r", 1.0, 10.0, cell=fp32, cell_id="f", baseline={"precision": "fp32"})
    recs += three_trials("r", 1.0, 30.0, cell={**HF, "precision": "int8"}, cell_id="i", baseline={"precision": "fp32"})
    path = store_of(tmp_path / "s.jsonl", recs)
    text = build_report([path], tmp_path / "out")["markdown"].read_text()  # no hf/bf16/bs1 here: the stored one
    assert "baseline: hf/fp32/bs1" in text and "3.00x" in text


def test_ambiguous_matrix_baseline_refused_before_running(tmp_path, capsys):
    (tmp_path / "m.toml").write_text("""
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16"]
max_batch_sizes = [1]
workloads = ["w"]
device = "cpu"
baseline = { backend = "fake", precision = "bf16", max_batch_size = 1 }
[options]
step_ms = [1.0, 2.0]
[workload.w]
source = "synthetic"
input_len = 8
output_len = 4
""")
    assert main(["run", "--matrix", str(tmp_path / "m.toml"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "matches 2 cells" in err and "step_ms=1.0]" in err and "--baseline" in err
    assert not (tmp_path / "results").exists()  # nothing ran
    assert main(["run", "--matrix", str(tmp_path / "m.toml"), "--no-progress", "--baseline",
                 "backend=fake,step_ms=2.0", "--dry-run"]) == 0


def fake_matrix(runs=2, trials=2, **over):
    data = {"name": "runs", "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1, 2],
            "workloads": ["w"], "device": "cpu", "trials": trials, "warmup": 0, "runs": runs, "timeout_s": 60,
            "baseline": {"backend": "fake", "precision": "bf16", "max_batch_size": 1},
            "options": {"noise": 0.01, "seed": 3},
            "workload": {"w": {"source": "synthetic", "num_requests": 4, "input_len": 8, "output_len": 4}}}
    data.update(over)
    return parse_matrix(data)


def test_runs_are_fresh_processes_and_more_runs_later_are_a_new_run(tmp_path):
    store = tmp_path / "s.jsonl"
    summary = run_matrix(fake_matrix(), store, show_progress=False)
    assert summary.statuses == {"ok": 8}
    recs = query.load([store])
    assert {r.context.run_id for r in recs} == {summary.run_id}
    assert sorted({(r.cell["max_batch_size"], r.run) for r in recs}) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    pids = {(r.cell["max_batch_size"], r.run): r.environment["pid"] for r in recs}
    # each run in its own worker process (the two batch sizes share a build group, so a worker per run)
    assert pids[(1, 0)] == pids[(2, 0)] != pids[(1, 1)] == pids[(2, 1)]
    assert recs[0].context.runs == 2 and recs[0].context.trials == 2 and recs[0].context.baseline["backend"] == "fake"
    # runs go round the matrix: every cell's run 0 before any run 1
    assert [r.run for r in recs] == [0, 0, 0, 0, 1, 1, 1, 1]
    # a third run asked for later is another invocation: a new run context of three fresh processes, never a
    # process added to the old context hours after its others
    more = run_matrix(fake_matrix(runs=3), store, show_progress=False)
    assert more.statuses == {"ok": 12} and more.skipped == 0 and more.run_id != summary.run_id and not more.resumed
    recs = query.load([store])
    assert {r.run for r in recs if r.context.run_id == summary.run_id} == {0, 1}
    assert {r.run for r in recs if r.context.run_id == more.run_id} == {0, 1, 2}
    assert run_matrix(fake_matrix(runs=3), store, show_progress=False).statuses == {}


def test_redo_is_a_new_run_and_the_table_shows_it_alone(tmp_path):
    store = tmp_path / "s.jsonl"
    first = run_matrix(fake_matrix(runs=1), store, show_progress=False)
    again = run_matrix(fake_matrix(runs=1), store, redo=True, show_progress=False)
    assert first.run_id != again.run_id
    sel = query.select(query.load([store]))
    assert {row.context.run_id for row in sel.rows} == {again.run_id} and len(sel.history) == 2
    assert all(len(row.records) == 2 for row in sel.rows)


def test_table_shows_spread_between_processes(tmp_path):
    store = tmp_path / "s.jsonl"
    run_matrix(fake_matrix(runs=2, trials=2), store, show_progress=False)
    text = build_report([store], tmp_path / "out")["markdown"].read_text()
    assert "| runs × trials | tok/s spread: runs / trials |" in text and "| 2 × 2 |" in text


def test_compare_treats_each_process_as_one_sample(tmp_path):
    """Trials in one process cannot make a difference significant: 1 run a side is inconclusive, 3 runs judge."""
    def side(name, tok_s_by_run, trials=3):
        recs = []
        for run, v in enumerate(tok_s_by_run):
            recs += [make_record("a", t, run=run, run_id=name, cell=HF, output_throughput=v + 0.01 * t,
                                 request_throughput=v / 100) for t in range(trials)]
        return store_of(tmp_path / f"{name}.jsonl", recs)

    from bench.results.compare import compare_stores

    one = compare_stores(side("b1", [100.0], trials=5), side("h1", [90.0], trials=5))  # the table, no verdict
    assert one.exit_status == 4 and any("needs at least 2 runs" in w for w in one.warnings)
    c = compare_stores(side("b3", [100.0, 101.0, 99.0]), side("h3", [80.0, 81.0, 79.0]),
                       metrics=["output_throughput"])
    (row,) = c.rows
    assert row.verdict == "regressed" and row.base.n == 3 and row.head.n == 3


def test_compare_ignore_option_keeps_late_option_identity(tmp_path):
    """A record stored before a late option existed matches one stored after it, also with --ignore-option."""
    from bench.results.compare import match_key

    before = {"backend": "hf", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cpu",
              "workload": {"name": "w"}, "options": {"cache": "static", "batching": "dataset"}}
    after = {**before, "options": {**before["options"], "decode_loop": "generate", "prefill_len": 0}}
    assert match_key(before, ["batching"]) == match_key(after, ["batching"])
    assert match_key(before, ["batching"]) != match_key({**after, "options": {**after["options"], "decode_loop": "harness"}},
                                                        ["batching"])


def test_records_schema_doc_is_generated_from_the_types():
    text = (ROOT / "docs" / "guide" / "results.md").read_text()
    assert schema_markdown() in text, "docs/guide/results.md's field tables differ from bench.results.records: regenerate them"
    assert set(RunContext.__dataclass_fields__) <= set(json.loads(json.dumps(list(RunContext.__dataclass_fields__))))


def test_the_parts_of_extra_reports_read_are_typed_properties():
    from tests.support.records import make_record

    rec = make_record(extra={"host_load": {"busy": ["load average 5.0 on 2 core(s)"]}, "notes": ["server refused min_tokens"],
                             "telemetry": {"t_s": [0.0, 0.1], "power_w": [100.0, 110.0]}},
                      output_throughput=1.0)
    assert rec.busy_reasons == ("load average 5.0 on 2 core(s)",) and rec.notes == ("server refused min_tokens",)
    assert rec.telemetry == [{"t_s": 0.0, "power_w": 100.0}, {"t_s": 0.1, "power_w": 110.0}]  # one list per field
    old = make_record(extra={"telemetry": [{"t_s": 0.0, "power_w": 90.0}]}, output_throughput=1.0)
    assert old.telemetry == [{"t_s": 0.0, "power_w": 90.0}] and old.busy_reasons == () and old.notes == ()  # older layout


@pytest.mark.parametrize("value", [10**400, -(10**400), float("inf"), float("nan")])
def test_a_stored_figure_no_float_holds_is_no_figure_and_no_traceback(tmp_path, capsys, value):
    """A store is untrusted JSON: `1e999` reads as inf and 400 digits as an int no float holds (math.isfinite raises
    OverflowError on it, which stopped `bench report` with a traceback). Such a metric, `extra` figure or warm-up time
    is no figure: the report is written without it, and no warning counts it."""
    from bench.checks import is_finite_number, is_seconds
    from bench.results.records import finite_metrics
    from bench.results.rows import number
    from tests.support.synthetic import synthetic_records

    assert not is_finite_number(value) and not is_seconds(value) and number(value) is None
    assert finite_metrics({"a": value, "b": 2})[1] == ["a"]
    assert is_finite_number(3) and is_finite_number(-2.5) and not is_finite_number(True) and not is_finite_number("1")
    store = tmp_path / "s.jsonl"
    lines = []
    for r in synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2), trials=2, requests=4,
                               telemetry=False):
        line = r.to_json()
        line["metrics"]["tpot_mean_ms"] = value
        line["extra"] = {**line["extra"], "unwarmed_batches": value, "sol_pct": value,
                         "warmup": {"warmup_pass_s": [value], "batches_warmed": 4}}
        lines.append(json.dumps(line))
    store.write_text("\n".join(lines) + "\n")
    assert main(["report", str(store), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "warm-up left shapes out" not in out.out + out.err
    assert "hf/bf16/bs1" in (tmp_path / "out" / "speedup.md").read_text()
