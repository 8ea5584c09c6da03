"""INVENTED as a whole: what the engine computes, when the stand-in is asked to compute it.

With FAKE_TRTLLM_CONFIG {"numerics": "hf"}, an LLM built or loaded from a checkpoint with real
weights computes with them: the Hugging Face model of the checkpoint, in the engine's dtype
(precision's activation dtype; weight-only quantization is NOT modelled: an int8-wo engine
computes as fp16 here). Greedy tokens replace the executor's synthetic ones, and a request with
SamplingParams.return_context_logits gets the logits of every prompt position ([prompt_len, vocab],
row t predicting token t + 1), as 1.2.1's GenerationResultBase.context_logits returns them. So the
accuracy tests' figures for a trtllm cell are real numbers of the same weights as the hf baseline,
computed by transformers instead of TensorRT: they test the harness's path, not TensorRT's numerics.
"""

from __future__ import annotations

import threading


class HFNumerics:
    """A checkpoint's Hugging Face model, loaded on first use (CPU, or CUDA when present)."""

    def __init__(self, checkpoint: str, dtype: str):
        self.checkpoint, self.dtype = checkpoint, dtype
        self._model = None
        self._lock = threading.Lock()  # the executor thread and the caller never compute at once

    def _load(self):
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            self._model = AutoModelForCausalLM.from_pretrained(self.checkpoint, dtype=getattr(torch, self.dtype)).eval()
        return self._model

    def context_logits(self, prompt: list[int]):
        """Return [len(prompt), vocab] float32 logits of the prompt's positions."""
        import torch

        with self._lock, torch.inference_mode():
            model = self._load()
            return model(input_ids=torch.tensor([list(prompt)]), use_cache=False).logits[0].float()

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """Return the n greedy tokens after prompt (end of sequence ignored, as ignore_eos asks)."""
        import torch

        with self._lock, torch.inference_mode():
            model = self._load()
            ids = torch.tensor([list(prompt)])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                 min_new_tokens=n, pad_token_id=0)
        return out[0, len(prompt):].tolist()
