"""Option plant: a module's forward run N times, same outputs, only time moves; refused outside the tests."""

import pytest

from bench.backends.hf.config import parse_plant
from bench.errors import BenchInputError
from bench.spec.matrix import parse_matrix


def doc(plant):
    return {"backends": ["hf"], "model": "qwen-tiny", "precisions": ["fp32"], "max_batch_sizes": [1],
            "workloads": ["w"], "device": "cpu", "options": {"plant": plant},
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}}


def test_plant_is_refused_outside_the_tests_and_checked(monkeypatch):
    monkeypatch.delenv("BENCH_ALLOW_CORRUPTION", raising=False)
    with pytest.raises(BenchInputError, match="attribution tests only .*BENCH_ALLOW_CORRUPTION=1"):
        parse_matrix(doc("Qwen2MLP:3"))
    plain = parse_matrix(doc("none")).cells[0]
    del_doc = doc("none")
    del del_doc["options"]
    assert parse_matrix(del_doc).cells[0].cell_id == plain.cell_id  # the default keeps every stored cell's id
    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    planted = parse_matrix(doc("Qwen2MLP:3")).cells[0]
    # a cell of its own, but the same model: a plant is set per pass, so the pair shares one process a round
    assert planted.cell_id != plain.cell_id and planted.build_key() == plain.build_key()
    for bad, why in (("Qwen2MLP", "must be '<module class>:<N>'"), ("Qwen2MLP:1", "N from 2"),
                     ("Qwen2 MLP:2", "module class"), ("Qwen2Attention:2", "writes the KV cache"),
                     ("Qwen2DecoderLayer:2", "writes the KV cache"), ("Qwen2ForCausalLM:2", "whole model")):
        with pytest.raises(BenchInputError, match=why):
            parse_matrix(doc(bad))
    assert parse_plant("Qwen2RMSNorm:2") == ("Qwen2RMSNorm", 2)
    compiled = doc("Qwen2MLP:2")
    compiled.update(device="cuda", precisions=["bf16"])
    compiled["options"].update(cache="static", compile="reduce-overhead")
    with pytest.raises(BenchInputError, match="torch.compile folds back into one"):
        parse_matrix(compiled)


def test_planted_modules_run_n_times_with_the_same_outputs_in_one_range_per_call():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from bench.backends.hf.corrupt import plant
    from bench.execution.nvtx import ModuleRanges, RangeStack
    from bench.models import resolve_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**resolve_model("qwen-tiny").config),
                                             dtype=torch.float32).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        before = model(ids).logits
        calls = []
        for layer in model.model.layers:  # count the real forwards under the planted wrapper
            inner = layer.mlp.forward
            layer.mlp.forward = lambda *a, _f=inner, **k: (calls.append(1), _f(*a, **k))[1]
        assert plant(model, "Qwen2MLP", 3) == 2
        stack = RangeStack(record_function=False)
        with ModuleRanges(model, ["*MLP"], stack=stack, phases=False):
            after = model(ids).logits
    assert torch.equal(before, after)  # only time moves
    assert len(calls) == 2 * 3 and stack.pushed == 2  # each MLP call runs 3 forwards inside its one range
    with pytest.raises(ValueError, match="no module of class 'Qwen9MLP'.*Qwen2MLP"):
        plant(model, "Qwen9MLP", 2)


def test_replant_sets_one_plant_at_a_time_and_gives_the_modules_their_own_forward_back():
    """`replant` moves a model from one plant to the next (the cells of one process, one after the other): the
    previous plant is undone first, a module with an instance forward of its own (a hook's wrapper) gets that one
    back, and 'none' leaves no wrapper behind."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from bench.backends.hf.corrupt import replant
    from bench.models import resolve_model

    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**resolve_model("qwen-tiny").config),
                                             dtype=torch.float32).eval()
    calls = []
    norm = model.model.norm
    own = norm.forward  # an instance forward of its own, as a wrapper would set
    norm.forward = lambda *a, _f=own, **k: (calls.append(1), _f(*a, **k))[1]
    wrapper = norm.forward
    mlps = [layer.mlp for layer in model.model.layers]
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        before = model(ids).logits
        assert replant(model, "none", "Qwen2RMSNorm:3") == "Qwen2RMSNorm:3"
        calls.clear()
        assert torch.equal(model(ids).logits, before) and len(calls) == 3  # the final norm's forward, 3 times
        assert replant(model, "Qwen2RMSNorm:3", "Qwen2MLP:2") == "Qwen2MLP:2"
        assert norm.forward is wrapper and all(m.forward.__name__ == "repeated" for m in mlps)
        assert replant(model, "Qwen2MLP:2", "Qwen2MLP:2") == "Qwen2MLP:2"  # the same plant: nothing redone
        assert all(m.forward.planted_over is None for m in mlps)
        assert replant(model, "Qwen2MLP:2", "none") == "none"
        assert all("forward" not in m.__dict__ for m in mlps) and norm.forward is wrapper
        calls.clear()
        assert torch.equal(model(ids).logits, before) and len(calls) == 1
    with pytest.raises(BenchInputError, match="N from 2"):
        replant(model, "none", "Qwen2MLP:1")


@pytest.mark.slow
def test_the_hf_backend_applies_each_passes_plant_to_one_loaded_model(tmp_path):
    """One loaded model, the plant of each pass's options: planted for a planted cell's pass, unplanted for the next
    cell's, the same tokens either way (a plant is not part of the build: bench.backends.hf.corrupt.replant)."""
    from bench.backends.hf.backend import HFBackend
    from bench.spec.cells import BuildKey
    from bench.workloads.request import Request

    opts = (("attn_implementation", "sdpa"), ("cache", "dynamic"), ("compile", "off"))
    backend = HFBackend()
    reqs = [Request("0", (1, 2, 3, 4), 3)]
    loaded = backend.load(backend.build(BuildKey("hf", "qwen-tiny", "fp32", "cpu", opts), tmp_path))
    norm = loaded.model.model.norm
    out = {}
    for plant in ("none", "Qwen2RMSNorm:4", "none"):
        out.setdefault(plant, []).append(loaded.run(reqs, 1, {"plant": plant}).timings[0].output_ids)
        assert (norm.forward.__name__ == "repeated") == (plant != "none")
    loaded.warmup(reqs, 1, {"plant": "Qwen2MLP:2"}, 0)  # a profile window's warm-up of no pass sets it too
    assert loaded.planted == "Qwen2MLP:2" and norm.forward.__name__ != "repeated"
    assert loaded.greedy(reqs, 1, {}, 3) == {"0": out["none"][0]} and loaded.planted == "none"
    loaded.close()
    assert out["none"][0] is not None and out["none"][0] == out["none"][1] == out["Qwen2RMSNorm:4"][0]
