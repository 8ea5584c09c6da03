"""The columnar companion of a store (bench.results.columnar, read through bench.results.query.table):
kept in step with the JSON lines (new tail parsed, stale companion rebuilt, torn last line), and the
same report and comparison as the typed-record path, on real fake-backend stores."""

import json
import shutil
import warnings
from pathlib import Path

import pytest

from bench.errors import BenchInputError
from bench.report.build import build_report
from bench.results import columnar, query
from bench.results.compare import compare_stores, to_markdown
from bench.results.store import ResultStore
from tests.support.cli import bench_in_process
from tests.support.folders import isolated

MATRIX = '''name = "{name}"
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16", "int4"]
max_batch_sizes = [1, 2]
workloads = ["w"]
device = "cpu"
runs = 2
trials = 2
baseline = {{ backend = "fake", precision = "bf16", max_batch_size = 1, fail = "none" }}
[options]
fail = ["none", "oom"]
slowdown = [{slowdown}]
[workload.w]
path = "{data}"
num_requests = 6
'''


def bench(*args, cwd):
    """`bench ARGS` in folder cwd, in this process (tests/support/cli.py: these tests are of what the commands read
    and write, not of the process)."""
    return bench_in_process(*args, cwd=cwd)


def derived(lines: list[str], run_id: str, shift: float, scale: float = 1.0, slowdown: float | None = None) -> str:
    """Return the records of one real run as another run context would have stored them: another run id and
    start, throughputs scaled by `scale`, and (slowdown) the fake backend's slowdown option, with its cell id."""
    from bench import CELL_ID_VERSION
    from bench.spec.cells import identity_options, short_hash

    out = []
    for line in lines:
        rec = json.loads(line)
        rec["context"].update(run_id=run_id, started_at=rec["context"]["started_at"] + shift)
        if rec.get("started_at") is not None:
            rec["started_at"] += shift
        for k, v in (rec["metrics"] or {}).items():
            if isinstance(v, float) and "throughput" in k:
                rec["metrics"][k] = v * scale
        if slowdown is not None:
            rec["cell"]["options"]["slowdown"] = slowdown
            cell = dict(rec["cell"], options=identity_options("fake", rec["cell"]["options"]))
            rec["cell_id"] = short_hash({"schema_version": CELL_ID_VERSION, "cell": cell})
        out.append(json.dumps(rec, sort_keys=True) + "\n")
    return "".join(out)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Stores made from one real fake-backend run (failures included): base (three run contexts: history),
    again (a third run of the same cells) and head (its cells 20% slower, the option slowdown differs)."""
    d = tmp_path_factory.mktemp("columnar")
    data = d / "sharegpt.json"
    data.write_text(json.dumps([{"id": f"r{i}", "conversations": [
        {"from": "human", "value": "tell me about the weather " * (1 + i % 7)},
        {"from": "gpt", "value": "Here is a long answer about it. " * (2 + i % 5)}]} for i in range(20)]))
    (d / "base.toml").write_text(MATRIX.format(name="base", slowdown="1.0", data=data))
    with isolated(d):  # a test's environment: its workers fork from the suite's zygote (tests/support/folders.py)
        out = bench("run", "--matrix", "base.toml", "--store", "run.jsonl", "--no-progress", "--report-dir", "rep", cwd=d)
    assert out.returncode == 0, out.stderr
    lines = (d / "run.jsonl").read_text().splitlines()
    (d / "base.jsonl").write_text(derived(lines, "night-0", -86400, 1.02) + derived(lines, "night-1", 0, 1.01)
                                  + derived(lines, "night-2", 86400))
    (d / "again.jsonl").write_text(derived(lines, "night-3", 2 * 86400, 0.99))
    (d / "head.jsonl").write_text(derived(lines, "head", 3 * 86400, 1 / 1.2, slowdown=1.2))
    return d


def copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    return dst


def reports(stores, tmp_path, **kw) -> dict:
    """Return {columnar: {file: text}} of one report made both ways."""
    out = {}
    for col in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            paths = build_report(stores, tmp_path / f"out-{col}", columnar=col, **kw)
        out[col] = {k: paths[k].read_text() for k in ("markdown", "csv", "html", "report", "dashboard")}
        out[col]["warnings"] = paths["warnings"]
    return out


def test_report_is_identical_through_the_companion(stores, tmp_path, monkeypatch):
    from bench.report import build

    base = copy(stores / "base.jsonl", tmp_path / "base.jsonl")
    again = copy(stores / "again.jsonl", tmp_path / "again.jsonl")
    made = reports([base, again], tmp_path)
    assert made[True] == made[False]
    monkeypatch.setattr(build, "HISTORY_CHUNK", 1)  # history aggregated one run context at a time: the same
    assert reports([base, again], tmp_path)[True] == made[False]
    assert "OOM" in made[True]["markdown"] and "Earlier runs" in made[True]["markdown"]  # failures and history
    assert "Comparison" in made[True]["dashboard"]
    assert (tmp_path / ".bench-cache" / "base.jsonl.columns" / "manifest.json").exists()
    pooled = reports([base], tmp_path / "pooled", pool=True)  # its own folders: no "held the report of" warning
    assert pooled[True] == pooled[False] and "pooled" in pooled[True]["markdown"]


@pytest.mark.parametrize("other, kw", [
    ("head", {"ignore_options": ["slowdown"]}),
    ("head", {"ignore_options": ["slowdown"], "metrics": ["output_throughput", "request_throughput"], "pool": True}),
    ("again", {"test": "mannwhitney"}),
])
def test_compare_is_identical_through_the_companion(stores, tmp_path, other, kw):
    base = copy(stores / "base.jsonl", tmp_path / "base.jsonl")
    head = copy(stores / f"{other}.jsonl", tmp_path / f"{other}.jsonl")
    made = {col: compare_stores(base, head, columnar=col, **kw) for col in (False, True)}
    assert to_markdown(made[True]) == to_markdown(made[False])
    assert made[True].exit_status == made[False].exit_status
    assert made[True].warnings == made[False].warnings


def test_commit_filter_is_identical_through_the_companion(stores, tmp_path):
    base = copy(stores / "base.jsonl", tmp_path / "base.jsonl")
    commit = json.loads(base.read_text().splitlines()[0])["context"]["commit"]
    made = {col: to_markdown(compare_stores(base, base, base_commit=commit[:8], columnar=col)) for col in (False, True)}
    assert made[True] == made[False]
    for col in (False, True):
        with pytest.raises(BenchInputError, match="no record in .* was measured at commit 'ffff0000'"):
            compare_stores(base, base, base_commit="ffff0000", columnar=col)


def with_partial_runs(store: Path, dst: Path) -> Path:
    """Write store's lines less some ok trials (workers killed mid-run): in the latest context, one cell
    loses a trial of run 1 (left out beside run 0) and another one of each run (no complete run: kept,
    marked partial); in an earlier context (history) a third cell loses a trial of run 0."""
    recs = [json.loads(line) for line in store.read_text().splitlines()]
    ok_cells = list(dict.fromkeys(r["cell_id"] for r in recs if r["status"] == "ok"))
    drop = {("night-2", ok_cells[0], 1, 1), ("night-2", ok_cells[1], 0, 1), ("night-2", ok_cells[1], 1, 1),
            ("night-1", ok_cells[2], 0, 0)}
    kept = [r for r in recs if (r["context"]["run_id"], r["cell_id"], r["run"], r["trial"]) not in drop]
    assert len(kept) == len(recs) - len(drop)
    dst.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    return dst


def test_partial_runs_are_left_out_alike_through_both_readers(stores, tmp_path):
    store = with_partial_runs(stores / "base.jsonl", tmp_path / "partial.jsonl")
    made = reports([store], tmp_path)
    assert made[True] == made[False]
    assert "(+1 partial run left out)" in made[True]["markdown"] and ", partial" in made[True]["markdown"]
    assert any("partial runs (a worker killed" in w for w in made[True]["warnings"])
    pooled = reports([store], tmp_path, pool=True)
    assert pooled[True] == pooled[False] and "partial run left out" in pooled[True]["markdown"]
    head = copy(stores / "head.jsonl", tmp_path / "head.jsonl")
    for base, other in ((store, head), (head, store)):
        for kw in ({}, {"pool": True}):
            both = {col: compare_stores(base, other, ignore_options=["slowdown"], columnar=col, **kw) for col in (False, True)}
            assert to_markdown(both[True]) == to_markdown(both[False])
            assert both[True].warnings == both[False].warnings


def manifest(store: Path) -> dict:
    return json.loads((columnar.companion_dir(store) / "manifest.json").read_text())


def test_appended_records_extend_the_companion_and_a_rewrite_rebuilds_it(stores, tmp_path):
    lines = (stores / "base.jsonl").read_bytes().splitlines(keepends=True)
    store = tmp_path / "s.jsonl"
    store.write_bytes(b"".join(lines[:10]))
    assert len(query.table([store]).keys) == 10
    first = manifest(store)
    assert first["records"] == 10 and len(first["parts"]) == 1
    with open(store, "ab") as fh:
        fh.write(b"".join(lines[10:15]))
    t = query.table([store])
    second = manifest(store)
    assert len(t.keys) == 15 and second["parts"][0] == first["parts"][0] and len(second["parts"]) == 2
    assert t.keys.pos.tolist() == list(range(15))
    # The same size, other bytes (a store replaced, not appended to): rebuilt from the first byte.
    store.write_bytes(b"".join(lines[20:25]) + b"".join(lines[10:20]))
    t = query.table([store])
    third = manifest(store)
    assert len(third["parts"]) == 1 and third["records"] == 15
    assert t.keys.cell_id.tolist() == [json.loads(x)["cell_id"] for x in lines[20:25] + lines[10:20]]
    # Shrunk: rebuilt too.
    store.write_bytes(b"".join(lines[:3]))
    assert len(query.table([store]).keys) == 3 and manifest(store)["records"] == 3


def test_the_writer_keeps_the_companion_current_and_equal_to_a_rebuild(stores, tmp_path, monkeypatch):
    records = query.load([copy(stores / "base.jsonl", tmp_path / "src" / "base.jsonl")])
    small = ResultStore(tmp_path / "small" / "s.jsonl")
    with small.writer():
        small.append(records[0])
    assert not columnar.companion_dir(small.path).exists()  # read as typed records: no companion made
    monkeypatch.setattr(query, "TABLE_MIN_BYTES", 0)  # every store is read as columns
    store = ResultStore(tmp_path / "w" / "s.jsonl")
    thirds = len(records) // 3
    for chunk in (records[:thirds], records[thirds:2 * thirds], records[2 * thirds:]):  # three invocations
        with store.writer():
            for rec in chunk:
                store.append(rec)
        assert manifest(store.path)["covered"] == store.path.stat().st_size
    with pytest.raises(RuntimeError), store.writer():  # an invocation that fails leaves the companion as it was
        store.append(records[0])
        raise RuntimeError("killed")
    assert manifest(store.path)["covered"] < store.path.stat().st_size
    with store.writer():
        pass
    assert manifest(store.path)["covered"] == store.path.stat().st_size
    rebuilt = copy(store.path, tmp_path / "r" / "s.jsonl")
    written, fresh = columnar.open_store(store.path), columnar.open_store(rebuilt)
    assert len(manifest(store.path)["parts"]) > 1 == len(manifest(rebuilt)["parts"])
    for kind in columnar.KINDS:
        a, b = written.read(kind), fresh.read(kind)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.to_pandas().equals(b.to_pandas()), kind
    key = columnar.code_key()
    monkeypatch.setattr(columnar, "code_key", lambda: key)
    monkeypatch.setattr(columnar, "_parse", lambda *a: pytest.fail("a line parsed again"))  # warm: nothing left
    with pytest.warns(UserWarning, match=f"line {len(records) + 1} repeats the record of line 1 .*: counted once"):
        assert len(query.table([store.path]).keys) == len(records)  # the record the failed invocation stored again


def test_many_parts_are_compacted(stores, tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "MAX_PARTS", 2)
    lines = (stores / "base.jsonl").read_bytes().splitlines(keepends=True)
    store = tmp_path / "s.jsonl"
    store.write_bytes(b"")
    for i in range(4):
        with open(store, "ab") as fh:
            fh.write(lines[i])
        assert len(query.table([store]).keys) == i + 1
    assert len(manifest(store)["parts"]) <= 2
    assert len(list(columnar.companion_dir(store).glob("*.records.parquet"))) == len(manifest(store)["parts"])


def test_a_large_store_is_written_in_segments(stores, tmp_path, monkeypatch):
    lines = (stores / "base.jsonl").read_bytes().splitlines(keepends=True)
    store = tmp_path / "s.jsonl"
    store.write_bytes(b"".join(lines[:10]))
    # A part holds at most SEGMENT_BYTES (whole lines), so a fifth of the store (never below one line) makes 5+ parts
    segment = max(max(map(len, lines[:10])), len(b"".join(lines[:10])) // 5)
    monkeypatch.setattr(columnar, "SEGMENT_BYTES", segment)
    t = query.table([store])
    assert len(manifest(store)["parts"]) >= 5 and t.keys.pos.tolist() == list(range(10))
    assert [r.cell_id for r in t.records(list(range(10)))] == [r.cell_id for r in query.load([store])]


def test_torn_last_line_is_skipped_then_fenced_off(stores, tmp_path):
    lines = (stores / "base.jsonl").read_bytes().splitlines(keepends=True)
    store = tmp_path / "s.jsonl"
    store.write_bytes(b"".join(lines[:4]) + lines[4][:100])  # killed mid-write
    with pytest.warns(UserWarning, match="skipped 1 torn or invalid line"):
        t = query.table([store])
    assert len(t.keys) == 4 and manifest(store)["covered"] == len(b"".join(lines[:4]))
    # The next append fences the torn line off with a newline; both readers then agree.
    ResultStore(store).append(query.load([copy(stores / "base.jsonl", tmp_path / "one.jsonl")])[5])
    with pytest.warns(UserWarning, match="skipped 1 torn or invalid line"):
        t = query.table([store])
    with pytest.warns(UserWarning, match="skipped 1 torn or invalid line"):
        records = query.load([store])
    assert len(t.keys) == 5 == len(records)
    assert [r.cell_id for r in t.records(list(range(5)))] == [r.cell_id for r in records]


def test_a_complete_last_line_without_newline_is_read_but_not_cached(stores, tmp_path):
    lines = (stores / "base.jsonl").read_bytes().splitlines(keepends=True)
    store = tmp_path / "s.jsonl"
    store.write_bytes(b"".join(lines[:3]) + lines[3].rstrip(b"\n"))
    t = query.table([store])
    assert len(t.keys) == 4 and manifest(store)["records"] == 3
    full = t.records([3], full=True)[0]
    assert full.samples and full.cell_id == json.loads(lines[3])["cell_id"]


def test_schema_1_store_is_read_as_records(tmp_path):
    store = tmp_path / "old.jsonl"
    store.write_text(json.dumps({"schema_version": 1, "cell_id": "a", "cell": {"backend": "fake"}, "status": "ok",
                                 "metrics": {"output_throughput": 1.0}}) + "\n")
    assert query.table([store]) is None
    assert len(query.load([store])) == 1


def test_read_only_folder_builds_in_memory(stores, tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    d = tmp_path / "ro"
    store = copy(stores / "base.jsonl", d / "base.jsonl")
    d.chmod(0o555)
    try:
        t = query.table([store])
        assert len(t.keys) == len(store.read_text().splitlines()) and len(t.frame(list(range(3)))) == 3
    finally:
        d.chmod(0o755)


def test_folder_of_stores_reports_and_compares_like_the_stores(stores, tmp_path):
    nightly = tmp_path / "nightly"
    lines = (stores / "base.jsonl").read_text().splitlines(keepends=True)
    half = len(lines) // 2  # the two run contexts of base, one store each, as a nightly job writes them
    nightly.mkdir()
    (nightly / "2026-11-30.jsonl").write_text("".join(lines[:half]))
    (nightly / "2026-12-01.jsonl").write_text("".join(lines[half:]))
    listed = sorted(nightly.glob("*.jsonl"))
    assert query.expand_stores([nightly]) == listed == query.expand_stores([str(nightly / "*.jsonl")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = build_report([nightly], tmp_path / "dir", columnar=True)
        b = build_report(listed, tmp_path / "list", columnar=False)
    assert a["markdown"].read_text() == b["markdown"].read_text()
    assert "Earlier runs" in a["markdown"].read_text()
    head = copy(stores / "head.jsonl", tmp_path / "heads" / "head.jsonl")
    made = {col: to_markdown(compare_stores(nightly, head.parent, ignore_options=["slowdown"], columnar=col))
            for col in (False, True)}
    assert made[True] == made[False] and "regression" in made[True]
    with pytest.raises(BenchInputError, match="holds no result stores"):
        query.expand_stores([empty_dir(tmp_path)])
    with pytest.raises(BenchInputError, match="no result store matches"):
        query.expand_stores([str(tmp_path / "nope-*.jsonl")])


def empty_dir(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def test_cli_report_dir_and_folder(stores, tmp_path):
    from bench.cli import build_parser

    for flag in ("--report-dir", "--out"):  # report takes run's and study's --report-dir; --out stays
        assert build_parser().parse_args(["report", "s.jsonl", flag, "d"]).out == "d"
    nightly = tmp_path / "nightly"
    copy(stores / "base.jsonl", nightly / "a.jsonl")
    out = bench("report", str(nightly), "--report-dir", str(tmp_path / "r1"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r1" / "speedup.md").exists()


def test_report_and_compare_read_a_gz_store_as_its_plain_twin(stores, tmp_path):
    import gzip

    base = copy(stores / "base.jsonl", tmp_path / "plain" / "base.jsonl")
    gz = tmp_path / "gz" / "base.jsonl.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(base.read_bytes()))
    plain, packed = reports([base], tmp_path / "plain"), reports([gz], tmp_path / "gz")
    assert packed[True] == packed[False] == plain[False]  # columnar=True: no companion, read as typed records
    assert not (gz.parent / ".bench-cache").exists()
    head = copy(stores / "head.jsonl", tmp_path / "head.jsonl")
    expected = to_markdown(compare_stores(base, head, ignore_options=["slowdown"], columnar=False))
    for col in (None, True, False):
        both = [to_markdown(compare_stores(a, b, ignore_options=["slowdown"], columnar=col))
                for a, b in ((gz, head), (head, gz))]
        assert both[0] == expected.replace(str(base), str(gz))
        assert "regression" in both[0] and str(gz) in both[1]
    out = bench("report", str(gz), "--report-dir", str(tmp_path / "cli"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "cli" / "speedup.md").read_text() == plain[False]["markdown"]
    out = bench("compare", str(gz), str(head), "--ignore-option", "slowdown", cwd=tmp_path)
    assert out.returncode == 1 and "regression" in out.stdout, out.stderr  # head is 20% slower: exit 1
    out = bench("run", "--matrix", str(stores / "base.toml"), "--store", str(gz), cwd=tmp_path)
    assert out.returncode == 2 and "is gzip-compressed" in out.stderr and "Traceback" not in out.stderr
