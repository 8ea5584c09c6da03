"""Mirrors 1.2.1 tensorrt_llm/executor/result.py: CompletionOutput, GenerationResult.

1.2.1: every GenerationResult owns a queue (`Queue()`, or `AsyncQueue().sync_q` when created
inside a running event loop) that the executor's background side fills with one response per
step; `__next__` is `_result_step()` = one blocking `queue.get()` + `_handle_response`. A
reader that comes late finds the steps already queued and drains them at once: its token
times are its own, not the engine's. `_handle_response` here is the TRT (tllm.Response) branch
reduced to what the harness reads: token ids, finish reason, cached_tokens, request_perf_metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from queue import Queue
from typing import Any

from ..bindings.executor import FinishReason, RequestPerfMetrics
from .utils import RequestError


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list | None = field(default_factory=list)
    cumulative_logprob: float | None = None
    logprobs: Any = field(default_factory=list)
    prompt_logprobs: Any = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: Any = None
    generation_logits: Any = None
    additional_context_outputs: Any = None
    additional_generation_outputs: Any = None
    disaggregated_params: Any = None
    request_perf_metrics: RequestPerfMetrics | None = None
    _last_text_len: int = field(default=0, init=False, repr=False)
    _last_token_ids_len: int = field(default=0, init=False, repr=False)
    _last_logprobs_len: int = field(default=0, init=False, repr=False)
    _incremental_states: dict | None = field(default=None, init=False, repr=False)
    _postprocess_result: Any = None

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def token_ids_diff(self) -> list:
        return self.token_ids[self._last_token_ids_len:]


_FINISH = {FinishReason.END_ID: "stop", FinishReason.STOP_WORDS: "stop", FinishReason.LENGTH: "length",
           FinishReason.TIMED_OUT: "timeout", FinishReason.CANCELLED: "cancelled"}


class GenerationResult:
    def __init__(self, request_id: int, prompt_token_ids: list, sampling_params, streaming: bool):
        self.id = request_id
        self._prompt_token_ids = prompt_token_ids
        self.sampling_params = sampling_params
        self._streaming = streaming
        self.queue: Queue = Queue()
        self._outputs = [CompletionOutput(i) for i in range(sampling_params.best_of)]
        self._done = False
        self.cached_tokens = 0
        self.decoding_iter = 0
        self.metrics_dict: dict = {}
        self._context_logits = None

    @property
    def request_id(self) -> int:
        return self.id

    @property
    def prompt_token_ids(self) -> list:
        return self._prompt_token_ids

    @property
    def outputs(self) -> list[CompletionOutput]:
        return self._outputs[:self.sampling_params.n]

    @property
    def context_logits(self):
        """1.2.1 GenerationResultBase.context_logits: [prompt_len, vocab] when return_context_logits, else None."""
        return self._context_logits

    @property
    def finished(self) -> bool:
        return self._done

    def _handle_response(self, response) -> None:
        if response.has_error():
            # 1.2.1 hands error_msg to the executor's background error handler, which raises it
            # in the thread that consumes the result (a RequestError for a failed request).
            raise RequestError(response.error_msg)
        result = response.result
        if result.context_logits is not None:
            self._context_logits = result.context_logits
        self._done = result.is_final
        self.decoding_iter = result.decoding_iter
        self.cached_tokens = getattr(result, "cached_tokens", 0)
        output = self._outputs[result.sequence_index]
        output._last_token_ids_len = len(output.token_ids)
        output.token_ids.extend(result.output_token_ids[0])
        if result.request_perf_metrics is not None:
            output.request_perf_metrics = result.request_perf_metrics
        reason = result.finish_reasons[0] if result.finish_reasons else FinishReason.NOT_FINISHED
        if reason != FinishReason.NOT_FINISHED:
            output.finish_reason = _FINISH[reason]

    def _result_step(self, timeout: float | None = None):
        response = self.queue.get()
        self._handle_response(response)

    def result(self, timeout: float | None = None) -> GenerationResult:
        while not self._done:
            self._result_step(timeout)
        return self

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        self._result_step()
        return self
