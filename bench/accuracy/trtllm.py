"""TensorRT-LLM 1.2.1 as the accuracy code reads it: teacher-forced logits, greedy tokens, per-layer debug tensors.

NOT RUN ON HARDWARE: written against the 1.2.1 sources (the documentation build's
`1.2.1/_modules/tensorrt_llm/...` pages of NVIDIA/TensorRT-LLM) and tested with the repository's
stand-in package (tests/fake_tensorrt_llm), whose LLM can compute with the checkpoint's Hugging Face
model (FAKE_TRTLLM_CONFIG numerics = "hf"), so the tests' figures are real numbers of the same
weights, computed by transformers instead of TensorRT. `bench accuracy` measures trtllm cells
through this module (bench.accuracy.session); `bench parity --layers` does not reach
`layer_tensors` yet and says so.

Logits (1.2.1 `tensorrt_llm/sampling_params.py`, SamplingParams): `return_context_logits: bool`
"Controls if Result should contain the context logits"; the result's `tensorrt_llm/executor/result.py`
GenerationResultBase.context_logits property returns them, one row per prompt token
([prompt_len, vocab]; TensorRT-LLM's own tests check `len(output.prompt_token_ids) ==
output.context_logits.shape[0]`). The TensorRT engine path computes them only when the engine is
built with them (1.2.1 `tensorrt_llm/builder.py` BuildConfig.gather_context_logits), so an accuracy session builds the cell's own engine
with gather_context_logits = True (`logits_cell`: a build key of its own, beside the speed run's
engine) and max_input_len = max_seq_len (teacher forcing feeds prompt + answer as one prompt);
the PyTorch runtime gathers them for the requests that ask. Teacher forcing sends
prompt + answer[:-1] with max_tokens = 1 and reads the last len(answer) rows: the same positions
bench.accuracy.capture.hf_logits reads from transformers. KV-cache block reuse must be off (a
reused prefix returns logits for the recomputed suffix only): the backend turns it off.

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


def logits_cell(cell_dict: dict) -> tuple[dict, str]:
    """Return (the cell whose engine returns context logits, what differs from the measured cell's)."""
    from dataclasses import replace

    from bench.spec.cells import Cell

    cell = Cell.from_dict(cell_dict)
    opts = cell.options_dict
    if opts["runtime"] != "engine":
        return cell_dict, "PyTorch runtime: context logits gathered per request, the measured configuration itself"
    if opts["engine_dir"]:
        return cell_dict, (f"the prebuilt engine {opts['engine_dir']} (it must have been built with "
                           "gather_context_logits = True)")
    w = cell.workload
    variant = replace(cell, workload=replace(w, max_input_len=w.max_total_len),
                      options=tuple(sorted({**opts, "gather_context_logits": True}.items())))
    return variant.to_dict(), ("an engine of its own: the cell's build with gather_context_logits = True and "
                               f"max_input_len = max_seq_len = {w.max_total_len} (build key {variant.build_key().key_hash})")


def teacher_forced_params(end_id: int = 0):
    """Return the 1.2.1 SamplingParams of one teacher-forced pass: one greedy token, context logits returned."""
    from tensorrt_llm import SamplingParams

    return SamplingParams(max_tokens=1, top_k=1, return_context_logits=True, detokenize=False, end_id=end_id,
                          pad_id=end_id)


def trtllm_logits(llm, end_id: int = 0):
    """Return the logit source (bench.accuracy.capture.LogitSource) of a TensorRT-LLM 1.2.1 LLM."""
    params = teacher_forced_params(end_id)

    def source(prompt: list[int], answer: list[int]):
        # 1.2.1 llmapi/llm.py BaseLLM.generate_async(inputs, sampling_params) -> RequestOutput; .result() waits
        out = llm.generate_async(list(prompt) + list(answer[:-1]), sampling_params=params).result()
        logits = out.context_logits  # [prompt + answer - 1, vocab]
        if logits is None:
            raise RuntimeError("TensorRT-LLM returned no context logits: build or load the LLM with "
                               "gather_context_logits=True and KV-cache block reuse off")
        if logits.shape[0] != len(prompt) + len(answer) - 1:
            raise RuntimeError(f"context logits have {logits.shape[0]} rows for {len(prompt) + len(answer) - 1} "
                               "prompt tokens: a reused KV-cache prefix? turn enable_block_reuse off")
        return logits[-len(answer):]

    return source


def trtllm_greedy(llm, prompts: list[list[int]], new_tokens: int, end_id: int) -> list[list[int]]:
    """Return exactly new_tokens greedy ids per prompt (all in flight at once, as the speed run sends them)."""
    from tensorrt_llm import SamplingParams

    params = SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True, top_k=1, detokenize=False,
                            end_id=end_id, pad_id=end_id)
    results = [llm.generate_async(list(p), sampling_params=params) for p in prompts]
    return [list(r.result().outputs[0].token_ids)[:new_tokens] for r in results]


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
