import pytest

from bench.errors import BenchInputError
from bench.spec.cells import WorkloadSpec
from bench.workloads.tokenizers import load_tokenizer
from bench.workloads.workload import Workload, batches, build_workload, cached_workload


def test_qwen_tokenizer_is_qwen_7b_chat():
    tok = load_tokenizer("qwen-7b-chat")
    assert tok.encode("Hello world") == [9707, 1879]
    ids = tok.chat("hi")
    nl = tok.encode("\n")
    # <|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
    want = ([151644] + tok.encode("system") + nl + tok.encode("You are a helpful assistant.") + [151645] + nl
            + [151644] + tok.encode("user") + nl + tok.encode("hi") + [151645] + nl + [151644] + tok.encode("assistant") + nl)
    assert ids == want


def test_qwen_tokenizer_normalizes_text_to_nfc_as_qwen_7b_chat_does():
    # QWenTokenizer.tokenize runs unicodedata.normalize("NFC", text) before its BPE: a decomposed
    # "ö" (o + U+0308) must get the ids of the composed one, in raw and in chat prompts.
    tok = load_tokenizer("qwen-7b-chat")
    composed, decomposed = "Schr\u00f6dinger's cat", "Schro\u0308dinger's cat"
    assert decomposed.encode() != composed.encode()  # different bytes, so a plain BPE gives different ids
    assert tok.encode(decomposed) == tok.encode(composed)
    assert tok.decode(tok.encode(decomposed)) == composed
    assert tok.chat(decomposed) == tok.chat(composed)


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
    from bench.workloads.request import Request

    reqs = [Request(str(i), (1,) * (5 - i), 2) for i in range(5)]
    assert [len(b) for b in batches(reqs, 2)] == [2, 2, 1]
    assert [r.id for r in batches(reqs, 5, "sorted")[0]] == ["4", "3", "2", "1", "0"]


# --- filters, oversampling, synthetic sources, files, interchange, tokenizers, CLI ----------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench.workloads.lengths import length_stats  # noqa: E402
from bench.workloads.request import Request  # noqa: E402
from bench.workloads.trtllm_dataset import read_trtllm_jsonl, to_trtllm_jsonl  # noqa: E402
from bench.workloads.workload import DROP_RULES, drop_rule  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def vllm_is_valid_sequence(prompt_len, output_len, min_len, max_prompt_len, max_total_len, skip_min_output_len_check):
    # vLLM benchmarks/datasets.py is_valid_sequence, transcribed.
    prompt_too_short = prompt_len < min_len
    output_too_short = (not skip_min_output_len_check) and (output_len < min_len)
    prompt_too_long = prompt_len > max_prompt_len
    combined_too_long = (prompt_len + output_len) > max_total_len
    return not (prompt_too_short or output_too_short or prompt_too_long or combined_too_long)


@FAST
@given(st.integers(0, 3000), st.integers(0, 3000), st.integers(1, 8), st.integers(1, 2048), st.integers(1, 4096), st.booleans())
def test_drop_rule_agrees_with_vllm(p, o, min_len, max_in, max_total, check_out):
    spec = WorkloadSpec("w", min_len=min_len, max_input_len=max_in, max_total_len=max_total)
    rule = drop_rule(p, o, spec, check_output_min=check_out)
    assert (rule is None) == vllm_is_valid_sequence(p, o, min_len, max_in, max_total, not check_out)
    assert rule is None or rule in DROP_RULES


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.text("ab cd\n.", max_size=60), st.text("xy z", max_size=60)), min_size=1, max_size=25),
    st.integers(1, 30), st.integers(0, 3), st.integers(2, 40), st.integers(4, 80), st.booleans(),
)
def test_built_requests_obey_rules_and_counts_add_up(pairs, n, seed, max_in, max_total, oversample):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.json"
        recs = [{"id": f"r{i}", "conversations": [{"value": a}, {"value": b}]} for i, (a, b) in enumerate(pairs)]
        path.write_text(json.dumps(recs))
        spec = WorkloadSpec("w", path=str(path), num_requests=n, seed=seed, min_len=2, max_input_len=max_in,
                            max_total_len=max_total, oversample=oversample)
        try:
            wl = build_workload(spec)
        except BenchInputError as exc:
            assert "zero requests" in str(exc) or ("only" in str(exc) and not oversample)
            return
    assert len(wl.requests) == n and len({r.id for r in wl.requests}) == n
    for r in wl.requests:
        assert drop_rule(r.input_len, r.output_len, spec) is None
    used = n - wl.source["oversampled"]
    assert used + sum(wl.dropped[k] for k in DROP_RULES) + wl.dropped["not_examined"] == len(pairs)


def test_oversample_only_when_asked(tiny_sharegpt):
    with pytest.raises(BenchInputError, match="oversample = true"):
        build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=60))
    wl = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=60, oversample=True))
    assert len(wl.requests) == 60 and wl.source["oversampled"] == 20
    assert len({r.id for r in wl.requests}) == 60 and sum("~" in r.id for r in wl.requests) == 20


def test_output_length_fixed_or_capped(tiny_sharegpt):
    fixed = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=10, output_len=7))
    assert {r.output_len for r in fixed.requests} == {7}
    capped = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=10, max_output_len=9))
    assert max(r.output_len for r in capped.requests) == 9


def test_chat_format_wraps_prompt_and_min_len_counts_the_content(tiny_sharegpt):
    raw = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5))
    chat = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5, prompt_format="chat"))
    assert [r.id for r in raw.requests] == [r.id for r in chat.requests]
    for a, b in zip(raw.requests, chat.requests, strict=True):
        assert b.prompt_ids[0] == 151644 and b.input_len > a.input_len
        assert tuple(a.prompt_ids) == b.prompt_ids[-len(a.prompt_ids) - 5 : -5]  # query before <|im_end|>\n<|im_start|>assistant\n


def test_empty_prompt_is_dropped_even_in_chat_format(tmp_path):
    p = tmp_path / "e.json"
    p.write_text(json.dumps([{"id": "e", "conversations": [{"value": ""}, {"value": "a long enough answer here"}]},
                             {"id": "ok", "conversations": [{"value": "a long enough question"}, {"value": "a long enough answer"}]}]))
    wl = build_workload(WorkloadSpec("w", path=str(p), num_requests=1, prompt_format="chat", seed=1))
    assert [r.id for r in wl.requests] == ["ok"]


@pytest.mark.parametrize("dist,extra", [
    ("fixed", {"input_len": 16, "output_len": 8}),
    ("uniform", {"input_min": 5, "input_max": 40, "output_min": 3, "output_max": 9}),
    ("normal", {"input_len": 30, "input_stdev": 10, "output_len": 12, "output_stdev": 20}),
])
def test_synthetic_lengths_and_ids(dist, extra):
    spec = WorkloadSpec.from_dict("s", {"source": "synthetic", "length_dist": dist, "num_requests": 300, "seed": 5, **extra})
    wl = build_workload(spec)
    assert wl.to_json() == build_workload(spec).to_json()
    ins, outs = [r.input_len for r in wl.requests], [r.output_len for r in wl.requests]
    assert all(0 <= t < 151643 for r in wl.requests for t in r.prompt_ids)  # ordinary ids only
    assert min(outs) >= 1 and len(wl.requests) == 300
    if dist == "fixed":
        assert set(ins) == {16} and set(outs) == {8}
    elif dist == "uniform":
        assert (min(ins), max(ins)) == (5, 40) and (min(outs), max(outs)) == (3, 9)
    else:
        assert abs(sum(ins) / len(ins) - 30.5) < 2  # ceil adds 0.5 on average
        assert min(outs) == 1  # stdev 20 around 12: clipped to 1 as trtllm's max(1, ceil(x))


def test_synthetic_spec_errors():
    with pytest.raises(BenchInputError, match="input_min <= input_max"):
        WorkloadSpec.from_dict("s", {"source": "synthetic", "length_dist": "uniform", "input_min": 9, "input_max": 3})
    with pytest.raises(BenchInputError, match="exceeds max_input_len"):
        WorkloadSpec.from_dict("s", {"source": "synthetic", "input_len": 2000, "output_len": 10})
    with pytest.raises(BenchInputError, match="length_dist"):
        WorkloadSpec.from_dict("s", {"source": "synthetic", "length_dist": "zipf", "input_len": 2, "output_len": 2})


def test_golden_hashes_pin_bytes_across_machines(tiny_sharegpt):
    # If these change on another machine, workload files are not portable: investigate first.
    syn = build_workload(WorkloadSpec.from_dict("g", {"source": "synthetic", "length_dist": "normal", "num_requests": 8,
                                                      "input_len": 20, "input_stdev": 5, "output_len": 6, "output_stdev": 2,
                                                      "request_rate": 2.5, "burstiness": 0.5}))
    share = build_workload(WorkloadSpec("g", path=str(tiny_sharegpt), num_requests=6, seed=2, request_rate=3.0))
    assert (syn.content_hash, share.content_hash) == (GOLDEN_SYN, GOLDEN_SHARE)


# Arrival times are vLLM's schedule since issue 20 (numpy's legacy gamma generator): both hashes changed then.
GOLDEN_SYN, GOLDEN_SHARE = "073c55a82c3a5611", "ec84ba1b2a4b730c"


def test_same_spec_gives_byte_identical_file_in_fresh_processes(tiny_sharegpt, tmp_path):
    outs = []
    for hashseed in ("1", "2"):
        out = tmp_path / f"w{hashseed}.json"
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "bench", "workload", "build", "--set", f"path={tiny_sharegpt}",
                        "--set", "num_requests=8", "--set", "request_rate=2", "--out", str(out)],
                       check=True, env=env, capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert b"e-" not in outs[0] and b"Infinity" not in outs[0] and b"NaN" not in outs[0]


def test_frozen_file_is_a_matrix_source(tiny_sharegpt, tmp_path):
    wl = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=6, request_rate=2.0))
    f = tmp_path / "frozen.json"
    f.write_text(wl.to_json())
    again = build_workload(WorkloadSpec.from_dict("w", {"source": "file", "path": str(f), "num_requests": 6}))
    assert again.content_hash == wl.content_hash and again.source["format"] == "bench"
    assert again.source["origin"]["content_hash"] == wl.content_hash
    with pytest.raises(BenchInputError, match="holds 6 requests"):
        build_workload(WorkloadSpec.from_dict("w", {"source": "file", "path": str(f), "num_requests": 7}))
    with pytest.raises(BenchInputError, match="max_input_len"):
        build_workload(WorkloadSpec.from_dict("w", {"source": "file", "path": str(f), "num_requests": 6, "max_input_len": 5}))
    with pytest.raises(BenchInputError, match="needs `path`"):
        WorkloadSpec.from_dict("w", {"source": "file"})


def test_trtllm_jsonl_round_trip_and_prompt_lines(tiny_sharegpt, tmp_path):
    wl = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5))
    text = to_trtllm_jsonl(wl)
    first = json.loads(text.splitlines()[0])
    assert set(first) == {"task_id", "input_ids", "output_tokens"} and first["task_id"] == 0
    p = tmp_path / "d.jsonl"
    p.write_text(text + '{"task_id": 5, "prompt": "Hello world", "output_tokens": 3}\n')
    back = build_workload(WorkloadSpec.from_dict("t", {"source": "file", "path": str(p), "num_requests": 6}))
    assert [r.prompt_ids for r in back.requests[:5]] == [r.prompt_ids for r in wl.requests]
    assert [r.output_len for r in back.requests[:5]] == [r.output_len for r in wl.requests]
    assert back.requests[5].prompt_ids == (9707, 1879) and back.source["format"] == "trtllm-jsonl"


@pytest.mark.parametrize("line,msg", [
    ("not json", "not JSON"),
    ('{"task_id": 0, "output_tokens": 3}', "needs input_ids"),
    ('{"task_id": 0, "input_ids": [1, -2], "output_tokens": 3}', "token ids"),
    ('{"task_id": 0, "input_ids": [1], "output_tokens": 0}', "output_tokens"),
])
def test_trtllm_jsonl_bad_lines(line, msg):
    with pytest.raises(BenchInputError, match=msg):
        read_trtllm_jsonl(line, load_tokenizer("qwen-7b-chat"))


def test_arrivals_in_built_workload(tiny_sharegpt):
    wl = build_workload(WorkloadSpec.from_dict("w", {"path": str(tiny_sharegpt), "num_requests": 10, "request_rate": 5,
                                                     "max_concurrency": 4}))
    times = [r.arrival_s for r in wl.requests]
    assert times == sorted(times) and times[-1] == pytest.approx(2.0, abs=1e-6)
    assert wl.summary()["max_concurrency"] == 4
    inf = WorkloadSpec.from_dict("w", {"path": str(tiny_sharegpt), "request_rate": "inf"})
    assert inf.request_rate is None


def test_tokenizer_errors(tmp_path):
    with pytest.raises(BenchInputError, match="cannot be found"):
        load_tokenizer("no-such-tokenizer")
    with pytest.raises(BenchInputError, match="cannot be found"):
        WorkloadSpec.from_dict("w", {"tokenizer": str(tmp_path / "missing")})
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchInputError, match="cannot load a tokenizer"):
        load_tokenizer(str(tmp_path / "empty"))


@pytest.fixture
def tiny_tokenizer_dir(tmp_path) -> Path:
    """A local model directory holding a tiny WordLevel tokenizer (no network)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "<s>", "</s>", "question", "number", "tell", "me", "about", "the", "weather", "here", "is", "a",
             "long", "answer", "it", ":", "."] + [str(i) for i in range(10)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    fast = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")
    d = tmp_path / "tiny-model"
    fast.save_pretrained(str(d))
    return d


def test_local_directory_tokenizer(tiny_tokenizer_dir, tiny_sharegpt):
    tok = load_tokenizer(str(tiny_tokenizer_dir))
    assert tok.identity.startswith("auto:tiny-model@")
    assert tok.encode("tell me about the weather") == [5, 6, 7, 8, 9]
    assert not {0, 1, 2} & set(tok.ordinary_ids) and 5 in tok.ordinary_ids
    wl = build_workload(WorkloadSpec("w", path=str(tiny_sharegpt), num_requests=5, tokenizer=str(tiny_tokenizer_dir)))
    assert wl.tokenizer == tok.identity and all(max(r.prompt_ids) < tok.vocab_size for r in wl.requests)
    syn = build_workload(WorkloadSpec("s", source="synthetic", input_len=50, output_len=4, tokenizer=str(tiny_tokenizer_dir)))
    assert {t for r in syn.requests for t in r.prompt_ids} <= set(tok.ordinary_ids)


def test_length_stats():
    reqs = [Request(str(i), (1,) * n, o) for i, (n, o) in enumerate([(4, 10), (10, 1), (7, 3), (100, 5), (9, 9)])]
    stats = length_stats(reqs)
    # p90 of 4, 7, 9, 10, 100: rank 0.9 * 4 = 3.6, so 10 + 0.6 * (100 - 10) = 64 (linear, numpy's default)
    assert stats["input"] == {"min": 4, "mean": 26.0, "p50": 9, "p90": pytest.approx(64.0), "max": 100}


def test_cli_build_show_export(tiny_sharegpt, tmp_path, capsys):
    from bench.cli import main

    out = tmp_path / "w.json"
    assert main(["workload", "build", "--set", f"path={tiny_sharegpt}", "--set", "num_requests=7", "--out", str(out)]) == 0
    assert main(["workload", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "7 requests" in text and "dropped by rule" in text and "p90" in text
    assert main(["workload", "export", str(out), "--out", str(tmp_path / "d.jsonl")]) == 0
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 7
    assert main(["workload", "show", str(tmp_path / "d.jsonl")]) == 0
    assert main(["workload", "show", str(tmp_path / "missing.json")]) == 2
    assert main(["workload", "build", "--set", "bogus=1"]) == 2
