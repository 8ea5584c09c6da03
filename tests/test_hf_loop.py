"""The harness's own decode loop (hf option decode_loop = "harness"): same tokens as generate, no graph break."""

import pytest

from bench.errors import BenchInputError
from bench.spec.cells import BuildKey
from bench.spec.matrix import parse_matrix


def matrix(**options):
    return parse_matrix({
        "backends": ["hf"], "model": "qwen-tiny", "precisions": ["fp32"], "max_batch_sizes": [2],
        "workloads": ["w"], "device": "cpu", "options": options,
        "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}},
    })


def test_harness_loop_needs_a_static_cache():
    with pytest.raises(BenchInputError, match="decode_loop='harness' runs on a static KV cache"):
        matrix(decode_loop="harness")
    with pytest.raises(BenchInputError, match="valid values are"):
        matrix(cache="static", decode_loop="mine")


def test_a_late_option_at_its_default_keeps_earlier_ids():
    """Cells stored before decode_loop existed must keep their cell_id and build key."""
    from bench import CELL_ID_VERSION
    from bench.spec.cells import short_hash

    plain, = matrix(cache="static").cells
    assert plain.options_dict["decode_loop"] == "generate"
    before = plain.to_dict()
    # The options hf had when the first results were stored:
    before["options"] = {k: before["options"][k] for k in ("attn_implementation", "batching", "cache", "compile")}
    assert plain.cell_id == short_hash({"schema_version": CELL_ID_VERSION, "cell": before})
    assert "decode_loop" not in dict(plain.build_key().options)
    assert plain.options_dict["prefill_len"] == 0
    assert "decode_loop" not in plain.label and "prefill_len" not in plain.label
    from bench.results.records import parse
    from bench.results.rows import (
        record_row,  # report rows of an old and a new record group together
    )

    old = record_row(parse({"schema_version": 1, "cell_id": "a", "cell": before}, legacy_run=("v1", 0.0)))
    new = record_row(parse({"schema_version": 2, "cell_id": "b", "cell": plain.to_dict()}))
    assert old["options"] == new["options"]
    harness, = matrix(cache="static", decode_loop="harness").cells
    assert harness.cell_id != plain.cell_id
    assert harness.build_key().key_hash != plain.build_key().key_hash


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from bench.backends.hf.backend import HFBackend

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu",
                   (("attn_implementation", "sdpa"), ("cache", "static"), ("compile", "off")))
    backend = HFBackend()
    loaded = backend.load(backend.build(key, tmp_path_factory.mktemp("engines")))
    yield loaded
    loaded.close()


def left_padded(loaded, prompts):
    import torch

    n = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), n), loaded.pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), n), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, n - len(p):] = torch.tensor(p)
        mask[i, n - len(p):] = 1
    return ids, mask


@pytest.mark.slow
def test_harness_loop_emits_generates_greedy_tokens(tiny):
    import torch

    from bench.backends.hf.loop import DecodeLoop

    prompts = [[5, 17, 230, 9, 4000, 12], [77, 78], [151000, 3, 3, 8]]  # left padding of 0, 4 and 2
    ids, mask = left_padded(tiny, prompts)
    max_new = 7
    with torch.inference_mode():
        want = tiny.model.generate(input_ids=ids, attention_mask=mask, **{
            **tiny.generate_kwargs(max_new, 128), "min_new_tokens": max_new})[:, ids.shape[1]:]
        loop = DecodeLoop(tiny.model, "off", tiny.device)
        marks: list = []
        got = loop.generate(ids, mask, max_new, 128, marks, cuda=False)
        assert torch.equal(got, want)
        assert len(marks) == max_new and marks == sorted(marks)
        again = loop.generate(ids, mask, max_new, 128, [], cuda=False)  # the reused cache was reset
        assert torch.equal(again, want)
        with pytest.raises(ValueError, match="exceeds the static cache length"):
            loop.generate(ids, mask, 128, 128, [], cuda=False)


@pytest.mark.slow
def test_the_step_compiles_as_one_graph(tiny):
    """fullgraph=True: a graph break in the step (which would run eagerly on the GPU) fails here first."""
    import torch

    from bench.backends.hf.loop import DecodeLoop

    ids, mask = left_padded(tiny, [[5, 6, 7, 8], [9, 10]])
    loop = DecodeLoop(tiny.model, "off", tiny.device)
    with torch.inference_mode():
        want = loop.generate(ids, mask, 4, 128, [], cuda=False)
        torch._dynamo.reset()
        loop.step = torch.compile(loop._step, backend="eager", fullgraph=True, dynamic=False)
        got = loop.generate(ids, mask, 4, 128, [], cuda=False)
    torch._dynamo.reset()
    assert torch.equal(got, want)


@pytest.mark.slow
def test_harness_loop_through_the_backend(tmp_path):
    """run() with decode_loop=harness: exact output lengths per request, one time per token."""
    from bench.backends.hf.backend import HFBackend
    from bench.workloads.request import Request

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu", (("attn_implementation", "sdpa"), ("cache", "static"),
                                                      ("compile", "off"), ("decode_loop", "harness")))
    backend = HFBackend()
    loaded = backend.load(backend.build(key, tmp_path))
    reqs = [Request(str(i), tuple(range(1, 6 + i)), 3 + i) for i in range(3)]
    loaded.warmup(reqs, 2, {"batching": "dataset"}, passes=1)
    out = loaded.run(reqs, 2, {"batching": "dataset"})
    assert [t.output_len for t in out.timings] == [3, 4, 5]
    assert [len(t.token_times) for t in out.timings] == [3, 4, 5]
    assert all(t.token_times == sorted(t.token_times) for t in out.timings)
    loaded.close()


@pytest.mark.slow
@pytest.mark.parametrize("cache,loop", [("dynamic", "generate"), ("static", "generate"), ("static", "harness")])
def test_a_chunked_prompt_gives_the_same_tokens(tmp_path, cache, loop):
    """prefill_len (OOM probes): prefill N tokens, feed the rest 16 at a time, then generate as before."""
    import torch

    from bench.backends.hf.backend import HFBackend
    from bench.workloads.request import Request

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu", (("attn_implementation", "sdpa"), ("cache", cache),
                                                      ("compile", "off"), ("decode_loop", loop)))
    backend = HFBackend()
    loaded = backend.load(backend.build(key, tmp_path))
    torch.manual_seed(1)
    reqs = [Request(str(i), tuple(torch.randint(1, 150000, (n,)).tolist()), 5) for i, n in enumerate((40, 37))]
    seen = []
    real_generate = loaded.model.generate

    def spy(*args, **kwargs):  # the tokens generate returns, to compare whole and chunked prompts
        out = real_generate(*args, **kwargs)
        seen.append(out[:, -5:].clone())
        return out

    if loop == "generate":
        loaded.model.generate = spy
    else:
        real_loop = loaded.loop.generate
        loaded.loop.generate = lambda *a, **k: seen.append(real_loop(*a, **k)) or seen[-1]
    whole = loaded.run(reqs, 2, {"batching": "dataset"})
    chunked = loaded.run(reqs, 2, {"batching": "dataset", "prefill_len": 8})  # 8, then 16, 16 (and 2 or 1)
    assert [t.output_len for t in chunked.timings] == [5, 5] == [t.output_len for t in whole.timings]
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])
    loaded.close()


def test_an_hf_probe_prefills_the_real_prompt_length():
    from bench.oom.search import frontier_rows, probe_cell

    plain, = matrix(cache="static").cells
    probe = probe_cell(plain, 4, 256, 256)
    assert probe.workload.input_len == 508 and probe.workload.output_len == 4
    assert probe.options_dict["prefill_len"] == 256  # the rest of the prompt is fed in chunks
    from tests.support.records import make_record

    rec = make_record(probe.cell_id, cell=probe.to_dict(), kind="oom-probe")
    rec.extra["probe"] = {"max_input_len": 256, "max_output_len": 256}
    row, = frontier_rows([rec])
    assert "prefill_len" not in row["options"]


@pytest.mark.slow
def test_frozen_weights_concatenate_the_projections(tiny):
    """freeze_weights=on: q/k/v become one matmul and gate/up another (Inductor, CPU here), same tokens."""
    import torch
    import torch._inductor.config as inductor
    from torch._dynamo.utils import counters

    from bench.backends.hf import compile as hf_compile
    from bench.backends.hf.loop import DecodeLoop

    ids, mask = left_padded(tiny, [[5, 6, 7, 8], [9, 10]])
    with torch.inference_mode():
        want = DecodeLoop(tiny.model, "off", tiny.device).generate(ids, mask, 4, 32, [], cuda=False)
    extern = {}
    # torch's config.patch, not monkeypatch: pytest 9.2 undoes a monkeypatch of a module
    # attribute it cannot see in __dict__ by deleting it, which hides the setting for good.
    with inductor.patch({"freezing": False, "cpp.enable_concat_linear": True}):  # concat: on by default on GPUs only
        for freeze in (False, True):
            hf_compile._PROCESS = None  # a fresh worker process per setting
            hf_compile.configure_process("test", "off", "default", freeze)
            assert hf_compile.inductor_settings()["freezing"] is freeze
            counters.clear()
            torch._dynamo.reset()
            with torch.inference_mode():
                got = DecodeLoop(tiny.model, "default", tiny.device).generate(ids, mask, 4, 32, [], cuda=False)
            assert torch.equal(got, want)
            extern[freeze] = counters["inductor"]["extern_calls"]  # matmuls (and attention) left to library kernels
    assert inductor.freezing is False  # restored
    hf_compile._PROCESS = None
    torch._dynamo.reset()
    layers = tiny.model.config.num_hidden_layers
    assert extern[False] - extern[True] == 3 * layers  # per layer: 3 projections -> 1, 2 -> 1


def _cacheless_logits(model, prompt, answer):
    """The reference the runtime path must agree with: one forward over prompt + answer[:-1], no cache, no padding."""
    import torch

    ids = torch.tensor([list(prompt) + list(answer[:-1])])
    with torch.inference_mode():
        return model(input_ids=ids, use_cache=False).logits[0, -len(answer):].float()


@pytest.mark.slow
@pytest.mark.parametrize("cache,loop,prefill_len", [("dynamic", "generate", 0), ("static", "generate", 0),
                                                   ("static", "harness", 0), ("static", "harness", 8),
                                                   ("dynamic", "generate", 8)])
def test_teacher_forcing_through_the_cells_own_path(tmp_path, cache, loop, prefill_len):
    """HFLoaded.teacher_forced feeds the answer through the timed path (cache, loop, chunked prefill, padding):
    its logits are the cacheless forward's, position by position, at batch 2 with left padding."""
    import torch

    from bench.backends.hf.backend import HFBackend

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu", (("attn_implementation", "sdpa"), ("cache", cache),
                                                      ("compile", "off"), ("decode_loop", loop)))
    backend = HFBackend()
    loaded = backend.load(backend.build(key, tmp_path))
    torch.manual_seed(3)
    seqs = [(torch.randint(1, 150000, (n,)).tolist(), torch.randint(1, 150000, (a,)).tolist())
            for n, a in ((20, 6), (13, 4), (17, 5))]
    got: dict = {}

    def keep(indices, k, logits):
        assert logits.shape[0] == len(indices)
        for i, row in zip(indices, logits, strict=True):
            got[(i, k)] = row.float().clone()

    loaded.teacher_forced(seqs, 2, {"batching": "dataset", "prefill_len": prefill_len}, keep)
    assert sorted(got) == [(i, k) for i, (_, a) in enumerate(seqs) for k in range(len(a))]
    for i, (p, a) in enumerate(seqs):
        want = _cacheless_logits(loaded.model, p, a)
        for k in range(len(a)):
            torch.testing.assert_close(got[(i, k)], want[k], atol=2e-4, rtol=2e-4)
    loaded.close()


@pytest.mark.slow
def test_teacher_forcing_runs_the_compiled_step_generation_runs(tiny):
    """One compiled step serves generation and the fed tokens: compiled once, called by both (no second compile)."""
    import torch

    from bench.backends.hf.loop import DecodeLoop

    compiled = []

    def counting(gm, example_inputs):
        compiled.append(gm)
        return gm.forward

    ids, mask = left_padded(tiny, [[5, 6, 7, 8], [9, 10]])
    loop = DecodeLoop(tiny.model, "off", tiny.device)
    torch._dynamo.reset()
    calls = []
    inner = torch.compile(loop._step, backend=counting, fullgraph=True, dynamic=False)
    loop.step = lambda *a: calls.append(1) or inner(*a)
    loop.compiled = False  # no CUDA-graph step marks on the CPU
    try:
        with torch.inference_mode():
            generated = loop.generate(ids, mask, 5, 32, [], cuda=False)
            n_generate = len(calls)
            fed, seen = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]]), []
            forced = loop.generate(ids, mask, 5, 32, [], cuda=False, feed=fed, on_logits=lambda k, x: seen.append(k))
    finally:
        torch._dynamo.reset()
    assert n_generate == 4 and len(calls) == 8 and len(compiled) == 1  # 4 steps each, one graph
    assert seen == [0, 1, 2, 3, 4]
    assert torch.equal(forced[:, :1], generated[:, :1])  # the prefill's token does not depend on what is fed
