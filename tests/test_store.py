import gzip
import json
import os

import pytest

from bench import SCHEMA_VERSION
from bench.cli import main
from bench.errors import BenchInputError
from bench.report.data import report_data
from bench.results import query
from bench.results.records import Measurement, new_record
from bench.results.store import ResultStore
from tests.support.records import make_record


def test_append_and_read_back(tmp_path):
    s = ResultStore(tmp_path / "r.jsonl")
    s.append(make_record("a", output_throughput=1.5))
    s.append(make_record("a", 1, "oom"))
    assert [r["status"] for r in s.records()] == ["ok", "oom"]
    (a, b) = query.load([tmp_path / "r.jsonl"])
    assert isinstance(a, Measurement) and a.metric("output_throughput") == 1.5 and b.status == "oom"
    assert a.context.run_id == "run-1" and a.store == "r" and a.schema_version == SCHEMA_VERSION


def test_torn_line_is_skipped_and_fenced(tmp_path):
    path = tmp_path / "r.jsonl"
    s = ResultStore(path)
    s.append(make_record("a"))
    with open(path, "ab") as fh:  # a writer killed mid-line
        fh.write(b'{"schema_version": 2, "cell_id": "b", "tri')
    with pytest.warns(UserWarning, match="torn"):
        assert [r["cell_id"] for r in s.records()] == ["a"]
    s.append(make_record("c"))
    with pytest.warns(UserWarning):
        assert [r["cell_id"] for r in s.records()] == ["a", "c"]


def test_newer_schema_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({**make_record("a").to_json(), "schema_version": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(BenchInputError, match="newer than this harness"):
        list(ResultStore(path).records())


def test_bad_status_and_untyped_records_refused(tmp_path):
    with pytest.raises(ValueError, match="status"):
        make_record("a", status="fine")
    with pytest.raises(TypeError, match="new_record"):
        ResultStore(tmp_path / "r.jsonl").append({"cell_id": "a", "status": "ok"})
    with pytest.raises(ValueError, match="kind"):
        new_record("benchmark", {}, {"status": "ok"}, context=make_record().context)


def test_frame_flattens_metrics(tmp_path):
    s = ResultStore(tmp_path / "r.jsonl")
    s.append(make_record("a", output_throughput=2.0))
    f = report_data(query.load([tmp_path / "r.jsonl"])).frame
    assert f.loc[0, "output_throughput"] == 2.0 and f.loc[0, "backend"] == "fake" and f.loc[0, "run_id"] == "run-1"


def test_folder_or_unreadable_store_is_exit_2(tmp_path, capsys):
    # A folder stands for its *.jsonl stores (tests/test_columnar.py); one without any is refused.
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "x.json").write_text("{}")
    for argv in (["report", str(tmp_path / "results")], ["compare", str(tmp_path / "results"), str(tmp_path / "results")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "holds no result stores (*.jsonl)" in err and "Traceback" not in err
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.jsonl"
        locked.write_text("")
        locked.chmod(0)
        assert main(["report", str(locked)]) == 2
        assert "not readable" in capsys.readouterr().err


def test_one_writer_at_a_time(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    with store.writer():
        with pytest.raises(BenchInputError, match=r"being written by bench process \d+"):
            with ResultStore(tmp_path / "r.jsonl").writer():
                pass
    with store.writer():  # released when the holder is done
        pass
    with pytest.raises(BenchInputError, match="is a folder"):
        with ResultStore(tmp_path).writer():
            pass


def test_schema_1_lines_load_with_reconstructed_runs(tmp_path):
    """A schema-1 store (no run ids) still loads; a --redo and a new commit start new runs; cell ids are kept."""
    def v1(trial, commit, t, tok_s):
        return {"schema_version": 1, "cell_id": "abc", "trial": trial, "status": "ok", "started_at": t,
                "cell": {"backend": "fake", "precision": "bf16", "max_batch_size": 1, "workload": {"name": "w"}},
                "metrics": {"output_throughput": tok_s}, "environment": {"commit": commit, "cpu": "x"},
                "settings": {"trials": 2, "warmup": 1, "matrix": "m"}}
    lines = [v1(0, "a" * 40, 1, 40.0), v1(1, "a" * 40, 2, 41.0),   # run 1
             v1(0, "a" * 40, 3, 20.0), v1(1, "a" * 40, 4, 21.0),   # --redo at the same commit: run 2
             v1(0, "b" * 40, 5, 30.0)]                               # another commit: run 3
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    recs = query.load([path])
    ids = [r.context.run_id for r in recs]
    assert ids[0] == ids[1] != ids[2] == ids[3] != ids[4]
    assert {r.cell_id for r in recs} == {"abc"} and recs[4].context.commit == "b" * 40
    sel = query.select(recs)
    (row,) = sel.rows
    assert row.context.run_id == ids[4] and len(sel.history) == 2
    assert query.load([path])[0].context.run_id == ids[0]  # stable across reads
    gz = path.with_name("old.jsonl.gz")  # compressed, its runs are reconstructed as its plain twin's
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert [r.context.run_id for r in query.load([gz])] == ids


def test_a_gz_store_reads_as_its_plain_twin_and_is_never_appended_to(tmp_path):
    plain = tmp_path / "r.jsonl"
    s = ResultStore(plain)
    for trial in range(3):
        s.append(make_record("a", trial, output_throughput=1.5 + trial))
    s.append(make_record("b", 0, "oom"))
    with open(plain, "ab") as fh:  # a torn last line, in both twins
        fh.write(b'{"schema_version": 2, "cell_id": "c", "tri')
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    unnamed = tmp_path / "unnamed.jsonl"  # compressed without saying so: gzip's magic bytes tell
    unnamed.write_bytes(gz.read_bytes())
    with pytest.warns(UserWarning, match="skipped 1 torn"):
        assert list(ResultStore(gz).records()) == list(ResultStore(plain).records())
    with pytest.warns(UserWarning, match="skipped 1 torn"):
        twins = [query.load([p]) for p in (plain, gz, unnamed)]
    assert [r.to_json() for r in twins[0]] == [r.to_json() for r in twins[1]] == [r.to_json() for r in twins[2]]
    assert {r.store for r in twins[0] + twins[1]} == {"r"} and len(twins[0]) == 4
    assert query.select(twins[1]).by_key().keys() == query.select(twins[0]).by_key().keys()
    # No companion for a compressed store: it is read as typed records, whatever its size.
    assert not query.prefer_table([gz]) and query.table([gz]) is None
    assert not (tmp_path / ".bench-cache").exists()
    # Never written: appending, holding it for a run, or naming it as a run's --store is refused, naming the fix.
    before = gz.read_bytes()
    for attempt in (lambda: ResultStore(gz).append(make_record("d")), lambda: ResultStore(unnamed).writer().__enter__(),
                    lambda: query.check_store_path(gz, must_exist=False)):
        with pytest.raises(BenchInputError, match=r"r\.jsonl\.gz'? is gzip-compressed|unnamed\.jsonl'? is gzip-compressed") as e:
            attempt()
        assert "--store" in str(e.value) and "gunzip -k" in str(e.value)
    assert gz.read_bytes() == before and not (tmp_path / "unnamed.jsonl.lock").exists()


def test_a_truncated_gz_store_is_refused_with_the_check_to_run(tmp_path):
    plain = tmp_path / "r.jsonl"
    ResultStore(plain).append(make_record("a"))
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes())[:-12])  # cut short: no gzip trailer
    with pytest.raises(BenchInputError, match="cannot be decompressed.*gzip -t"):
        query.load([gz])
