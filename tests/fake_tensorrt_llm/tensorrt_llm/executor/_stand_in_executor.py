"""INVENTED as a whole: the in-flight batching executor that 1.2.1 runs in C++.

There is no Python source to mirror (TrtGptModelInflightBatching and its scheduler live in
cpp/). What is modelled, and from where:

- iteration-level (in-flight) batching: each iteration admits waiting requests while fewer
  than `max_batch_size` are active, the new prompts fit the `max_num_tokens` token budget,
  and the KV cache can hold the whole request (prompt + max_tokens: the default
  GUARANTEED_NO_EVICT capacity policy); every active request gets one token per iteration,
  a new request its first token at the end of the iteration that ran its prompt. The rules
  follow docs/source/performance/performance-tuning-guide/tuning-max-batch-size-and-max-num-tokens.md;
- one iteration takes `step_ms` (+ `prefill_ms_per_token` per prompt token not served from
  cache) of wall time; responses are put in each request's queue at the end of the
  iteration, from this executor's own thread, as 1.2.1's result queues are filled;
- KV block reuse (KvCacheConfig.enable_block_reuse): a finished request's full prompt blocks
  stay cached; a later prompt with the same leading blocks reports them as
  `cached_tokens` / `kv_cache_metrics.num_reused_blocks` and skips their prefill time;
- KV capacity: min(max_tokens, free_gpu_memory_fraction x free memory / bytes per token);
- per-request perf metrics (timing_metrics on the steady clock) when return_perf_metrics;
- without ignore_eos the "model" emits end_id after half of max_tokens (not before
  min_tokens), as a random-weight model may;
- with `numerics` (FAKE_TRTLLM_CONFIG numerics = "hf", ../_stand_in_numerics.py) the tokens are
  the checkpoint's greedy ones and a request with return_context_logits gets the prompt's logits
  on its first response; an engine built without gather_context_logits refuses such a request.
"""

from __future__ import annotations

import datetime
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from ..bindings.executor import FinishReason, RequestPerfMetrics, Response, Result
from .result import GenerationResult


def _steady(t: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=t)


@dataclass(eq=False)  # identity, so requests can sit in sets
class _Request:
    result: GenerationResult
    prompt: list
    params: object
    streaming: bool
    arrival: float
    reserve: int = 0
    cached_tokens: int = 0
    generated: int = 0
    eos_at: int | None = None
    first_scheduled: float = 0.0
    first_token: float = 0.0
    first_iter: int = 0
    tokens: list = field(default_factory=list)
    planned: list | None = None  # the model's greedy tokens (numerics "hf")
    context_logits: object = None


class InflightBatchingExecutor:
    def __init__(self, *, max_batch_size: int, max_num_tokens: int, max_seq_len: int, max_input_len: int,
                 kv_cache_config, kv_bytes_per_token: int, weight_bytes: int, tokens_per_block: int,
                 enable_chunked_context: bool, cfg: dict, numerics=None, gather_context_logits: bool = True):
        free = cfg["device_memory_gb"] * 1e9 - weight_bytes
        fraction = kv_cache_config.free_gpu_memory_fraction
        capacity = int(free * (0.9 if fraction is None else fraction) // kv_bytes_per_token)
        if kv_cache_config.max_tokens is not None:
            capacity = min(capacity, kv_cache_config.max_tokens)
        if cfg["fail"] == "kv_oom" or capacity <= 0:
            raise RuntimeError("[TensorRT-LLM][ERROR] CUDA runtime error in cudaMalloc: out of memory "
                               f"(allocating the KV cache for {capacity} tokens; stand-in)")
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.max_seq_len = max_seq_len
        self.max_input_len = max_input_len
        self.capacity_tokens = capacity
        self.block_reuse = kv_cache_config.enable_block_reuse
        self.tokens_per_block = tokens_per_block
        self.chunked_context = enable_chunked_context
        self.step_s = cfg["step_ms"] / 1000
        self.prefill_s = cfg["prefill_ms_per_token"] / 1000
        self.fail_run = cfg["fail"] == "run_oom"
        self.numerics = numerics
        self.gather_context_logits = gather_context_logits
        self._ids = itertools.count(1)
        self._waiting: deque[_Request] = deque()
        self._active: list[_Request] = []
        self._used = 0
        self._cached_blocks: set = set()
        self._iter = 0
        self._stop = False
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="stand-in-executor", daemon=True)
        self._thread.start()

    # --- the LLM API side ------------------------------------------------------------------

    def generate_async(self, prompt_token_ids: list, sampling_params, streaming: bool) -> GenerationResult:
        result = GenerationResult(next(self._ids), list(prompt_token_ids), sampling_params, streaming)
        req = _Request(result, list(prompt_token_ids), sampling_params, streaming, time.monotonic())
        error = self._reject(req)
        if error:
            result.queue.put(Response(result.id, error_msg=error))
            return result
        with self._cv:
            self._waiting.append(req)
            self._cv.notify()
        return result

    def is_shutdown(self) -> bool:
        return self._stop

    def shutdown(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=5)

    # --- the "C++" side --------------------------------------------------------------------

    def _reject(self, req: _Request) -> str | None:
        n, tpb = len(req.prompt), self.tokens_per_block
        if req.params.return_context_logits and not self.gather_context_logits:
            return ("Context logits were requested, but the engine was built without gather_context_logits "
                    "(stand-in)")  # INVENTED message
        if n > self.max_input_len:
            return f"Prompt length ({n}) exceeds maximum input length ({self.max_input_len})."
        if n > self.max_num_tokens and not self.chunked_context:
            return f"Prompt length ({n}) exceeds max_num_tokens ({self.max_num_tokens}) without chunked context."
        req.reserve = -(-(n + req.params.max_tokens) // tpb) * tpb
        if req.reserve > self.capacity_tokens:
            return (f"Can't allocate new blocks: the request needs {req.reserve} KV-cache tokens, the cache holds "
                    f"{self.capacity_tokens} (stand-in)")
        return None

    def _prefix_blocks(self, prompt: list) -> list:
        tpb = self.tokens_per_block
        return [tuple(prompt[:(i + 1) * tpb]) for i in range(len(prompt) // tpb)]

    def _admit(self) -> list[_Request]:
        admitted, budget = [], self.max_num_tokens - len(self._active)
        while self._waiting and len(self._active) + len(admitted) < self.max_batch_size:
            req = self._waiting[0]
            if self._used + req.reserve > self.capacity_tokens:
                break
            cached = 0
            if self.block_reuse:
                for block in self._prefix_blocks(req.prompt):
                    if block not in self._cached_blocks:
                        break
                    cached = len(block)
                cached = min(cached, len(req.prompt) - 1)  # the last prompt token always runs
            context = len(req.prompt) - cached
            if admitted and context > budget:
                break
            self._waiting.popleft()
            budget -= context
            req.cached_tokens = cached
            self._used += req.reserve
            admitted.append(req)
        return admitted

    def _loop(self) -> None:
        deadline = 0.0
        while True:
            with self._cv:
                while not (self._stop or self._waiting or self._active):
                    self._cv.wait()
                if self._stop:
                    return
                start = time.monotonic()
                admitted = self._admit()
            self._iter += 1
            prefill = sum(len(r.prompt) - r.cached_tokens for r in admitted)
            deadline = max(deadline, start) + self.step_s + self.prefill_s * prefill
            time.sleep(max(0.0, deadline - time.monotonic()))
            now = time.monotonic()
            for r in admitted:
                r.first_scheduled, r.first_iter = start, self._iter
                p = r.params
                if self.numerics is not None:
                    r.planned = self.numerics.greedy(r.prompt, p.max_tokens)
                    if p.return_context_logits:
                        r.context_logits = self.numerics.context_logits(r.prompt)
                if not p.ignore_eos:
                    r.eos_at = max(p.min_tokens or 1, p.max_tokens // 2)
            self._active.extend(admitted)
            finished = []
            for r in self._active:
                r.generated += 1
                if r.generated == 1:
                    r.first_token = now
                token = 1 + (len(r.prompt) * 31 + r.generated) % 997
                if token == r.params.end_id:
                    token += 1
                if r.planned is not None:
                    token = r.planned[r.generated - 1]
                reason = FinishReason.NOT_FINISHED
                if r.eos_at is not None and r.generated >= r.eos_at:
                    token, reason = r.params.end_id, FinishReason.END_ID
                elif r.generated >= r.params.max_tokens:
                    reason = FinishReason.LENGTH
                r.tokens.append(token)
                done = reason != FinishReason.NOT_FINISHED
                if done:
                    finished.append(r)
                if self.fail_run:
                    r.result.queue.put(Response(r.result.id, error_msg=(
                        "[TensorRT-LLM][ERROR] CUDA runtime error in cudaMallocAsync: out of memory (stand-in)")))
                    finished.append(r)
                    continue
                if r.streaming or done:
                    new = r.tokens if not r.streaming else [token]
                    r.result.queue.put(Response(r.result.id, result=Result(
                        is_final=done, output_token_ids=[list(new)], finish_reasons=[reason],
                        cached_tokens=r.cached_tokens, decoding_iter=r.generated,
                        context_logits=r.context_logits if r.generated == 1 or not r.streaming else None,
                        request_perf_metrics=self._metrics(r, now, done) if r.params.return_perf_metrics else None)))
            with self._cv:
                for r in set(finished):
                    self._active.remove(r)
                    self._used -= r.reserve
                    if self.block_reuse:
                        self._cached_blocks.update(self._prefix_blocks(r.prompt))

    def _metrics(self, r: _Request, now: float, done: bool) -> RequestPerfMetrics:
        m = RequestPerfMetrics(first_iter=r.first_iter, last_iter=self._iter, iter=self._iter)
        t = m.timing_metrics
        t.arrival_time, t.first_scheduled_time = _steady(r.arrival), _steady(r.first_scheduled)
        t.first_token_time = _steady(r.first_token)
        t.last_token_time = _steady(now) if done else datetime.timedelta(0)
        blocks = -(-(len(r.prompt) + r.generated) // self.tokens_per_block)
        reused = r.cached_tokens // self.tokens_per_block
        k = m.kv_cache_metrics
        k.num_total_allocated_blocks, k.num_reused_blocks = blocks, reused
        k.num_new_allocated_blocks, k.num_missed_blocks = blocks - reused, blocks - reused
        k.kv_cache_hit_rate = reused / blocks if blocks else 0.0
        return m
