"""Quantized precisions of the hf backend: torchao's weight-only and fp8 tensors, or gemlite's modules."""

from __future__ import annotations

from bench.backends.hf.config import UNWRAPPED
from bench.errors import BenchInputError


def quantize(model, precision: str, kernels: str = "torchao", unwrap: bool = False) -> bool:
    """Quantize the model's Linear layers in place to `precision` (int8wo, int4wo, fp8); return whether
    torchao's weights were unwrapped.

    kernels: "torchao" (tensor subclasses) or "gemlite" (int8wo: gemlite's Triton modules). unwrap,
    for compiled steps: a compiled function takes subclass inputs apart in Python on every call,
    which outlasts a batch-1 GPU step; unwrapped, the graph's inputs are plain tensors and the
    rebuild is traced into it (docs/guide/hf-backend.md, "Quantized precisions in a compiled step").
    """
    if kernels == "gemlite":
        _gemlite_int8(model)
        return False
    try:
        import torchao.quantization as q
    except ImportError as exc:
        raise BenchInputError(
            f"precision {precision!r} needs torchao: `pip install torchao` (built for your torch); {exc}"
        ) from exc
    if precision == "int8wo":
        try:
            config = q.Int8WeightOnlyConfig(version=2)  # Int8Tensor; version 1 is deprecated
        except TypeError:  # torchao < 0.15
            config = q.Int8WeightOnlyConfig()
    elif precision == "int4wo":
        # tile_packed_to_4d = tinygemm, a kernel inside torch itself; the default ('plain') needs fbgemm-gpu-genai.
        try:
            config = q.Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d")
        except TypeError:  # torchao < 0.14: version-1 config, tinygemm layout by default
            config = q.Int4WeightOnlyConfig(group_size=128)
    elif precision == "fp8":
        config = q.Float8DynamicActivationFloat8WeightConfig()
    else:  # pragma: no cover - validate() keeps other values out
        raise ValueError(precision)
    q.quantize_(model, config)
    # fp8 stays wrapped: dynamo cannot trace the rebuild of torchao's Float8Tensor (docs/guide/hf-backend.md).
    if unwrap and precision in UNWRAPPED:
        from torchao.utils import unwrap_tensor_subclass

        unwrap_tensor_subclass(model)
        return True
    return False


def _gemlite_int8(model) -> None:
    """Replace every nn.Linear of the model with gemlite's int8 weight-only module (A16W8)."""
    import torch

    try:
        from gemlite.helper import (
            A16W8,  # its import reads the GPU's name (per-GPU kernel configs)
        )
    except ImportError as exc:
        raise BenchInputError(f"quant_kernels='gemlite' needs gemlite: `pip install gemlite`; {exc}") from exc
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(parent, name, A16W8(device=str(child.weight.device)).from_linear(child))


def stored_bytes(tensor) -> int:
    """Return the bytes a (possibly torchao-quantized) tensor occupies: its inner tensors' bytes, summed.

    A tensor-parallel weight (a DTensor) counts whole, all ranks' shards: the model's bytes."""
    if type(tensor).__name__ == "DTensor":
        return tensor.numel() * tensor.element_size()  # numel() of a DTensor is the global one
    if hasattr(tensor, "__tensor_flatten__"):  # a tensor subclass (torchao): int data + scales + zero points
        names, _ = tensor.__tensor_flatten__()
        return sum(stored_bytes(getattr(tensor, n)) for n in names)
    return tensor.numel() * tensor.element_size()
