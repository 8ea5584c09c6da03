import json

import pytest

from bench import SCHEMA_VERSION
from bench.errors import BenchInputError
from bench.report.data import report_data
from bench.store import ResultStore, load_records


def rec(cell_id, trial=0, status="ok", **metrics):
    return {"schema_version": SCHEMA_VERSION, "cell_id": cell_id, "trial": trial, "status": status,
            "cell": {"backend": "fake", "precision": "bf16", "max_batch_size": 1, "workload": {"name": "w"}},
            "metrics": metrics or None}


def test_append_and_read_back(tmp_path):
    s = ResultStore(tmp_path / "r.jsonl")
    s.append(rec("a", output_throughput=1.5))
    s.append(rec("a", 1, "oom"))
    assert [r["status"] for r in s.records()] == ["ok", "oom"]
    assert s.finished() == {("a", 0), ("a", 1)}


def test_torn_line_is_skipped_and_fenced(tmp_path):
    path = tmp_path / "r.jsonl"
    s = ResultStore(path)
    s.append(rec("a"))
    with open(path, "ab") as fh:  # a writer killed mid-line
        fh.write(b'{"schema_version": 1, "cell_id": "b", "tri')
    with pytest.warns(UserWarning, match="torn"):
        assert [r["cell_id"] for r in s.records()] == ["a"]
    s.append(rec("c"))
    with pytest.warns(UserWarning):
        assert [r["cell_id"] for r in s.records()] == ["a", "c"]


def test_newer_schema_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({**rec("a"), "schema_version": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(BenchInputError, match="newer than this harness"):
        list(ResultStore(path).records())


def test_bad_status_refused(tmp_path):
    with pytest.raises(ValueError):
        ResultStore(tmp_path / "r.jsonl").append(rec("a", status="fine"))


def test_frame_flattens_metrics(tmp_path):
    s = ResultStore(tmp_path / "r.jsonl")
    s.append(rec("a", output_throughput=2.0))
    f = report_data(load_records([tmp_path / "r.jsonl"])).frame
    assert f.loc[0, "output_throughput"] == 2.0 and f.loc[0, "backend"] == "fake"
