"""Accuracy parity: every speedup measured against the baseline cell of the same model, on the same prompts.

Owns the drivers of `bench accuracy` (`driver`: the plan, the sessions, the records) and of
`bench parity --layers` (`parity`), the figures (`figures`: teacher-forced KL / top-1 /
perplexity with llama.cpp's `--kl-divergence` semantics, generation parity with ROUGE,
determinism, the Wilson bound), the verdict (`verdict`: aligned / degraded / broken against the
matrix's [accuracy] thresholds and the model's noise floor), a record's printed text (`text`),
the capture of logits and greedy outputs from a loaded hf model (`capture`), the worker process
that runs one cell against its baseline (`session`), the layer-by-layer comparison of two
configurations (`layers`) and the TensorRT-LLM 1.2.1 logits path (`trtllm`). May import: the
spec stage, workloads, backends, execution, results and runner; never report, study or commands.
"""
