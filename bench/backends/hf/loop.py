"""The harness's own greedy decode loop for the hf backend (option decode_loop = "harness").

`model.generate` syncs the host at every step and spends Python time between steps
(docs/guide/hf-backend.md has the figures). Exact output lengths make the step count known, so this
loop runs the prefill, then `max_new - 1` compiled one-token steps through the same model and
StaticCache without ever syncing until the batch is done: the step costs what its kernels cost.
It is transformers' documented static-cache loop ("decode_one_tokens"); its tokens equal
generate's greedy tokens (tested on CPU).

The same step also serves teacher forcing (bench accuracy): `feed` replaces the token each step
reads with the reference answer's, and `on_logits` receives each step's logits, so the logits an
accuracy figure is computed from come from the very compiled step (and CUDA graphs) that was timed.
"""

from __future__ import annotations

import inspect
import time
from itertools import pairwise

# Prompt tokens past `prefill_len` are fed this many at a time (OOM probes, see `feed_prompt`).
PREFILL_CHUNK = 16
# What DecodeLoop.generate's output holds where no step wrote a token (never a token id).
UNWRITTEN = -1


def forward_names(model) -> tuple[str, bool]:
    """Return (the forward's cache keyword, whether it takes cache_position) for this transformers."""
    params = inspect.signature(type(model).forward).parameters
    # transformers >= 5.2x: `cache` (past_key_values deprecated) and no cache_position.
    return ("cache" if "cache" in params else "past_key_values"), "cache_position" in params


def new_static_cache(model, batch: int, cache_len: int, device):
    """Return an empty StaticCache for (batch, cache_len) in this transformers' signature."""
    from transformers import StaticCache

    if "max_batch_size" in inspect.signature(StaticCache.__init__).parameters:  # transformers 4.x
        dtype = next(model.parameters()).dtype
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=cache_len, device=device, dtype=dtype)
    return StaticCache(config=model.config, max_cache_len=cache_len)


def forward(model, ids, position_ids, cache_position, mask, cache, keep: int = 1):
    """Return the logits of the last `keep` positions of one model forward over `ids` into `cache`."""
    cache_kw, takes_position = forward_names(model)
    kwargs = {cache_kw: cache, "use_cache": True, "logits_to_keep": keep}
    if takes_position:
        kwargs["cache_position"] = cache_position
    return model(input_ids=ids, attention_mask=mask, position_ids=position_ids, **kwargs).logits


def feed_prompt(model, ids, mask, cache, end: int, prefill_len: int | None = None, full_mask=None):
    """Feed prompt positions [0, end) into `cache`; return the last position's logits.

    The first `prefill_len` positions (default: all) go in one forward, as a real prefill; the
    rest PREFILL_CHUNK at a time. An OOM probe's prompt is the real prompt plus the tokens the
    real run would have generated: chunking the tail reaches the final KV length without a
    prefill activation peak the real run never has (docs/guide/oom.md). `full_mask` (static caches)
    covers the whole cache; otherwise the 2D mask is cut to the positions fed so far.
    """
    import torch

    positions = mask.long().cumsum(-1) - 1  # as generate makes them; padding at 1
    positions.masked_fill_(mask == 0, 1)
    bounds = [0, min(prefill_len or end, end)]
    while bounds[-1] < end:
        bounds.append(min(bounds[-1] + PREFILL_CHUNK, end))
    logits = None
    for a, b in pairwise(bounds):
        m = full_mask if full_mask is not None else mask[:, :b]
        cache_position = torch.arange(a, b, device=ids.device)
        logits = forward(model, ids[:, a:b], positions[:, a:b], cache_position, m, cache)
    return logits


def record_mark(marks: list, cuda: bool) -> None:
    """Append when a token became available: a CUDA event (recorded, read after the batch) or perf_counter."""
    if cuda:
        import torch

        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        marks.append(ev)
    else:
        marks.append(time.perf_counter())


def mark_seconds(marks: list) -> list[float]:
    """Return each marker's time in seconds after the first (CUDA events: read once the device has synchronised)."""
    if marks and not isinstance(marks[0], float):
        return [marks[0].elapsed_time(ev) / 1000.0 for ev in marks]
    return [m - marks[0] for m in marks]


def whole_cache_mask(mask, cache_len: int):
    """Return the 2D mask over a whole static cache: prompt padding 0, every later position 1.

    Causality hides the positions not written yet, so every step sees the same shape.
    """
    import torch

    full = torch.ones((mask.shape[0], cache_len), dtype=mask.dtype, device=mask.device)
    full[:, : mask.shape[1]] = mask
    return full


def prefilled_cache(model, ids, mask, prefill_len: int, static_len: int | None):
    """Return a cache holding every prompt position but the last, fed as feed_prompt does.

    model.generate, given this cache, runs the last prompt position and continues as usual.
    static_len: a StaticCache of that length, else a DynamicCache.
    """
    if static_len is None:
        from transformers import DynamicCache

        cache, full = DynamicCache(), None
    else:
        cache, full = new_static_cache(model, ids.shape[0], static_len, ids.device), whole_cache_mask(mask, static_len)
    feed_prompt(model, ids, mask, cache, ids.shape[1] - 1, prefill_len, full)
    return cache


def fed_token(feed, k: int):
    """Return column k of a teacher-forced feed (batch, width) as a new (batch, 1) tensor laid out as a generated
    token is (argmax's strides), made in the caller's grad mode: so the compiled step's guards hold and nothing
    compiles again. `.contiguous()` was not enough at batch 1: a (1, 1) slice counts as contiguous, so it stayed a
    view with the feed's row stride, and a tensor made outside inference mode; each failed a guard of the step
    (H200, 2026-12-06: two recompiles of the 7B step, 17-51 s, where the timed step had compiled once)."""
    import torch

    return feed[:, k : k + 1].clone(memory_format=torch.contiguous_format)


class DecodeLoop:
    """Greedy generation over a StaticCache with a (optionally compiled) one-token step."""

    def __init__(self, model, compile_mode: str, device, token_zero: bool = False):
        import torch

        self.model = model
        self.device = device
        # Tests only (hf option fault = "decode-token-zero", bench/backends/hf/corrupt.py): every step emits
        # token 0, inside the compiled step, while its logits stay right.
        self.token_zero = token_zero
        step = self._step
        if compile_mode != "off":
            # fullgraph: a graph break inside the step would silently run part of it eagerly,
            # which is exactly the overhead this loop exists to remove; fail loudly instead.
            step = torch.compile(step, mode=compile_mode, fullgraph=True, dynamic=False)
        self.step = step
        self.compiled = compile_mode != "off"
        self.caches: dict[tuple[int, int], object] = {}  # (batch, cache_len) -> StaticCache

    def _step(self, token, cache_position, pad, mask, cache):
        """Return (the next token per row (batch, 1), the step's logits (batch, vocab)) after feeding `token`.

        The logits are an output of the same compiled graph generation runs: the lm_head computes
        them either way, so returning them adds no kernel; teacher forcing reads them.
        """
        position_ids = cache_position.view(1, 1) - pad  # left padding shifts each row's positions
        logits = forward(self.model, token, position_ids, cache_position, mask, cache)[:, -1]
        chosen = logits.argmax(-1, keepdim=True)
        return (chosen * 0 if self.token_zero else chosen), logits

    def cache_for(self, batch: int, cache_len: int):
        """Return the StaticCache for (batch, cache_len), reset; one per shape so compiled graphs keep their addresses."""
        key = (batch, cache_len)
        cache = self.caches.get(key)
        if cache is None:
            if any(length != cache_len for _, length in self.caches):
                self.caches.clear()  # a new cell's length: the old caches are garbage
            cache = self.caches[key] = new_static_cache(self.model, batch, cache_len, self.device)
        else:
            cache.reset()
        return cache

    def generate(self, ids, mask, max_new: int, cache_len: int, marks: list, cuda: bool, prefill_len: int | None = None,
                 feed=None, on_logits=None):
        """Return the generated tokens (batch, max_new); append each token's time marker to `marks`.

        ids/mask: (batch, prompt) left-padded, on the device. On CUDA the markers are events
        (recorded, not waited on); on CPU they are perf_counter times. prefill_len: see feed_prompt.
        A position no step wrote holds -1 (UNWRITTEN), so the caller counts what was produced.
        feed (batch, >= max_new - 1) and on_logits(k, logits (batch, vocab)): teacher forcing, see `decode`;
        on_logits(0, ...) gets the prefill's logits, which predict the first token.
        """
        import torch

        batch, prompt = ids.shape
        if prompt + max_new > cache_len:
            raise ValueError(f"prompt {prompt} + output {max_new} exceeds the static cache length {cache_len}")
        out = torch.full((batch, max_new), UNWRITTEN, dtype=torch.long, device=ids.device)
        state = self.prefill(ids, mask, cache_len, prefill_len)

        def keep(k: int, token) -> None:
            out[:, k : k + 1] = token
            record_mark(marks, cuda)

        keep(0, state["token"])
        if on_logits is not None:
            on_logits(0, state["logits"])
        self.decode(state, max_new - 1, keep, feed=feed, on_logits=on_logits)
        return out

    def prefill(self, ids, mask, cache_len: int, prefill_len: int | None = None) -> dict:
        """Feed the prompt into this shape's reset StaticCache; return the decode state.

        The state holds the first generated token (batch, 1), the next cache position, each
        row's left padding, the whole-cache mask and the cache: what `decode` advances.
        """
        import torch

        batch, prompt = ids.shape
        cache = self.cache_for(batch, cache_len)
        full_mask = whole_cache_mask(mask, cache_len)
        logits = feed_prompt(self.model, ids, mask, cache, prompt, prefill_len, full_mask)[:, -1]
        return {"token": logits.argmax(-1, keepdim=True), "logits": logits,
                "position": torch.tensor([prompt], dtype=torch.long, device=ids.device),
                "pad": (prompt - mask.sum(-1, keepdim=True)).to(torch.long), "mask": full_mask, "cache": cache}

    def decode(self, state: dict, steps: int, on_token=None, feed=None, on_logits=None) -> None:
        """Run `steps` one-token steps from `state` (updated in place), never waiting for the GPU.

        on_token(k, token) is called after step k (1-based), with the token still on the device.
        Teacher forcing: with `feed` (batch, >= steps), step k reads feed[:, k - 1] instead of the
        token the previous step chose, and on_logits(k, logits) gets the step's logits (a copy: a
        CUDA graph's output buffer is overwritten by the next replay). Same compiled step either way.
        """
        import torch

        for k in range(1, steps + 1):
            if self.compiled:
                torch.compiler.cudagraph_mark_step_begin()  # the previous step's output is consumed below
            token_in = state["token"] if feed is None else fed_token(feed, k - 1)
            token, logits = self.step(token_in, state["position"], state["pad"], state["mask"], state["cache"])
            state["token"] = token.clone()
            state["position"].add_(1)
            if on_token is not None:
                on_token(k, state["token"])
            if on_logits is not None:
                on_logits(k, logits.clone())
