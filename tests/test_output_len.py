"""The output-length check counts the tokens each row produced; a short row fails the pass and is named."""

import pytest

from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.cells import BuildKey
from bench.spec.matrix import parse_matrix
from bench.workloads.request import Request


def test_a_short_row_of_the_fake_backend_fails_the_pass(tiny_sharegpt, tmp_path):
    m = parse_matrix({
        "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [4],
        "workloads": ["w"], "device": "cpu", "trials": 2, "warmup": 0, "timeout_s": 20, "build_timeout_s": 20,
        "options": {"short_rows": [0, 1]},
        "workload": {"w": {"num_requests": 8, "path": str(tiny_sharegpt), "max_output_len": 16}},
    })
    store = tmp_path / "s.jsonl"
    run_matrix(m, store, show_progress=False)
    by_short = {}
    for rec in ResultStore(store).records():
        by_short.setdefault(rec["cell"]["options"]["short_rows"], []).append(rec)
    assert [r["status"] for r in by_short[0]] == ["ok", "ok"]
    failed, = by_short[1]  # the failure ends the cell: its second trial is skipped
    assert failed["status"] == "error" and failed["metrics"]["output_len_mismatches"] == 1
    first = failed["samples"][0]
    assert "1 request(s) produced a different number of tokens" in failed["error"]
    assert f"{first['id']} gave {first['out']} of {first['out'] + 1}" in failed["error"]


def test_a_late_option_keeps_the_fake_cell_ids():
    base = {"backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1], "workloads": ["w"],
            "device": "cpu", "workload": {"w": {"source": "synthetic", "input_len": 4, "output_len": 4, "num_requests": 2}}}
    from bench import CELL_ID_VERSION
    from bench.spec.cells import short_hash

    plain, = parse_matrix(base).cells
    before = plain.to_dict()
    for late in ("short_rows", "wall_ms", "tensor_parallel_size", "tuning_spread", "diverge_at"):
        del before["options"][late]  # the cell as stored before these options existed
    assert plain.cell_id == short_hash({"schema_version": CELL_ID_VERSION, "cell": before})
    short, = parse_matrix({**base, "options": {"short_rows": 1}}).cells
    assert short.cell_id != plain.cell_id


def test_the_count_comes_from_the_tokens():
    torch = pytest.importorskip("torch")
    from bench.backends.hf.backend import count_produced
    from bench.backends.hf.loop import UNWRITTEN

    tokens = torch.tensor([[5, 6, 7, 8], [5, UNWRITTEN, 7, 8], [5, 6, 7, UNWRITTEN], [5, 6, 7, UNWRITTEN]])
    # row 2 asked for 3 (its 4th position is past its length); row 3 asked for 4 and lacks one
    assert count_produced(tokens, [4, 4, 3, 4]) == [4, 3, 3, 3]
    assert count_produced(tokens[:, :2], [4, 2, 2, 1]) == [2, 1, 2, 1]  # generation stopped after 2 steps
    # rows stopped at an EOS (id 6) and padded afterwards end there, whatever the padding
    assert count_produced(tokens, [4, 4, 3, 1], eos_ids=6) == [2, 3, 2, 1]
    assert count_produced(tokens, [4, 4, 3, 4], eos_ids=[99, 7]) == [3, 2, 3, 3]
    assert count_produced(tokens, [4, 4, 3, 4], eos_ids=[]) == [4, 3, 3, 3]


def load(tmp_path, cache, loop):
    from bench.backends.hf.backend import HFBackend

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu", (("attn_implementation", "sdpa"), ("cache", cache),
                                                      ("compile", "off"), ("decode_loop", loop)))
    backend = HFBackend()
    return backend.load(backend.build(key, tmp_path))


REQUESTS = [Request("a", (5, 17, 230, 9), 3), Request("b", (77, 78, 79), 4)]


def test_a_row_the_harness_loop_did_not_write_is_short(tmp_path, monkeypatch):
    """The clock still ticks for every step, but row b's last token is never written: b is 3 of 4."""
    from bench.backends.hf import loop as hf_loop

    loaded = load(tmp_path, "static", "harness")
    real_decode = hf_loop.DecodeLoop.decode

    def decode_losing_a_token(self, state, steps, on_token=None, **teacher_forcing):
        def keep(k, token):
            if k == steps:  # the last step: row 1 (request b) loses its token
                token = token.clone()
                token[1] = hf_loop.UNWRITTEN
            on_token(k, token)
        real_decode(self, state, steps, keep, **teacher_forcing)

    full = loaded.run(REQUESTS, 2, {})
    assert [t.output_len for t in full.timings] == [3, 4]
    monkeypatch.setattr(hf_loop.DecodeLoop, "decode", decode_losing_a_token)
    short = loaded.run(REQUESTS, 2, {})
    assert [t.output_len for t in short.timings] == [3, 3]
    assert [t.expected_output_len for t in short.timings] == [3, 4]
    assert len(short.timings[1].token_times) == 3
    loaded.close()


def test_a_row_generate_stopped_at_an_eos_is_short(tmp_path):
    """generate pads a row finished at an EOS (when it stops at one): that row counts up to its EOS."""
    loaded = load(tmp_path, "dynamic", "generate")
    seen = []
    real_generate = loaded.model.generate

    def spy(*args, **kwargs):
        out = real_generate(*args, **kwargs)
        seen.append(out[:, kwargs["input_ids"].shape[1]:].clone())
        return out

    loaded.model.generate = spy
    full = loaded.run(REQUESTS, 2, {})
    assert [t.output_len for t in full.timings] == [3, 4]
    # A generation config with an EOS: request a's first token ends it, the rest of its row is padding.
    loaded.model.generation_config.eos_token_id = int(seen[0][0, 0])
    cut = loaded.run(REQUESTS, 2, {})
    assert cut.timings[0].output_len == 1 and cut.timings[0].expected_output_len == 3
    assert (seen[1][0, 1:] == loaded.pad_id).all()  # transformers padded the finished row
    loaded.close()
