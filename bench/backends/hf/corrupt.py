"""A known-broken configuration for the accuracy tests: one decoder layer dequantized with a wrong scale.

`bench accuracy` and `bench parity --layers` must be shown to catch a wrong model, so the tests
need one whose fault is known: option corrupt_layer = N multiplies layer N's MLP down_proj
weight by SCALE, as a quantized kernel that applied the wrong dequantization scale to one layer
would. (Permuting that weight's rows, the random-weight experiment of issue 30, barely moves a
tiny trained model whose residual stream carries most of the signal; a scale error of this size
doubles its perplexity.) The declaration refuses the option unless BENCH_ALLOW_CORRUPTION=1
(the test suite sets it), so no measured matrix can carry it by mistake.
"""

from __future__ import annotations

SCALE = 16.0


def corrupt_layer(model, layer: int) -> None:
    """Multiply decoder layer `layer`'s mlp.down_proj weight by SCALE in place (the wrong-scale fault)."""
    import torch

    layers = model.model.layers
    if not 0 <= layer < len(layers):
        raise ValueError(f"corrupt_layer={layer}: the model has {len(layers)} decoder layers")
    with torch.no_grad():
        layers[layer].mlp.down_proj.weight.mul_(SCALE)
