"""A request a workload holds (`Request`) and what a backend measured of it (`RequestTiming`).

Both sit below workloads, serving and backends, which pass them along: a workload is a list of
Requests, and every backend (the serving client included) returns one RequestTiming per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    id: str
    prompt_ids: tuple[int, ...]
    output_len: int
    arrival_s: float = 0.0  # offset from the start of the run (0: all at once)

    @property
    def input_len(self) -> int:
        return len(self.prompt_ids)


@dataclass
class RequestTiming:
    """What a backend measured for one request, in seconds on one monotonic clock.

    `start` is when the request was handed to the engine (for offline batches: its batch's
    start), `token_times` the absolute time each output token became available (first = TTFT
    point, last = end). `output_len` is the number of tokens the engine actually produced; the
    harness compares it to `expected_output_len`.
    """

    request_id: str
    input_len: int
    expected_output_len: int
    output_len: int
    start: float
    token_times: list[float] = field(default_factory=list)
    end: float = 0.0
    arrival: float = 0.0  # when the request became due (0 for offline: all at once)
    error: str | None = None
    # The token ids the engine produced, where the backend can read them (None: it cannot, e.g. a
    # server that streams text). Stored per pass as a digest and the first ids (bench.metrics.request_samples),
    # so every timed pass says what it computed, not only how fast.
    output_ids: list[int] | None = None
