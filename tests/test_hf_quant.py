"""Quantized hf precisions: which kernels run them (quant_kernels) and the weights a compiled step takes."""

import pytest

from bench.backends.hf import config as hf_config
from bench.backends.hf import quantize as hf_quantize
from bench.errors import BenchInputError
from tests.test_hf_options import gpu, matrix  # noqa: F401  (gpu: the H100 stand-in fixture)


@pytest.fixture
def installed(monkeypatch, gpu):  # noqa: F811
    """On the H100 stand-in, pretend exactly these optional packages are installed (find_spec sees them)."""
    real = hf_config.util.find_spec

    def set_installed(*names):
        optional = {"torchao", "gemlite"}
        monkeypatch.setattr(hf_config.util, "find_spec", lambda name, *a: (object() if name in names else None)
                            if name in optional else real(name, *a))
    set_installed("torchao", "gemlite")
    return set_installed


def test_gemlite_runs_int8_weight_only_only(installed):
    assert matrix("int8wo", quant_kernels="gemlite").cells
    for precision in ("bf16", "int4wo", "fp8"):
        with pytest.raises(BenchInputError, match=rf"quant_kernels='gemlite' runs int8wo only, not precision '{precision}'"):
            matrix(precision, quant_kernels="gemlite")
    with pytest.raises(BenchInputError, match="valid values are"):
        matrix("int8wo", quant_kernels="marlin")


def test_gemlite_names_its_install_and_does_not_need_torchao(installed):
    installed("torchao")
    with pytest.raises(BenchInputError, match="pip install gemlite"):
        matrix("int8wo", quant_kernels="gemlite")
    installed("gemlite")
    assert matrix("int8wo", quant_kernels="gemlite").cells  # gemlite's own modules: torchao not imported
    with pytest.raises(BenchInputError, match="pip install torchao"):
        matrix("int8wo")


def test_quant_kernels_is_a_late_build_option(installed):
    plain, = matrix("int8wo").cells
    assert "quant_kernels" not in dict(plain.build_key().options)  # earlier int8wo results keep their ids
    assert "quant_kernels" not in plain.label
    gem, = matrix("int8wo", quant_kernels="gemlite").cells
    assert gem.build_key().key_hash != plain.build_key().key_hash and gem.cell_id != plain.cell_id


@pytest.fixture
def torchao_settings():
    """torchao's quantize_ sets process-wide Inductor settings; give them back afterwards."""
    pytest.importorskip("torchao")
    import torch
    import torch._inductor.config as inductor

    keys = ("coordinate_descent_tuning", "coordinate_descent_check_all_directions", "force_fuse_int_mm_with_mul",
            "fx_graph_cache", "triton.unique_kernel_names")
    precision = torch.get_float32_matmul_precision()
    with inductor.patch({k: inductor.get_config_copy()[k] for k in keys}):
        yield
    torch.set_float32_matmul_precision(precision)


def tiny_model():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from bench.models import QWEN_TINY

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(**QWEN_TINY), dtype=torch.bfloat16).eval()


def test_unwrapped_int8_weights_are_plain_tensors_with_the_same_outputs(torchao_settings):
    """unwrap: the same int8 weights and scales, held as plain tensors; outputs and stored bytes unchanged."""
    import torch

    wrapped, plain = tiny_model(), tiny_model()
    assert hf_quantize.quantize(wrapped, "int8wo") is False
    assert hf_quantize.quantize(plain, "int8wo", unwrap=True) is True
    subclasses = {type(p).__name__ for p in wrapped.parameters() if type(p) not in (torch.Tensor, torch.nn.Parameter)}
    assert subclasses == {"Int8Tensor"}  # torchao's tensor subclass, one per Linear weight
    assert all(type(p) in (torch.Tensor, torch.nn.Parameter) for p in plain.parameters())
    assert {p.dtype for p in plain.parameters()} >= {torch.int8}
    assert sum(map(hf_quantize.stored_bytes, plain.parameters())) == sum(map(hf_quantize.stored_bytes, wrapped.parameters()))
    ids = torch.tensor([[5, 17, 230, 9, 4000, 12]])
    with torch.inference_mode():
        assert torch.equal(plain(input_ids=ids).logits, wrapped(input_ids=ids).logits)


def test_a_compiled_step_takes_plain_weights(torchao_settings):
    """The compiled step's graph inputs: subclass weights when wrapped (unwrapped per call), plain ones after unwrap."""
    import torch

    from bench.backends.hf.loop import DecodeLoop

    ids, mask = torch.tensor([[5, 6, 7, 8]]), torch.ones(1, 4, dtype=torch.long)
    seen: dict = {}

    def recording_backend(name):
        def backend(gm, example_inputs):
            seen[name] = {type(t).__name__ for t in example_inputs if isinstance(t, torch.Tensor)}
            return gm.forward
        return backend

    tokens = {}
    for name, unwrap in (("wrapped", False), ("plain", True)):
        model = tiny_model()
        hf_quantize.quantize(model, "int8wo", unwrap=unwrap)
        loop = DecodeLoop(model, "off", torch.device("cpu"))
        with torch.inference_mode():
            want = loop.generate(ids, mask, 4, 32, [], cuda=False)
            torch._dynamo.reset()
            loop.step = torch.compile(loop._step, backend=recording_backend(name), fullgraph=True, dynamic=False)
            tokens[name] = loop.generate(ids, mask, 4, 32, [], cuda=False)
        torch._dynamo.reset()
        assert torch.equal(tokens[name], want)
    assert "Int8Tensor" in seen["wrapped"]
    assert seen["plain"] <= {"Tensor", "Parameter"}  # the subclass is rebuilt inside the graph
    assert torch.equal(tokens["wrapped"], tokens["plain"])
