"""Mirrors 1.2.1 tensorrt_llm/sampling_params.py SamplingParams: @dataclass(slots=True, kw_only=True).

Fields, defaults, __post_init__ and _validate are 1.2.1's (an unknown keyword is a TypeError
from the dataclass __init__). Not modelled: embedding_bias tensors, logits processors, the
tokenizer-driven _setup (only called by the LLM when end_id is None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    bad: Any = None
    bad_token_ids: list | None = None
    _bad_word_ids: list | None = field(default=None, init=False, repr=False)
    stop: Any = None
    stop_token_ids: list | None = None
    include_stop_str_in_output: bool = False
    _stop_word_ids: list | None = field(default=None, init=False, repr=False)

    embedding_bias: Any = None
    logits_processor: Any = None
    apply_batched_logits_processor: bool = False

    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False

    top_k: int | None = None
    top_p: float | None = None
    top_p_min: float | None = None
    top_p_reset_ids: int | None = None
    top_p_decay: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    beam_search_diversity_rate: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    prompt_ignore_length: int | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None
    no_repeat_ngram_size: int | None = None
    min_p: float | None = None
    beam_width_array: list | None = None

    logprobs: int | None = None
    prompt_logprobs: int | None = None
    return_context_logits: bool = False
    return_generation_logits: bool = False
    exclude_input_from_output: bool = True
    return_encoder_output: bool = False
    return_perf_metrics: bool = False
    additional_model_outputs: list | None = None

    _context_logits_auto_enabled: bool = False
    _generation_logits_auto_enabled: bool = False
    _return_log_probs: bool = False

    lookahead_config: Any = None
    guided_decoding: Any = None

    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    _stream_interval: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.pad_id is None:
            self.pad_id = self.end_id
        self.best_of = self.best_of or self.n
        self._validate()

    @property
    def _greedy_decoding(self) -> bool:
        # Approximation of 1.2.1's params_imply_greedy_decoding (its body was not read in full).
        return not self.use_beam_search and (self.temperature == 0 or self.top_k == 1 or (
            self.temperature is None and self.top_k is None and self.top_p is None))

    def _validate(self):
        if self.top_p is not None and (self.top_p < 0 or self.top_p > 1):
            raise ValueError(f"require 0 <= top_p <= 1, got top_p={self.top_p}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"require top_k >= 0, got top_k={self.top_k}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"require temperature >= 0, got temperature={self.temperature}")
        if self.best_of is not None and self.best_of < self.n:
            raise ValueError(f"best_of ({self.best_of}) cannot be less than n ({self.n})")
        if self.best_of is not None and self.best_of > 1 and self._greedy_decoding:
            raise ValueError(f"Greedy decoding in the LLM API does not allow multiple returns. Please set to "
                             f"best_of=1, got best_of={self.best_of}.")
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1:
            raise ValueError(f"truncate_prompt_tokens must be >= 1, got {self.truncate_prompt_tokens}")
        self.logprobs = self.logprobs and int(self.logprobs)
        self.prompt_logprobs = self.prompt_logprobs and int(self.prompt_logprobs)
