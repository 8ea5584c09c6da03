"""Hostile stores and companions (issue 47): what a reader counts is what the store holds, once.

- The columnar companion is checked against every byte it covers: a store edited in the middle at the same size
  shows its new figure; a damaged part file (garbage, truncated, missing, one byte flipped) or manifest is rebuilt
  with a warning, never a pyarrow traceback.
- One record, one count (bench.results.duplicates): a store given twice, a copy of a store, a record stored twice
  (with 10x its figure: a conflicting duplicate) count once, with one warning naming the store and line; both
  readers (typed records and columns) agree.
- Two hosts' runs under one run id are never one row.
- Random and torn JSON lines give records, warnings or a BenchInputError, nothing else.
"""

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import BenchInputError
from bench.report.build import build_report
from bench.results import columnar, query
from bench.results.store import ResultStore
from tests.support.synthetic import synthetic_records

READERS = (False, True)  # columnar: typed records, then columns


def two_by_three() -> list:
    """Return the records of a 2 runs x 3 trials matrix of four cells (one run context), run 1 10% faster."""
    recs = synthetic_records(workloads=(("fixed", 128, 128),), backends=("hf",), precisions=("bf16", "int4"),
                             batch_sizes=(1, 2), trials=3, requests=4, telemetry=False)
    out = []
    for run in (0, 1):
        for r in recs:
            ctx = replace(r.context, runs=2)
            metrics = {k: v * 1.1 if run and isinstance(v, float) and "throughput" in k else v
                       for k, v in (r.metrics or {}).items()} if r.metrics else r.metrics
            out.append(replace(r, context=ctx, run=run, metrics=metrics))
    return out


def write(path: Path, records) -> Path:
    store = ResultStore(path)
    for r in records:
        store.append(r)
    return path


@pytest.fixture
def store(tmp_path) -> Path:
    return write(tmp_path / "s.jsonl", two_by_three())


def read(paths, col: bool) -> list:
    """Return (cell_id, run, trial, output_throughput) of the measurements one reader counts, in store order."""
    if col:
        t = query.table(paths)
        recs = t.records(t.indices())
    else:
        recs = query.measurements(query.load(paths))
    return [(r.cell_id, r.run, r.trial, r.metric("output_throughput")) for r in recs]


def read_warned(paths, col: bool):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = read(paths, col)
    return got, [str(w.message) for w in caught]


def markdown(paths, tmp_path: Path, col: bool, **kw) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = build_report(paths, tmp_path / f"report-{col}-{len(list(tmp_path.iterdir()))}", columnar=col, **kw)
    return made["markdown"].read_text()


# ---- the companion: every covered byte checked ----------------------------------------------------------------


def edit_figure(path: Path, line_no: int, old: float, new: float) -> None:
    """Rewrite one line's output_throughput in place, keeping the store's size (same number of characters)."""
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    a, b = json.dumps(old).encode(), json.dumps(new).encode()
    assert len(a) == len(b) and lines[line_no].count(a) >= 1
    lines[line_no] = lines[line_no].replace(b'"output_throughput":' + a, b'"output_throughput":' + b)
    edited = b"".join(lines)
    assert len(edited) == len(data) and edited != data
    path.write_bytes(edited)


def test_an_edit_in_the_middle_at_the_same_size_shows_its_new_figure(tmp_path, monkeypatch):
    # A store of several MiB (more than the first and last MiB the companion once checked), in parts.
    recs = synthetic_records(workloads=(("fixed", 128, 128),), backends=("hf", "trtllm"), precisions=("bf16", "int4"),
                             batch_sizes=(1, 2, 4, 8), trials=40, requests=32, telemetry=True)
    path = write(tmp_path / "big.jsonl", recs)
    assert path.stat().st_size > 3 << 20
    monkeypatch.setattr(columnar, "SEGMENT_BYTES", path.stat().st_size // 4)
    before = read([path], True)
    parts = json.loads((columnar.companion_dir(path) / "manifest.json").read_text())["parts"]
    assert len(parts) >= 4
    middle = len(recs) // 2
    old = json.loads(path.read_text().splitlines()[middle])["metrics"]["output_throughput"]
    new = float(str(old)[:-1] + ("1" if str(old)[-1] != "1" else "2"))  # the same length, another figure
    edit_figure(path, middle, old, new)
    parsed = []
    real, key = columnar._parse, columnar.code_key()
    monkeypatch.setattr(columnar, "code_key", lambda: key)  # the spy below is not a new harness
    monkeypatch.setattr(columnar, "_parse", lambda fh, p, start, end, *a: parsed.append(start) or real(fh, p, start, end, *a))
    after = {col: read([path], col) for col in READERS}
    assert after[True] == after[False]
    assert after[True][middle][3] == new != before[middle][3]
    assert after[True][:middle] == before[:middle] and after[True][middle + 1:] == before[middle + 1:]
    first_parsed = json.loads((columnar.companion_dir(path) / "manifest.json").read_text())["checks"]
    assert parsed and min(parsed) > 0  # the parts before the edit were kept, not parsed again
    assert min(parsed) in {c["start"] for c in first_parsed.values()}


def damage(f: Path, how: str) -> None:
    data = f.read_bytes()
    if how == "garbage":
        f.write_bytes(os.urandom(len(data)))
    elif how == "truncated":
        f.write_bytes(data[: len(data) // 2])
    elif how == "missing":
        f.unlink()
    elif how == "one byte flipped":
        i = len(data) // 2
        f.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif how == "empty":
        f.write_bytes(b"")


@pytest.mark.parametrize("kind", ["records", "samples"])
@pytest.mark.parametrize("how", ["garbage", "truncated", "missing", "one byte flipped", "empty"])
def test_a_damaged_part_is_rebuilt_with_a_warning(store, kind, how):
    expected = read([store], False)
    assert read([store], True) == expected  # the companion is built
    (part,) = columnar.companion_dir(store).glob(f"*.{kind}.parquet")
    damage(part, how)
    with pytest.warns(UserWarning, match=f"part .* of its columnar companion .* is missing, unreadable or altered "
                                         f"\\({kind}\\): rebuilt from the JSON lines"):
        got = read([store], True)
    assert got == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilt: the next read is quiet
        assert read([store], True) == expected


@pytest.mark.parametrize("text", ["{not json", "[]", '{"key": 1}', '{"key": null, "parts": "x"}'])
def test_a_damaged_manifest_is_rebuilt(store, text):
    expected = read([store], True)
    key = columnar.code_key()
    manifest = columnar.companion_dir(store) / "manifest.json"
    manifest.write_text(text.replace("null", json.dumps(key)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read([store], True) == expected
    assert all("rebuilt from the JSON lines" in str(w.message) for w in caught)
    assert json.loads(manifest.read_text())["key"] == key


def test_a_part_damaged_after_it_was_checked_is_a_clear_error(store):
    read([store], True)
    opened = columnar.open_store(store)
    (part,) = columnar.companion_dir(store).glob("*.records.parquet")
    damage(part, "garbage")
    with pytest.raises(BenchInputError, match="of its columnar companion cannot be read .* delete"):
        opened.read("records")


# ---- one record, one count --------------------------------------------------------------------------------


@pytest.mark.parametrize("col", READERS)
def test_a_store_given_twice_is_read_once(store, tmp_path, col):
    once = read([store], col)
    (tmp_path / "link.jsonl").symlink_to(store)
    for again in (store, tmp_path / "." / store.name, tmp_path / "link.jsonl"):
        got, said = read_warned([store, again], col)
        assert got == once
        assert any("was given twice" in w and "read once" in w for w in said), said
    md = markdown([store, store], tmp_path, col)
    assert md == markdown([store], tmp_path, col)
    assert "2 × 3" in md and "2 × 6" not in md


@pytest.mark.parametrize("col", READERS)
def test_a_copy_of_a_store_counts_once(store, tmp_path, col):
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(store.read_bytes())
    once = read([store], col)
    got, said = read_warned([store, copy], col)
    assert got == once
    (warning,) = [w for w in said if "repeat" in w]
    assert warning.startswith(f"{len(once)} stored records repeat the key of an earlier record")
    assert f"store {copy} line 1 repeats the record of store {store} line 1 (run synthetic-0, cell " in warning
    assert "conflicting" not in warning and "and 19 more" in warning
    assert markdown([store, copy], tmp_path, col) == markdown([store], tmp_path, col)


def test_a_copy_warns_alike_through_both_readers(store, tmp_path):
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(store.read_bytes())
    said = {col: [w for w in read_warned([store, copy], col)[1] if "repeat" in w] for col in READERS}
    assert said[True] == said[False] and len(said[True]) == 1


def test_a_record_stored_twice_with_ten_times_its_figure_counts_once_as_a_conflict(store, tmp_path):
    lines = store.read_text().splitlines(keepends=True)
    rec = json.loads(lines[2])
    figure = rec["metrics"]["output_throughput"]
    rec["metrics"]["output_throughput"] = figure * 10
    with open(store, "a") as fh:
        fh.write(json.dumps(rec, sort_keys=True) + "\n")
    clean = tmp_path / "clean"
    clean.mkdir()
    clean_store = clean / "s.jsonl"
    clean_store.write_text("".join(lines))
    said = {}
    for col in READERS:
        got, said[col] = read_warned([store], col)
        assert got == read([clean_store], col)
        assert got[2][3] == figure
    assert said[True] == said[False]
    (warning,) = [w for w in said[True] if "repeat" in w]
    assert warning.startswith(f"store {store} line {len(lines) + 1} repeats the record of line 3 (run synthetic-0, "
                              f"cell {rec['cell_id']}, run 0, trial 2): a conflicting duplicate (its figures differ: ")
    assert f"output_throughput {figure * 10:.6g} vs {figure:.6g}" in warning and "the first is counted" in warning
    for col in READERS:
        assert markdown([store], tmp_path, col) == markdown([clean_store], tmp_path, col)


def test_a_failed_pass_stored_twice_counts_once(tmp_path):
    recs = two_by_three()
    failed = replace(recs[0], status="error", metrics=None, error="boom")
    path = write(tmp_path / "f.jsonl", [failed, *recs[1:], failed])
    for col in READERS:
        got, said = read_warned([path], col)
        assert len(got) == len(recs)
        assert any(f"line {len(recs) + 1} repeats the record of line 1" in w and "counted once" in w for w in said)


# ---- two hosts under one run id ------------------------------------------------------------------------


def on_host(records, host: str, scale: float = 1.0) -> list:
    out = []
    for r in records:
        metrics = {k: v * scale if isinstance(v, float) and "throughput" in k else v for k, v in (r.metrics or {}).items()}
        out.append(replace(r, environment={**r.environment, "host": host}, metrics=metrics or None))
    return out


@pytest.mark.parametrize("col", READERS)
def test_two_hosts_sharing_run_ids_are_two_runs_never_one_row(tmp_path, col):
    recs = two_by_three()
    alone = write(tmp_path / "a" / "s.jsonl", recs)
    path = write(tmp_path / "both.jsonl", recs + on_host(recs, "other-host", 10.0))
    if col:
        sel = query.select_table(query.table([path]))
        rows, history, said = sel.cell_runs(), sel.history, sel.warnings
    else:
        sel = query.select(query.measurements(query.load([path])))
        rows, history, said = sel.rows, sel.history, sel.warnings
    assert len(rows) == 4 and len(history) == 4
    assert all(row.runs == 2 and len(row.ok_records) == 6 for row in rows)
    assert len({r.environment["host"] for row in rows for r in row.records}) == 1  # one host per row
    assert any("measured on different hosts with the same run numbers" in w for w in said), said
    md = markdown([path], tmp_path, col)
    assert "2 × 3" in md and "2 × 6" not in md and "4 × 3" not in md
    with pytest.raises(BenchInputError, match="cannot pool the runs of .*: run synthetic-0 holds runs of the same "
                                              "number measured on different hosts \\(other-host, synthetic\\)"):
        markdown([path], tmp_path, col, pool=True)
    assert markdown([alone], tmp_path, col, pool=True)  # one host: pools as before


@pytest.mark.parametrize("col", READERS)
def test_runs_of_one_invocation_spread_over_hosts_stay_one_row(tmp_path, col):
    recs = two_by_three()  # an executor that ran run 0 on one node, run 1 on another
    spread = [replace(r, environment={**r.environment, "host": f"node-{r.run}"}) for r in recs]
    path = write(tmp_path / "spread.jsonl", spread)
    if col:
        sel = query.select_table(query.table([path]))
        rows = sel.cell_runs()
    else:
        sel = query.select(query.measurements(query.load([path])))
        rows = sel.rows
    assert len(rows) == 4 and not sel.history and all(row.runs == 2 for row in rows)
    assert not any("different hosts" in w for w in sel.warnings)


def test_a_row_pooled_from_two_environments_shows_its_environment_column():
    from bench.report.data import report_data
    from bench.report.render import to_markdown
    from bench.report.tables import speedup_table

    recs = two_by_three()
    # torchao is not a comparability key: two values pool into one row, whose environment column says so.
    mixed = [replace(r, environment={**r.environment, "torchao": "0.17" if r.run else "0.16"}) for r in recs]
    data = report_data(mixed)
    (warning,) = [w for w in data.warnings if "mixes environments" in w]
    assert "environment note under the tables lists every value" in warning
    md = to_markdown(speedup_table(data.frame))
    assert "| environment |" in md and "torchao 0.16 + torchao 0.17" in md


def test_a_start_time_past_any_calendar_date_reads_as_undated_in_both_readers(tmp_path):
    """Found by the property below (2026-12-06): a context's started_at of 6.78e16 s made time.gmtime raise in the
    columnar reader's run label (OverflowError, or OSError EOVERFLOW) while the plain reader counted the record."""
    from bench.cli import main
    from bench.results.records import RunContext

    base = json.loads(_SAMPLE[0])
    base["context"]["started_at"] = 6.77680361916768e16
    path = tmp_path / "far.jsonl"
    path.write_text(json.dumps(base) + "\n")
    assert len(query.load([path])) == len(query.table([path]).keys) == 1
    assert RunContext("r", "run", started_at=6.77680361916768e16, commit="0123456").label == "undated 0123456"
    # and the report's title, which dates the runs it shows the same way
    assert main(["report", str(path), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.md").read_text().splitlines()[0].endswith("· undated")


# ---- random and torn lines -------------------------------------------------------------------------------

PROPERTY = settings(max_examples=int(os.environ.get("BENCH_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=6)
_SAMPLE = [json.dumps(r.to_json(), sort_keys=True) for r in two_by_three()[:3]]
FIELDS = ["cell_id", "kind", "schema_version", "context", "run", "trial", "status", "metrics", "cell", "environment",
          "samples", "extra", "started_at", "ended_at", "error", "workload", "build"]


@st.composite
def hostile_line(draw) -> str:
    choice = draw(st.integers(0, 4))
    base = json.loads(draw(st.sampled_from(_SAMPLE)))
    if choice == 0:  # a record with one field replaced by any JSON value
        base[draw(st.sampled_from(FIELDS))] = draw(JSON)
        return json.dumps(base)
    if choice == 1:  # a record with a field of its context replaced
        base["context"][draw(st.sampled_from(sorted(base["context"])))] = draw(JSON)
        return json.dumps(base)
    if choice == 2:  # a torn line
        text = json.dumps(base)
        return text[: draw(st.integers(0, len(text) - 1))]
    if choice == 3:  # any JSON value
        return json.dumps(draw(JSON))
    return json.dumps(base)  # a record as stored (or, drawn twice, a repeat)


@PROPERTY
@given(lines=st.lists(hostile_line(), max_size=6), last_newline=st.booleans())
def test_random_and_torn_lines_give_records_warnings_or_a_clear_error(tmp_path_factory, lines, last_newline):
    d = tmp_path_factory.mktemp("hostile")
    path = d / "h.jsonl"
    path.write_text("\n".join(lines) + ("\n" if last_newline and lines else ""))
    counts = {}
    for col in READERS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if col:
                    t = query.table([path])
                    counts[col] = None if t is None else len(t.keys)
                else:
                    counts[col] = len(query.load([path]))
            except BenchInputError:
                counts[col] = "refused"
        assert all(issubclass(w.category, UserWarning) for w in caught), [str(w.message) for w in caught]
    if counts[True] is not None:
        assert counts[True] == counts[False]  # both readers count the same records (or both refuse)
