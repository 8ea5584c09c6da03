"""Failed accuracy, profile and capacity records are shown in reports as failures, with their error's first line."""

import dataclasses

from bench.report.build import build_report
from bench.report.failures import HEADING, failures_markdown, latest_failures
from tests.support.records import make_record
from tests.support.synthetic import write_store


def cell(precision, bs=1):
    return {"backend": "fake", "model": "m", "precision": precision, "max_batch_size": bs, "device": "cpu",
            "options": {}, "workload": {"name": "w"}}


def failed(cell_id, precision, kind, error, *, run_id="run-2", started_at=2.0, extra=None, bs=1, trial=0):
    rec = make_record(cell_id, trial, status="error", kind=kind, cell=cell(precision, bs), run_id=run_id, started_at=started_at,
                      extra=extra)
    return dataclasses.replace(rec, error=error)


TRACE = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: deep"


def test_a_failed_accuracy_profile_and_capacity_record_each_show_with_their_first_error_line(tmp_path):
    speed = [make_record(p, cell=cell(p), request_throughput=r, output_throughput=10 * r)
             for p, r in (("bf16", 1.0), ("int8", 1.5))]
    acc_ok = make_record("bf16", kind="accuracy", cell=cell("bf16"), tokens=64, determinism_differing_tokens=0,
                         extra={"accuracy": {"reference": "baseline-greedy", "determinism": {"differing_tokens": 0}}})
    superseded = failed("bf16", "bf16", "accuracy", "RuntimeError: an old failure\n" + TRACE, run_id="run-0",
                        started_at=0.5)  # measured again since (acc_ok, at 1.0): history, not a failure now
    acc_failed = failed("int8", "int8", "accuracy", "accuracy session exited with status 1; log a.log:\n" + TRACE)
    prof_failed = failed("int8", "int8", "profile", "\nRuntimeError: profiling session exited with status 1\n" + TRACE,
                         extra={"tool": "torch"})
    cap = {"capacity": {"axis": "max_batch_size", "value": 4, "slo": {"tpot_p99_ms": 10.0}}}
    cap_failed = [failed("int8-4", "int8", "capacity-probe", "RuntimeError: fake backend: injected error\n" + TRACE,
                         extra=cap, bs=4, trial=k) for k in range(2)]  # two passes, not one stored twice
    write_store(tmp_path / "s.jsonl", speed + [superseded, acc_ok, acc_failed, prof_failed, *cap_failed])

    paths = build_report([tmp_path / "s.jsonl"], tmp_path / "out", baseline={"backend": "fake", "precision": "bf16"})
    report = paths["report"].read_text()
    section = report.split(f"## {HEADING}")[1]
    assert "| accuracy | fake/int8/bs1/w | run-2 | ERROR | 1 | accuracy session exited with status 1; log a.log: |" in section
    assert "| profile (torch) | fake/int8/bs1/w | run-2 | ERROR | 1 | RuntimeError: profiling session exited with " \
           "status 1 |" in section
    assert ("| capacity probe | fake/int8/bs4/w at max_batch_size 4 | run-2 | ERROR | 2 | RuntimeError: fake backend: "
            "injected error |") in section
    assert "an old failure" not in report and "Traceback" not in section
    assert HEADING in paths["dashboard"].read_text()


def test_a_store_of_failed_accuracy_records_alone_is_a_report_of_its_failures(tmp_path):
    """Before, a store whose every accuracy record failed made no report at all ("the result store is empty")."""
    write_store(tmp_path / "acc.jsonl", [failed("bf16", "bf16", "accuracy", "its baseline fake/bf16/bs1 failed: oom")])
    paths = build_report([tmp_path / "acc.jsonl"], tmp_path / "out")
    assert "| accuracy | fake/bf16/bs1/w | run-2 | ERROR | 1 | its baseline fake/bf16/bs1 failed: oom |" in \
        paths["report"].read_text()
    assert HEADING in paths["dashboard"].read_text()


def test_only_the_latest_context_of_a_cell_and_tool_counts():
    old = failed("a", "bf16", "profile", "RuntimeError: nsys failed", run_id="r1", started_at=1.0, extra={"tool": "nsys"})
    torch_ok = make_record("a", kind="profile", cell=cell("bf16"), run_id="r2", started_at=2.0, extra={"tool": "torch"})
    assert latest_failures([old, torch_ok]) == [old]  # another tool's success does not hide it
    nsys_ok = make_record("a", kind="profile", cell=cell("bf16"), run_id="r3", started_at=3.0, extra={"tool": "nsys"})
    assert latest_failures([old, torch_ok, nsys_ok]) == [] and failures_markdown([old, nsys_ok]) == ""
    blank = failed("a", "bf16", "accuracy", None)
    assert "(no error text stored)" in failures_markdown([blank])
