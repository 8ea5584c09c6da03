"""TensorRT-LLM 1.2.1 as the accuracy code reads it: teacher-forced logits and per-layer debug tensors.

NOT RUN ON HARDWARE: written against the 1.2.1 sources (the documentation build's
`1.2.1/_modules/tensorrt_llm/...` pages of NVIDIA/TensorRT-LLM) and exercised only with a stand-in
LLM in tests/test_accuracy.py; `bench accuracy` does not route trtllm cells here yet (it refuses
them with a message), because a session holding an hf baseline and a TensorRT-LLM engine in one
process has not been tried on a GPU.

Logits (1.2.1 `tensorrt_llm/sampling_params.py`, SamplingParams): `return_context_logits: bool`
"Controls if Result should contain the context logits" (the LLM must gather them: 1.2.1's
BuildConfig / TorchLlmArgs `gather_context_logits`); the result's
`tensorrt_llm/executor/result.py` GenerationResultBase.context_logits property returns them,
one row per prompt token ([prompt_len, vocab]); CompletionOutput.generation_logits holds the
generated tokens' rows when `return_generation_logits` is set. Teacher forcing therefore sends
prompt + answer[:-1] as the prompt with max_tokens = 1 and reads the last len(answer) rows of the
context logits: the same positions bench.accuracy.capture.hf_logits reads from transformers.
KV-cache block reuse must be off (a reused prefix returns logits for the recomputed suffix only).

Layers (1.2.1 `tensorrt_llm/runtime/generation.py`, GenerationSession(model_config,
engine_buffer, mapping, debug_mode=False, debug_tensors_to_save=None)): an engine built with
BuildConfig(enable_debug_output=True) marks its intermediate tensors as outputs; a
GenerationSession created with debug_mode=True copies those named in debug_tensors_to_save into
`session.debug_buffer` ({name: tensor}) after each step. `layer_tensors` maps those names onto
bench.accuracy.layers' hook points (the names below are the TensorRT-LLM model's module paths;
which of them an engine keeps is the engine's choice, so a missing one is reported, not guessed).
"""

from __future__ import annotations

import re

# TensorRT-LLM module paths (models/llama/model.py's LLaMAForCausalLM, which Qwen2 engines use) -> our names.
LAYER_NAME = re.compile(r"^transformer\.layers\.(\d+)(?:\.output)?$")
FIXED_NAMES = {"transformer.vocab_embedding": "embeddings", "transformer.ln_f": "final norm", "lm_head": "logits"}


def teacher_forced_params():
    """Return the 1.2.1 SamplingParams of one teacher-forced pass: one greedy token, context logits returned."""
    from tensorrt_llm import SamplingParams

    return SamplingParams(max_tokens=1, temperature=0.0, return_context_logits=True, detokenize=False)


def trtllm_logits(llm):
    """Return the logit source (bench.accuracy.capture.LogitSource) of a TensorRT-LLM 1.2.1 LLM."""
    params = teacher_forced_params()

    def source(prompt: list[int], answer: list[int]):
        out = llm.generate([list(prompt) + list(answer[:-1])], params)[0]
        logits = out.context_logits  # [prompt + answer - 1, vocab]
        if logits is None:
            raise RuntimeError("TensorRT-LLM returned no context logits: build or load the LLM with "
                               "gather_context_logits=True and KV-cache block reuse off")
        if logits.shape[0] != len(prompt) + len(answer) - 1:
            raise RuntimeError(f"context logits have {logits.shape[0]} rows for {len(prompt) + len(answer) - 1} "
                               "prompt tokens: a reused KV-cache prefix? turn enable_block_reuse off")
        return logits[-len(answer):]

    return source


def layer_tensors(debug_buffer: dict) -> tuple[dict, list[str]]:
    """Return ({hook point name: tensor} in bench.accuracy.layers' order, the names it could not map)."""
    found, unmapped = {}, []
    layers = {}
    for name, tensor in debug_buffer.items():
        m = LAYER_NAME.match(name)
        if m:
            layers[int(m.group(1))] = tensor
        elif name in FIXED_NAMES:
            found[FIXED_NAMES[name]] = tensor
        else:
            unmapped.append(name)
    ordered = {}
    if "embeddings" in found:
        ordered["embeddings"] = found["embeddings"]
    for i in sorted(layers):
        ordered[f"layer {i}"] = layers[i]
    for name in ("final norm", "logits"):
        if name in found:
            ordered[name] = found[name]
    return ordered, unmapped
