"""Accuracy through the cell's own runtime (bench.accuracy.runtime): the baseline's reference and a cell against it."""

import pytest

from bench.spec.cells import BuildKey


def _load(tmp_path, **options):
    from bench.backends.hf.backend import HFBackend

    opts = {"attn_implementation": "sdpa", "cache": "dynamic", "compile": "off", **options}
    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu", tuple(sorted(opts.items())))
    backend = HFBackend()
    return backend.load(backend.build(key, tmp_path / key.key_hash))


class _Cell:
    """What the runtime functions read of a cell: its options, batch size and workload limits."""

    def __init__(self, options, size=2):
        self.options_dict = {"batching": "dataset", "prefill_len": 0, **options}
        self.max_batch_size = size

        class W:
            max_total_len = 256

        self.workload = W()

    def to_dict(self):
        return {"options": self.options_dict, "max_batch_size": self.max_batch_size}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    import torch

    from bench.accuracy.reference import Reference
    from bench.accuracy.runtime import baseline_reference
    from bench.workloads.request import Request

    tmp = tmp_path_factory.mktemp("ref")
    torch.manual_seed(5)
    reqs = [Request(str(i), tuple(torch.randint(1, 150000, (n,)).tolist()), 6) for i, n in enumerate((12, 9, 15, 7))]
    answers = {r.id: torch.randint(1, 150000, (10,)).tolist() for r in reqs}
    settings = {"answer_tokens": 8, "generate_tokens": 6, "prefix_k": 4}
    base = _load(tmp)
    figures = baseline_reference(base, _Cell({"cache": "dynamic"}, size=1), reqs, answers, settings, reqs, tmp)
    base.close()
    return Reference.open(tmp), figures, reqs, answers, settings


@pytest.mark.slow
def test_the_baselines_reference_and_its_floors(reference):
    ref, figures, reqs, answers, settings = reference
    assert len(ref.sequences) == 4 and [len(a) for _, a in ref.sequences] == [8] * 4
    assert ref.logits(0).shape == (8, 151936)
    assert figures["parity"]["kl_mean"] == 0 and figures["answer_positions"] == 32
    assert set(figures["floor"]) == {"cacheless", "compute_dtype", "attention"}
    assert figures["floor"]["cacheless"]["kl_mean"] < 1e-6  # fp32: the runtime path agrees with a plain forward
    assert figures["generation_floor"]["second_pass"]["identical_prefix_rate"] == 1.0
    # the twin generates in the baseline's own batches (its max_batch_size, 1 here), as its runtime greedy did
    assert figures["generation_floor"]["compute_dtype"]["what"].endswith("(greedy, model.generate, batches of 1)")
    assert figures["determinism"]["differing_tokens"] == 0
    assert sorted(ref.meta["greedy_ids"]) == ["0", "1", "2", "3"]


@pytest.mark.slow
@pytest.mark.parametrize("options,size", [({"cache": "dynamic"}, 2), ({"cache": "static"}, 2),
                                          ({"cache": "static", "decode_loop": "harness"}, 4)])
def test_a_cell_of_the_same_numerics_matches_its_reference(reference, tmp_path, options, size):
    from bench.accuracy.runtime import cell_figures

    ref, _, reqs, answers, settings = reference
    cell = _load(tmp_path, **options)
    f = cell_figures(cell, _Cell(options, size), ref, reqs, settings, reqs, [answers[r.id] for r in reqs])
    cell.close()
    assert f["parity"]["tokens"] == 32 and f["parity"]["kl_mean"] < 1e-6 and f["parity"]["top1"] == 1.0
    assert f["generation"]["identical_prefix_rate"] == 1.0 and f["determinism"]["differing_tokens"] == 0


@pytest.mark.slow
def test_planted_decode_faults_show_in_the_runtime_figures(reference, tmp_path, monkeypatch):
    """decode-token-zero: right logits, wrong tokens (generation parity sees it); kv-negate: wrong logits from the cache."""
    from bench.accuracy.runtime import cell_figures

    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    ref, _, reqs, answers, settings = reference
    zero = {"cache": "static", "decode_loop": "harness", "fault": "decode-token-zero"}
    cell = _load(tmp_path, **zero)
    f = cell_figures(cell, _Cell(zero, 2), ref, reqs, settings, reqs, [answers[r.id] for r in reqs])
    cell.close()
    assert f["parity"]["kl_mean"] < 1e-6  # teacher forcing reads the step's logits, which are right
    assert f["generation"]["identical_prefix"] == 0 and all(g[1:] == [0] * (len(g) - 1) for g in f["greedy"])
    from transformers import cache_utils

    cls = getattr(cache_utils, "StaticLayer", None) or cache_utils.StaticCache
    monkeypatch.setattr(cls, "update", cls.update)  # the fault patches the class for the process: undone at teardown
    negated = {"cache": "static", "fault": "kv-negate"}
    cell = _load(tmp_path, **negated)
    try:
        f = cell_figures(cell, _Cell(negated, 2), ref, reqs, settings, reqs, [answers[r.id] for r in reqs])
    finally:
        cell.close()
    assert getattr(cls.update, "planted_fault", False)
    assert f["parity"]["kl_mean"] > 1e-3 and f["parity"]["top1"] < 1.0


def test_text_rouge_decodes_around_ids_the_tokenizer_lacks():
    """Qwen-7B's 151,936 logits rows exceed what its tokenizer decodes: a random-weight int8wo row emitted 151855 on an
    H100 and its session failed in the text ROUGE (KeyError). Such ids are left out of the text, nothing fails."""
    from types import SimpleNamespace

    from bench.accuracy.session import _decoder

    decode = _decoder(SimpleNamespace(workload=SimpleNamespace(tokenizer="qwen-7b-chat")))
    assert decode is not None
    assert decode([9707, 1879]) == "Hello world"
    assert decode([9707, 151855, 1879, 10**7]) == "Hello world"


def test_the_twins_greedy_batch_fits_its_kv_cache_in_half_the_free_memory():
    """The Qwen-7B shape's fp32 twin on an 80 GB H100 beside the bf16 baseline (2026-12-06): 16 prompts of 2048
    tokens in one batch need a 35 GB cache, which did not fit; the batch shrinks to what fits, and never below 1."""
    import torch
    from transformers import Qwen2Config

    from bench.accuracy.capture import greedy_batch, kv_cache_bytes

    class Twin:
        config = Qwen2Config(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                             intermediate_size=11008, vocab_size=151936)

        def parameters(self):
            return iter([torch.empty(0, dtype=torch.float32)])

    twin = Twin()
    assert kv_cache_bytes(twin, 1) == 2 * 32 * 4096 * 4  # keys and values, 32 layers, 4096 wide, fp32
    prompts = [[1] * 2048] * 16
    per_sequence = kv_cache_bytes(twin, 2048 + 24)
    assert 16 * per_sequence > 34e9
    free = 80 * 2**30 - 46 * 2**30  # an H100's memory less the two models' weights
    batch = greedy_batch(twin, prompts, 24, 16, free)
    assert batch == (free // 2) // per_sequence and 1 < batch < 16
    assert greedy_batch(twin, prompts, 24, 4, free) == 4  # the baseline's own batch size where it fits
    assert greedy_batch(twin, prompts, 24, 16, None) == 16  # no free-memory figure (a CPU): the asked batch
    assert greedy_batch(twin, prompts, 24, 16, 1) == 1
