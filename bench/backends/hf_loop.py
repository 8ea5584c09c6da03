"""The harness's own greedy decode loop for the hf backend (option decode_loop = "harness").

transformers' `model.generate` synchronises the host with the GPU at every step (it asks
whether all rows are finished) and then spends about 2 ms of Python per step on logits
processors, stopping criteria and input preparation (measured on the H200: a compiled
Qwen-7B-shaped step's kernels take 4.84 ms, generate's step 6.84 ms; docs/gpu-results.md).
Our requests have exact output lengths and greedy decoding, so the number of steps is known
in advance and no step needs the host to look at a token: this loop runs the prefill, then
`max_new - 1` one-token steps through the same transformers model forward and StaticCache,
with the step compiled as one function (torch.compile with the cell's mode; CUDA graphs for
reduce-overhead / max-autotune), and never synchronises until the batch is done. The host
therefore runs ahead of the GPU and the step costs what its kernels cost.

This is the loop transformers' own docs show for static cache + torch.compile
("decode_one_tokens"), not a different model: the tokens equal model.generate's greedy
tokens (tested on CPU). Timing: a CUDA event per token, read once after the batch.
"""

from __future__ import annotations

import inspect
import time


class DecodeLoop:
    """Greedy generation over a StaticCache with a (optionally compiled) one-token step."""

    def __init__(self, model, compile_mode: str, device):
        import torch

        self.model = model
        self.device = device
        params = inspect.signature(type(model).forward).parameters
        # transformers >= 5.2x: `cache` (past_key_values deprecated) and no cache_position.
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        self.pass_cache_position = "cache_position" in params
        step = self._step
        if compile_mode != "off":
            # fullgraph: a graph break inside the step would silently run part of it eagerly,
            # which is exactly the overhead this loop exists to remove; fail loudly instead.
            step = torch.compile(step, mode=compile_mode, fullgraph=True, dynamic=False)
        self.step = step
        self.compiled = compile_mode != "off"
        self.caches: dict[tuple[int, int], object] = {}  # (batch, cache_len) -> StaticCache

    def _forward(self, ids, position_ids, cache_position, mask, cache, keep: int):
        kwargs = {self.cache_kw: cache, "use_cache": True, "logits_to_keep": keep}
        if self.pass_cache_position:
            kwargs["cache_position"] = cache_position
        return self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids, **kwargs).logits

    def _step(self, token, cache_position, pad, mask, cache):
        """Return the next token per row (batch, 1) after feeding `token` at `cache_position`."""
        position_ids = cache_position.view(1, 1) - pad  # left padding shifts each row's positions
        logits = self._forward(token, position_ids, cache_position, mask, cache, 1)
        return logits[:, -1].argmax(-1, keepdim=True)

    def cache_for(self, batch: int, cache_len: int):
        """Return the StaticCache for (batch, cache_len), reset; one per shape so compiled graphs keep their addresses."""
        from transformers import StaticCache

        key = (batch, cache_len)
        cache = self.caches.get(key)
        if cache is None:
            if any(length != cache_len for _, length in self.caches):
                self.caches.clear()  # a new cell's length: the old caches are garbage
            config = self.model.config
            if "max_batch_size" in inspect.signature(StaticCache.__init__).parameters:  # transformers 4.x
                dtype = next(self.model.parameters()).dtype
                cache = StaticCache(config=config, max_batch_size=batch, max_cache_len=cache_len,
                                    device=self.device, dtype=dtype)
            else:
                cache = StaticCache(config=config, max_cache_len=cache_len)
            self.caches[key] = cache
        else:
            cache.reset()
        return cache

    def generate(self, ids, mask, max_new: int, cache_len: int, marks: list, cuda: bool):
        """Return the generated tokens (batch, max_new); append each token's time marker to `marks`.

        ids/mask: (batch, prompt) left-padded, on the device. On CUDA the markers are events
        (recorded, not waited on); on CPU they are perf_counter times.
        """
        import torch

        batch, prompt = ids.shape
        if prompt + max_new > cache_len:
            raise ValueError(f"prompt {prompt} + output {max_new} exceeds the static cache length {cache_len}")
        cache = self.cache_for(batch, cache_len)
        # The mask covers the whole cache: prompt padding is 0, every later position 1 (causality
        # hides the positions not written yet), so every step sees the same shape.
        full_mask = torch.ones((batch, cache_len), dtype=mask.dtype, device=ids.device)
        full_mask[:, :prompt] = mask
        pad = (prompt - mask.sum(-1, keepdim=True)).to(torch.long)
        # Prefill: positions as generate makes them (cumsum of the mask; padding at 1).
        position_ids = mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(mask == 0, 1)
        out = torch.empty((batch, max_new), dtype=torch.long, device=ids.device)

        def mark():
            if cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                marks.append(ev)
            else:
                marks.append(time.perf_counter())

        cache_position = torch.arange(prompt, device=ids.device)
        logits = self._forward(ids, position_ids, cache_position, full_mask, cache, 1)
        token = logits[:, -1].argmax(-1, keepdim=True)
        out[:, :1] = token
        mark()
        position = torch.tensor([prompt], dtype=torch.long, device=ids.device)
        for k in range(1, max_new):
            if self.compiled:
                torch.compiler.cudagraph_mark_step_begin()  # the previous step's output is consumed below
            token = self.step(token, position, pad, full_mask, cache).clone()
            out[:, k : k + 1] = token
            position.add_(1)
            mark()
        return out
