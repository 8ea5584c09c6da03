"""Stand-in for the C++ bindings tensorrt_llm.bindings.executor the LLM API reads results from.

Field names follow the bindings as NVIDIA's own tests use them (tests/unittest/llmapi
test_llm*.py `test_llm_return_perf_metrics`; tests/unittest/bindings/test_executor_bindings.py
`test_request_perf_metrics_pickle`): timing_metrics.{arrival_time, first_scheduled_time,
first_token_time, last_token_time} are datetime.timedelta on the steady clock, last_token_time
is timedelta(0) until the request is done; kv_cache_metrics counts allocated / reused blocks.
Everything else here is INVENTED plumbing.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass, field


class FinishReason(enum.Enum):
    NOT_FINISHED = 0
    END_ID = 1
    STOP_WORDS = 2
    LENGTH = 3
    TIMED_OUT = 4
    CANCELLED = 5


@dataclass
class TimingMetrics:
    arrival_time: datetime.timedelta = datetime.timedelta(0)
    first_scheduled_time: datetime.timedelta = datetime.timedelta(0)
    first_token_time: datetime.timedelta = datetime.timedelta(0)
    last_token_time: datetime.timedelta = datetime.timedelta(0)


@dataclass
class KvCacheMetrics:
    num_total_allocated_blocks: int = 0
    num_new_allocated_blocks: int = 0
    num_reused_blocks: int = 0
    num_missed_blocks: int = 0
    kv_cache_hit_rate: float = 0.0


@dataclass
class RequestPerfMetrics:
    timing_metrics: TimingMetrics = field(default_factory=TimingMetrics)
    kv_cache_metrics: KvCacheMetrics = field(default_factory=KvCacheMetrics)
    first_iter: int | None = None
    last_iter: int | None = None
    iter: int | None = None


@dataclass
class Result:
    """tllm.Result: what one streamed step carries (the new tokens in streaming mode)."""

    is_final: bool
    output_token_ids: list[list[int]]
    finish_reasons: list[FinishReason]
    sequence_index: int = 0
    cached_tokens: int = 0
    decoding_iter: int = 0
    request_perf_metrics: RequestPerfMetrics | None = None
    context_logits: object = None


@dataclass
class Response:
    request_id: int
    result: Result | None = None
    error_msg: str | None = None

    def has_error(self) -> bool:
        return self.error_msg is not None
