"""Known-broken configurations for the accuracy tests: a layer with a wrong scale, and planted decode-path faults.

`bench accuracy` and `bench parity --layers` must be shown to catch a wrong model, so the tests
need one whose fault is known: option corrupt_layer = N multiplies layer N's MLP down_proj
weight by SCALE, as a quantized kernel that applied the wrong dequantization scale to one layer
would. (Permuting that weight's rows, the random-weight experiment of issue 30, barely moves a
tiny trained model whose residual stream carries most of the signal; a scale error of this size
doubles its perplexity.) The declaration refuses the option unless BENCH_ALLOW_CORRUPTION=1
(the test suite sets it), so no measured matrix can carry it by mistake.

Option fault plants a fault in the decode path itself, where a cacheless forward pass never looks
(FAULTS): the harness loop's step emits token 0 whatever its logits say (its logits stay right, so
only generation parity can see it), or the static KV cache hands attention its values negated
(teacher-forced decode through the cache sees it; a cacheless forward does not). Both sit inside the
compiled step when the cell compiles. The KV fault patches transformers' static cache layer class
for the whole process: a fault cell has a build key of its own, so its process holds no other model.
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


FAULTS = {
    "decode-token-zero": "the harness decode loop's step returns token 0 for every row (its logits unchanged)",
    "kv-negate": "the static KV cache's update returns its keys and values negated",
    "overflow": "the first decoder layer's MLP output overflows to inf, so every logit is NaN (an fp16 overflow's effect)",
}

OVERFLOW_SCALE = 1e38  # past float32's and bfloat16's range once multiplied with any activation of size > ~3


def overflow(model) -> None:
    """Scale the first decoder layer's mlp.down_proj weight past the float range (the overflow fault)."""
    import torch

    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(OVERFLOW_SCALE)


def negate_static_cache() -> None:
    """Make every static KV cache layer of this process return its keys and values negated (the kv-negate fault)."""
    from transformers import cache_utils

    cls = getattr(cache_utils, "StaticLayer", None) or cache_utils.StaticCache  # transformers < 4.54: the cache itself
    if getattr(cls.update, "planted_fault", False):
        return
    real = cls.update

    def update(self, *args, **kwargs):
        keys, values = real(self, *args, **kwargs)
        return -keys, -values

    update.planted_fault = True
    cls.update = update
