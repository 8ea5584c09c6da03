"""The hf backend's weights: random ones built on the meta device and filled in one seeded pass, and their digest.

A named model (`qwen-tiny`, `qwen-7b-shape`) has no checkpoint. transformers' `from_config` on
the device initialised every tensor twice (torch's default init in each module, then its own
`_init_weights`): 1.3 s of a 7B-shape worker's start on the H200 (2026-12-02), against 0.08 s
for building on the meta device and filling each tensor once. So (`random_model`):

1. the model is built with its parameters on the meta device (no memory, no init kernels) and
   its buffers computed for real on the CPU (rotary `inv_freq` and the like: values, not weights);
2. each parameter is materialized on the target device (a tied one once: the embedding and the
   lm_head stay one tensor), the buffers moved there;
3. each is filled in one pass, as transformers' `_init_weights` does in spirit: a norm's weight 1,
   every bias 0, every other weight normal(0, config.initializer_range), an embedding's
   padding row 0. Each tensor draws from its own generator seeded by a stable hash of its name
   (`tensor_seed`), so the weights do not depend on load order, and every process of one
   device type gets the same ones (torch's CUDA generator may draw other values on a GPU model
   with another SM count; the digest says when).

`weights_digest` is a cheap fingerprint of what a process loaded, stored in every record
(`build.weights_digest`): sha256 over each parameter and buffer in name order (its name, shape
and dtype, then the bytes of DIGEST_SAMPLES of its elements at evenly spaced flat positions,
first and last included; all of them for a smaller tensor), truncated to 16 hex digits. Two
processes with different weights almost surely differ in it; a change confined between the
sampled positions is not seen. It reads DIGEST_SAMPLES elements a tensor, one copy to the host.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

SEED_SALT = "bench/hf/random-weights/v1:"
DIGEST_SAMPLES = 256


def tensor_seed(name: str) -> int:
    """Return the generator seed of the parameter `name`: 63 bits of sha256 of the salted name (stable everywhere)."""
    digest = hashlib.sha256((SEED_SALT + name).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@contextmanager
def meta_parameters():
    """Within: every parameter a module registers goes to the meta device; buffers stay where they were computed.

    accelerate's `init_empty_weights(include_buffers=False)`, without the dependency: a module's
    buffers (rotary frequencies) are computed values the model needs, its parameters are weights
    we fill ourselves. The allocation a module's __init__ makes for a parameter (torch.empty on the
    CPU, never touched) is freed at once.
    """
    import torch

    original = torch.nn.Module.register_parameter

    def register(module, name, param):
        original(module, name, param)
        if param is not None and param.device.type != "meta" and type(param) is torch.nn.Parameter:
            meta = torch.nn.Parameter(param.data.to("meta"), requires_grad=param.requires_grad)
            meta.__dict__.update(param.__dict__)
            module._parameters[name] = meta  # what register_parameter just stored, replaced in place

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original


def random_model(config, device, **kwargs):
    """Return AutoModelForCausalLM of `config` on `device` with seeded random weights (module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM

    with meta_parameters(), torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    materialize(model, device)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    fill_random(model, getattr(text, "initializer_range", None) or 0.02)
    return model


def materialize(model, device) -> None:
    """Give every meta parameter uninitialised storage on `device` (a tensor shared by two modules stays shared) and
    move the buffers there."""
    import torch

    made: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if param.device.type != "meta":
                continue
            if id(param) not in made:
                made[id(param)] = torch.nn.Parameter(torch.empty(param.shape, dtype=param.dtype, device=device),
                                                     requires_grad=param.requires_grad)
            setattr(module, name, made[id(param)])
    model.to(device)


def is_norm(module) -> bool:
    """Return whether a module is a normalisation (RMSNorm, LayerNorm, ...: its class name says so, as transformers checks)."""
    return "Norm" in type(module).__name__


def fill_random(model, std: float) -> None:
    """Fill each parameter once (tied ones under their first name): norms 1, biases 0, others normal(0, std) from a
    generator seeded by the name (`tensor_seed`); an embedding's padding row 0."""
    import torch

    generators: dict = {}
    seen: set[int] = set()
    with torch.no_grad():
        for module_name, module in model.named_modules():
            for name, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue
                seen.add(id(param))
                full = f"{module_name}.{name}" if module_name else name
                if name.endswith("bias"):
                    param.zero_()
                elif is_norm(module):
                    param.fill_(1.0)
                else:
                    gen = generators.get(param.device)
                    if gen is None:
                        gen = generators[param.device] = torch.Generator(device=param.device)
                    gen.manual_seed(tensor_seed(full))
                    param.normal_(0.0, std, generator=gen)
                    padding = getattr(module, "padding_idx", None)
                    if isinstance(module, torch.nn.Embedding) and padding is not None:
                        param[padding].zero_()


def weights_digest(model, samples: int = DIGEST_SAMPLES) -> str:
    """Return the 16-hex-digit digest of the model's parameters and buffers (module docstring): names, shapes, dtypes and
    `samples` evenly spaced elements of each."""
    import torch

    head = hashlib.sha256()
    picked = []
    tensors = {**dict(model.named_buffers()), **dict(model.named_parameters())}
    for name in sorted(tensors):
        t = tensors[name].detach()
        head.update(f"{name}|{tuple(t.shape)}|{t.dtype}\n".encode())
        flat = t.reshape(-1)
        n = flat.numel()
        if n == 0:
            continue
        k = min(n, samples)
        at = torch.arange(k, device=flat.device) * (n - 1) // max(k - 1, 1)  # integer positions: exact for any n
        picked.append(flat[at].contiguous().view(torch.uint8))
    if picked:
        head.update(torch.cat(picked).cpu().numpy().tobytes())  # one copy to the host
    return head.hexdigest()[:16]
