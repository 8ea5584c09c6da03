"""Known-broken configurations for the tests: a layer with a wrong scale, planted decode-path faults, a planted slowdown.

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

Option plant = "<module class>:<N>" plants a slowdown, not a fault, for the attribution tests
(`bench compare` must say which module moved): every module of that class runs its forward N times
per call and returns the last result. The forward of such a module is pure (the declaration refuses
attention, decoder layers and whole models, which write the KV cache), so the outputs, and every
accuracy figure, are unchanged: only time moves, inside that module's range. A compiled step folds
the repeats back into one (Inductor eliminates common subexpressions: an MLP run 3 times compiled to
the 2 matmuls of one, torch 2.13 on the CPU), so the declaration refuses a plant in a compiled cell.
A plant is not part of the built model: it is set per call (`replant`, by each of the loaded model's
passes), so a cell and its planted twin share a build key and so one worker process a round, one cell
after the other: compared round by round (bench.results.paired), the pair then shares the process's
host speed, which on the GPU hosts moved a host-bound step by 19-27 % between processes.
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


def plant(model, module_class: str, repeats: int) -> int:
    """Make every module of class `module_class` run its forward `repeats` times per call (the last result returned);
    return how many modules were planted. ValueError naming the classes present when none matches."""
    targets = [m for m in model.modules() if type(m).__name__ == module_class]
    if not targets:
        classes = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(f"plant={module_class}:{repeats}: the model has no module of class {module_class!r}; "
                         f"classes present: {classes}")
    for module in targets:
        forward = module.forward  # bound; hooks stay on the module, so its range holds all the repeats

        def repeated(*args, _forward=forward, **kwargs):
            out = None
            for _ in range(repeats):
                out = _forward(*args, **kwargs)
            return out

        repeated.planted_over = module.__dict__.get("forward")  # an instance forward of its own, or None
        module.forward = repeated
    return len(targets)


def unplant(model) -> int:
    """Give every planted module of `model` its own forward back; return how many were planted."""
    planted = [m for m in model.modules() if hasattr(m.__dict__.get("forward"), "planted_over")]
    for module in planted:
        before = module.forward.planted_over
        if before is None:
            del module.forward  # the class's forward again
        else:
            module.forward = before
    return len(planted)


def replant(model, current: str, wanted: str) -> str:
    """Make option plant's `wanted` ('none' or '<module class>:<N>') the model's plant, undoing `current` first;
    return `wanted` (the loaded model keeps it as its current plant). A model is planted for the pass about to run,
    so cells that differ only in their plant share one loaded model (and process)."""
    if wanted == current:
        return current
    if current != "none":
        unplant(model)
    if wanted != "none":
        from bench.backends.hf.config import parse_plant

        plant(model, *parse_plant(wanted))
    return wanted
