"""Timed outputs: every pass stores what it generated, the report compares each row's outputs with the baseline's."""

import json
from pathlib import Path

import pytest

from tests.support.records import make_record


def _matrix(path: Path, diverge_at: int = 3) -> Path:
    path.write_text(f"""
name = "outs"
backends = ["fake"]
model = "qwen-tiny"
device = "cpu"
precisions = ["bf16"]
max_batch_sizes = [1, 2]
workloads = ["w"]
runs = 2
trials = 1
warmup = 0
baseline = {{ backend = "fake", precision = "bf16", max_batch_size = 1 }}
[[include]]
precision = "fp16"
diverge_at = {diverge_at}
[workload.w]
source = "synthetic"
input_len = 8
output_len = 6
num_requests = 4
""")
    return path


def test_every_pass_stores_its_outputs_and_the_report_compares_them(tmp_path, monkeypatch):
    from bench.cli import main
    from bench.metrics import SAMPLE_IDS
    from bench.results import query

    monkeypatch.chdir(tmp_path)
    assert main(["run", "--matrix", str(_matrix(tmp_path / "m.toml")), "--no-progress"]) == 0
    recs = query.measurements(query.load([Path("results/outs.jsonl")]))
    assert recs and all(len(s["ids"]) == 6 <= SAMPLE_IDS and len(s["digest"]) == 16 for r in recs for s in r.samples)
    report = Path("dashboards/outs/speedup.md").read_text()
    assert "timed outputs vs baseline" in report
    rows = {line.split("|")[3].strip() + line.split("|")[5].strip(): line for line in report.splitlines()
            if line.startswith("| fake")}
    # bf16 rows generate the baseline's ids; the fp16 row (diverge_at = 3) parts from them at token 3
    assert "4/4 identical" in rows["bf161"] and "4/4 identical" in rows["bf162"]
    fp16 = next(v for k, v in rows.items() if k.startswith("fp16"))
    assert "0/4 identical, first divergence at token 3.0 on average" in fp16
    # the baseline's own floor: its two runs are two processes
    assert "the baseline's own process to process: 4/4 identical" in report


def test_timed_outputs_parity_by_hand():
    from bench.results.outputs import (
        output_parity,
        own_floor,
        run_outputs,
        session_vs_timed,
    )

    def rec(run, ids, trial=0):
        samples = [{"id": str(i), "in": 1, "out": len(x), "ttft_ms": 1.0, "e2el_ms": 2.0, "error": None, "ids": x,
                    "digest": json.dumps(x)} for i, x in enumerate(ids)]
        r = make_record("c", trial=trial, run=run, samples=None)
        object.__setattr__(r, "samples", samples)
        return r

    base = run_outputs([rec(0, [[1, 2, 3], [4, 5, 6]]), rec(1, [[1, 2, 3], [4, 5, 9]]), rec(0, [[7]], trial=1)])
    runs = base[("c", None)]
    assert len(runs) == 2 and runs["run-1#0"]["0"] == (json.dumps([1, 2, 3]), [1, 2, 3])  # the first trial of run 0
    floor = own_floor(runs)
    assert floor.requests == 2 and floor.identical == 1 and floor.mean_first_divergence == pytest.approx((3 + 2) / 2)
    cell = {"0": ("x", [1, 9, 9]), "1": (json.dumps([4, 5, 6]), [4, 5, 6]), "2": ("z", [1])}
    p = output_parity(cell, runs["run-1#0"])
    assert (p.requests, p.identical) == (2, 1) and p.mean_first_divergence == pytest.approx((1 + 3) / 2)
    assert p.text() == "1/2 identical, first divergence at token 2.0 on average"
    assert session_vs_timed({"0": [1, 2, 3, 4], "1": [4, 5, 0]}, runs["run-1#0"]) == (2, 1)


def test_accuracy_joins_a_speed_row_only_under_the_pooling_checks():
    from bench.report.tables import joined_accuracy

    def acc(commit="c" * 40, env_digest=None, baseline="base"):
        r = make_record("cell", kind="accuracy", commit=commit,
                        extra={"accuracy": {"baseline": {"backend": "fake"}, "baseline_cell_id": baseline}})
        if env_digest:
            from dataclasses import replace

            object.__setattr__(r, "context", replace(r.context, env_digest=env_digest))
        return r

    row = {"commit": "c" * 40, "dirty": False, "env_digest": "e1"}
    good = acc(env_digest="e1")
    assert joined_accuracy([good], row, "base") == (good, None)
    found, why = joined_accuracy([acc(commit="d" * 40)], row, "base")
    assert found is None and why == "its accuracy was measured at commit ddddddd"
    found, why = joined_accuracy([acc(env_digest="e2")], row, "base")
    assert found is None and "another environment" in why
    found, why = joined_accuracy([acc(env_digest="e1", baseline="other")], row, "base")
    assert found is None and "another baseline" in why
    # the latest record that passes wins, past ones that do not
    assert joined_accuracy([acc(commit="d" * 40), good], row, "base")[0] is good
