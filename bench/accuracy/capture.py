"""Logits and greedy tokens of a loaded hf model: what the accuracy session compares.

A *logit source* is a callable (prompt ids, answer ids) -> [len(answer), vocab] logits, the
position before each answer token predicting it (teacher forcing: the model reads prompt +
answer[:-1], one sequence at a time, so no padding enters the numerics). `hf_logits` makes one
from a transformers model; bench.accuracy.trtllm makes one from a TensorRT-LLM LLM.

The noise floor's computations are made from the baseline model itself: its weights computed in
the other float dtype (bf16 <-> fp32) and its attention in the other kernel (sdpa <-> eager).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import contextmanager

from bench.accuracy.figures import TokenParity, position_stats, token_parity

LogitSource = Callable[[list[int], list[int]], "object"]
GEN_BATCH = 16  # prompts per greedy batch (left-padded); the same batches on both sides


def hf_logits(model, device) -> LogitSource:
    """Return the logit source of a transformers causal LM on `device`."""
    import torch

    def source(prompt: list[int], answer: list[int]):
        ids = torch.tensor([list(prompt) + list(answer[:-1])], dtype=torch.long, device=device)
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=False, logits_to_keep=len(answer))
        return out.logits[0, -len(answer):]

    return source


def compare_sources(base: LogitSource, others: dict[str, LogitSource], sequences: list[tuple[list[int], list[int]]]
                    ) -> dict[str, TokenParity]:
    """Return each other source's TokenParity against the base over the same (prompt, answer) sequences, in order."""
    import torch

    chunks: dict[str, list[dict]] = {name: [] for name in others}
    for prompt, answer in sequences:
        base_logits = base(prompt, answer)
        targets = torch.tensor(answer, dtype=torch.long)
        for name, source in others.items():
            chunks[name].append(position_stats(base_logits, source(prompt, answer), targets))
    return {name: token_parity(c) for name, c in chunks.items()}


def base_perplexity(base: LogitSource, sequences) -> TokenParity:
    """Return the base against itself: KL 0 and top-1 1 by definition, and its perplexity on the answers."""
    return compare_sources(base, {"self": base}, sequences)["self"]


def greedy(model, prompts: list[list[int]], new_tokens: int, pad_id: int, device, generate_kwargs: dict | None = None,
           batch: int = GEN_BATCH) -> list[list[int]]:
    """Return the greedy continuation (exactly new_tokens ids) of each prompt, in batches of `batch`, left-padded."""
    import torch

    from bench.backends.hf.backend import left_padded
    from bench.workloads.request import Request

    gen = {"do_sample": False, "num_beams": 1, "pad_token_id": pad_id, **(generate_kwargs or {}),
           "max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    out: list[list[int]] = []
    for i in range(0, len(prompts), batch):
        chunk = [Request(str(j), tuple(p), new_tokens) for j, p in enumerate(prompts[i:i + batch])]
        ids, mask = left_padded(chunk, pad_id, device)
        with torch.inference_mode():
            tokens = model.generate(input_ids=ids, attention_mask=mask, **gen)[:, ids.shape[1]:]
        out.extend(row[:new_tokens] for row in tokens.tolist())
    return out


def kv_cache_bytes(model, tokens: int) -> int:
    """Return the bytes of a transformers model's KV cache for one sequence of `tokens` tokens, in the dtype of its
    weights (bench.models.kv_bytes_per_token, the rule the backends use)."""
    from bench.models import kv_bytes_per_token

    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return kv_bytes_per_token(cfg.to_dict(), next(model.parameters()).element_size()) * tokens


def greedy_batch(model, prompts: list[list[int]], new_tokens: int, wanted: int, free_bytes: int | None) -> int:
    """Return the largest batch <= wanted whose KV cache for the longest prompt takes at most half of `free_bytes`
    (None: no limit known, e.g. on a CPU), and at least 1.

    The baseline's fp32 twin generates beside the baseline itself: on an 80 GB H100 its 16-prompt batches of 2048-token
    prompts (a 35 GB cache beside 46 GB of weights) ran out of memory (2026-12-06). Half the free memory leaves room
    for the activations and the allocator's blocks. With this rule all three sharegpt-2048 sessions finished on the
    same card (docs/measurements/2026-12-06-h100-study-forked-workers.md)."""
    if free_bytes is None or not prompts:
        return max(1, wanted)
    per_sequence = kv_cache_bytes(model, max(len(p) for p in prompts) + new_tokens)
    return max(1, min(wanted, (free_bytes // 2) // max(1, per_sequence)))


@contextmanager
def attention(model, implementation: str):
    """Run the block with the model's attention kernel switched to `implementation`, then switch it back."""
    before = model.config._attn_implementation
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def floor_variants(model, dtype) -> dict[str, tuple[str, object]]:
    """Return {name: (what it is, a model)} of the baseline's noise-floor computations that need a copy of it."""
    import torch

    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    twin = copy.deepcopy(model)
    # Parameters only: buffers such as the rotary inv_freq stay as loaded (a cell loaded in `other` keeps them
    # in float32 too), so the twin differs from the baseline in its weights' and activations' dtype alone.
    for p in twin.parameters():
        p.data = p.data.to(other)
    what = f"the same weights computed in {str(other).removeprefix('torch.')}"
    return {"compute_dtype": (what, twin)}


def noise_floor(model, dtype, device, sequences) -> dict:
    """Return the noise floor of a baseline: TokenParity (as dicts) of computations that should agree with it.

    compute_dtype: its weights computed in the other of bf16 / fp32; attention: sdpa <-> eager.
    """
    import gc

    base = hf_logits(model, device)
    floor: dict = {}
    for name, (what, twin) in floor_variants(model, dtype).items():
        floor[name] = {"what": what, **compare_sources(base, {name: hf_logits(twin, device)}, sequences)[name].to_dict()}
        del twin
        gc.collect()
    import torch

    current = model.config._attn_implementation
    other = "eager" if current != "eager" else "sdpa"
    chunks = []
    for p, a in sequences:  # per sequence: the base with its own kernel, then the same model with the other
        base_logits = base(p, a)
        with attention(model, other):
            chunks.append(position_stats(base_logits, base(p, a), torch.tensor(a)))
    floor["attention"] = {"what": f"attention {current} vs {other}", **token_parity(chunks).to_dict()}
    return floor
