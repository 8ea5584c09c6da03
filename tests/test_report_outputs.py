"""Outputs are keyed by store, never overwritten silently: `bench run --store` reports into a folder named after
its store, a folder of several matrices is reported matrix by matrix, and a report of other stores into a folder
says what it replaced."""

import json
from pathlib import Path

from bench.cli import main

FAKE = """name = "{name}"
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16"]
max_batch_sizes = [1, 2]
workloads = ["w"]
device = "cpu"
trials = 1
warmup = 0
baseline = {{ backend = "fake", precision = "bf16", max_batch_size = {base} }}
[workload.w]
source = "synthetic"
input_len = 8
output_len = 4
num_requests = 4
"""


def _matrix(tmp_path, name, base=1):
    path = tmp_path / f"{name}.toml"
    path.write_text(FAKE.format(name=name, base=base))
    return str(path)


def test_run_with_a_store_reports_into_the_stores_folder_and_never_over_anothers(tmp_path, capsys):
    m = _matrix(tmp_path, "m")
    assert main(["run", "--matrix", m, "--no-progress"]) == 0
    assert main(["run", "--matrix", m, "--store", "results/head.jsonl", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "dashboards/head/dashboard.html" in err and (tmp_path / "dashboards/head/speedup.md").exists()
    # the main run's report is still the main run's
    sources = json.loads((tmp_path / "dashboards/m/sources.json").read_text())["stores"]
    assert sources == [str((tmp_path / "results/m.jsonl").resolve())]
    # a report of another store into the same folder says what it replaced
    assert main(["report", "results/head.jsonl", "--out", "dashboards/m"]) == 0
    err = capsys.readouterr().err
    assert "dashboards/m held the report of" in err and "results/m.jsonl" in err and "to keep both" in err


def _store(path, matrix, base, run_id="r1"):
    """Write a store of one matrix: fake bs1 and bs2, its baseline at bs`base`."""
    import dataclasses

    from tests.support.records import make_record
    from tests.support.synthetic import write_store

    def cell(bs):
        return {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": bs, "device": "cpu",
                "options": {}, "workload": {"name": "w"}}

    recs = [make_record(f"c{bs}", cell=cell(bs), trial=t, run_id=run_id, request_throughput=bs, output_throughput=10.0 * bs,
                        baseline={"backend": "fake", "precision": "bf16", "max_batch_size": base})
            for bs in (1, 2) for t in range(2)]
    write_store(path, [dataclasses.replace(r, context=dataclasses.replace(r.context, matrix=matrix)) for r in recs])


def test_plain_report_of_a_folder_holding_two_matrices_reports_each(tmp_path, capsys):
    """Two matrices of different baselines in results/: one report each, not one that fails on their baselines."""
    (tmp_path / "results").mkdir()
    _store(tmp_path / "results/a.jsonl", "a", 1)
    _store(tmp_path / "results/b.jsonl", "b", 2)
    _store(tmp_path / "results/a-again.jsonl", "a", 1, run_id="r2")
    assert main(["report"]) == 0
    out, err = capsys.readouterr()
    # matrix a's two stores together (the comparison view), matrix b alone, named after its store
    assert (tmp_path / "dashboards/a/dashboard.html").exists() and (tmp_path / "dashboards/b/dashboard.html").exists()
    a_sources = json.loads((tmp_path / "dashboards/a/sources.json").read_text())["stores"]
    assert [Path(s).name for s in a_sources] == ["a-again.jsonl", "a.jsonl"]
    assert "(baseline: fake/bf16/bs1)" in out and "(baseline: fake/bf16/bs2)" in out
    assert "## results/b.jsonl" in err and not (tmp_path / "dashboards/combined").exists()
    assert main(["report", "results", "--out", "reports"]) == 0  # a folder given: the same, under --out
    assert (tmp_path / "reports/a/report.md").exists() and (tmp_path / "reports/b/report.md").exists()
    # stores named one by one are the user's choice of what goes together
    assert main(["report", "results/a.jsonl", "results/a-again.jsonl", "--out", "both"]) == 0
    assert (tmp_path / "both/dashboard.html").exists()


def test_a_matrix_name_in_a_store_never_names_a_folder_outside(tmp_path):
    from bench.report.driver import matrix_groups

    _store(tmp_path / "h.jsonl", "../../etc", 1)
    _store(tmp_path / "t.jsonl", "t", 1)
    assert matrix_groups([tmp_path / "h.jsonl", tmp_path / "t.jsonl"]) == {"store h": [tmp_path / "h.jsonl"],
                                                                           "t": [tmp_path / "t.jsonl"]}
