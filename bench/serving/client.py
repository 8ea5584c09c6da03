"""Streaming asyncio client: replays requests against an OpenAI-compatible server, timing every chunk.

One `replay()` call is one measured pass: requests become due at their arrival offsets, at
most `max_concurrency` are in flight (an asyncio.Semaphore; the wait for a slot is not part of
TTFT, as in vLLM's `bench serve`), and each streams its answer over server-sent events.

Timing rules (vLLM's): `start` is taken just before the POST; a chunk's time is when the read
that carried it returned, so events that arrive together share one timestamp (the client saw
them at once). A chunk counts as a token event when it has choices and either non-empty
text/content, or empty text without a finish_reason and without a chat `role` (a token that
decoded to nothing yet, e.g. half of a UTF-8 character). A chat role-only chunk and an empty
final chunk carrying just finish_reason are not tokens. When one chunk carries several tokens,
the gap before it is one ITL sample (it is not divided among its tokens), as vLLM does. `end`
is the last chunk that carried choices (vLLM's latency); a trailing usage-only chunk and
`data: [DONE]` do not move it.

A stream that ends cleanly (the response completed, no partial event left) is a success with
or without `data: [DONE]`, as in vLLM and guidellm; `Received.saw_done` says which. The
client does not decide output token counts: `Received` carries the server's usage and the
streamed text, and the caller (the openai backend) picks the count; `RequestTiming.output_len`
is left at the usage count, or at the number of token events when the server sent none.

Nothing a server does crashes a pass: every failure becomes the request's `error`, as
"<kind>: <detail>" with kind one of ERROR_KINDS (`error_kind` reads it back).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from bench.serving.sse import SSEDecoder
from bench.workloads.request import RequestTiming

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# How a request can fail (the prefix of RequestTiming.error). http_<status> stands for any HTTP status.
ERROR_KINDS = {
    "http_<status>": "the server answered with an HTTP error status",
    "connection": "no connection (refused, reset before an answer, DNS)",
    "timeout": "no complete answer within timeout_s",
    "cut": "the stream broke off (incomplete chunked body, or a partial event at the end)",
    "stream_error": "the server sent an error event inside the stream",
    "bad_response": "not an OpenAI stream (wrong content type, a chunk that is not JSON, no completion chunks)",
}


def error_kind(error: str) -> str:
    """Return the kind of a request error made by this client ('http_500', 'cut', ...)."""
    return error.split(":", 1)[0]


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to send: the server, endpoint, the model name sent, request extensions."""

    base_url: str  # scheme://host:port, without /v1
    endpoint: str = "completions"  # completions | chat
    model: str = ""
    timeout_s: float = 600.0  # per request, from send to the end of the stream
    ignore_eos: bool = True  # vLLM/SGLang/TensorRT-LLM extension: generate exactly max_tokens
    min_tokens: bool = True  # vLLM/TensorRT-LLM extension: min_tokens = max_tokens
    include_usage: bool = True  # stream_options.include_usage: the server's own token count
    api_key: str | None = None

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + ENDPOINT_PATHS[self.endpoint]


@dataclass(frozen=True)
class ServeRequest:
    """One request to send: prompt as token ids or text, the output length asked for, when due."""

    id: str
    prompt: list[int] | str
    input_len: int
    max_tokens: int
    arrival_s: float = 0.0


@dataclass
class Received:
    """What one stream carried beyond its timing: the server's counts, the text, the end marker."""

    text: str = ""
    completion_tokens: int | None = None  # usage.completion_tokens (None: the server sent no usage)
    prompt_tokens: int | None = None
    saw_done: bool = False


@dataclass
class StreamStats:
    """What the client saw beyond per-request timings (for the record's extra and metrics)."""

    started: float = 0.0
    ended: float = 0.0
    send_times: list[float] = field(default_factory=list)
    # per request, in input order: when its POST started - when it was due (its arrival time, or when a
    # concurrency slot freed, whichever is later); a client starved of CPU sends late
    send_lag_s: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    chunks: int = 0
    unknown_events: int = 0
    received: list[Received] = field(default_factory=list)  # per request, in input order


def build_payload(cfg: ClientConfig, req: ServeRequest) -> bytes:
    """Return the JSON body of one streaming request."""
    body: dict = {"model": cfg.model, "max_tokens": req.max_tokens, "stream": True, "temperature": 0.0}
    if cfg.endpoint == "chat":
        if not isinstance(req.prompt, str):
            raise ValueError("the chat endpoint needs text prompts (prompt = 'text')")
        body["messages"] = [{"role": "user", "content": req.prompt}]
        body["max_completion_tokens"] = req.max_tokens
    else:
        body["prompt"] = req.prompt
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if cfg.min_tokens:
        body["min_tokens"] = req.max_tokens
    if cfg.include_usage:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


def _token_text(choice: dict, chat: bool) -> str | None:
    """Return the text of a token event (possibly ''), None when the chunk is not a token."""
    if chat:
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if text is None or (text == "" and "role" in delta):
            return None
    else:
        text = choice.get("text")
        if text is None:
            return None
    return text if (text or not choice.get("finish_reason")) else None


async def _stream_one(session, cfg: ClientConfig, req: ServeRequest, body: bytes, headers: dict,
                      stats: StreamStats) -> tuple[RequestTiming, Received]:
    import aiohttp

    chat = cfg.endpoint == "chat"
    times: list[float] = []
    pieces: list[str] = []
    got = Received()
    error = None
    answered = False
    start = time.perf_counter()
    end = start
    try:
        async with session.post(cfg.url, data=body, headers=headers) as resp:
            answered = True
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:300]
                error = f"http_{resp.status}: {text}"
            elif "text/event-stream" not in resp.headers.get("Content-Type", ""):
                text = (await resp.text(errors="replace"))[:200]
                error = (f"bad_response: not a server-sent-event stream (Content-Type "
                         f"{resp.headers.get('Content-Type')!r}): {text!r}; is this an OpenAI-compatible endpoint?")
            else:
                decoder = SSEDecoder()
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    for payload in decoder.feed(data):
                        if payload == b"[DONE]":
                            got.saw_done = True
                            continue
                        try:
                            event = json.loads(payload)
                        except ValueError:
                            error = f"bad_response: chunk is not JSON: {payload[:120]!r}"
                            break
                        if not isinstance(event, dict):
                            stats.unknown_events += 1
                            continue
                        if "error" in event:
                            error = f"stream_error: {str(event['error'])[:300]}"
                            break
                        choices = event.get("choices")
                        if choices:
                            stats.chunks += 1
                            end = now
                            text = _token_text(choices[0], chat)
                            if text is not None:
                                times.append(now)
                                pieces.append(text)
                        usage = event.get("usage")
                        if usage:
                            got.completion_tokens = usage.get("completion_tokens")
                            got.prompt_tokens = usage.get("prompt_tokens")
                        elif not choices and "choices" not in event:
                            stats.unknown_events += 1
                    if error:
                        break
                if error is None and decoder.pending.strip():
                    error = (f"cut: the stream ended inside an event after {len(times)} token chunk(s) "
                             f"(partial event {decoder.pending[:80]!r})")
                if error is None and not times:
                    error = "bad_response: the stream had no completion chunks (no 'choices' with text)"
    except asyncio.TimeoutError:
        error = f"timeout: no complete answer within timeout_s={cfg.timeout_s:g} s"
    except aiohttp.ClientPayloadError as exc:
        error = f"cut: {exc}"
    except aiohttp.ClientConnectorError as exc:
        error = f"connection: {exc}"
    except aiohttp.ServerDisconnectedError as exc:
        error = f"{'cut' if answered else 'connection'}: server disconnected ({exc})"
    except aiohttp.ClientError as exc:
        error = f"{'cut' if answered else 'connection'}: {type(exc).__name__}: {exc}"
    if error is not None:
        end = time.perf_counter()
    got.text = "".join(pieces)
    output_len = len(times)
    if got.completion_tokens is not None and error is None:
        output_len = int(got.completion_tokens)
    timing = RequestTiming(req.id, req.input_len, req.max_tokens, output_len, start, times, end,
                           arrival=req.arrival_s, error=error)
    return timing, got


def _raise_fd_limit() -> None:
    # An unbounded concurrency opens one connection per request in flight.
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - best effort
        pass


async def replay(cfg: ClientConfig, requests: list[ServeRequest], max_concurrency: int | None = None
                 ) -> tuple[list[RequestTiming], StreamStats]:
    """Return the timings of every request (in input order) and the pass's client statistics."""
    import aiohttp

    _raise_fd_limit()
    headers = {"Content-Type": "application/json"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    bodies = [build_payload(cfg, r) for r in requests]  # encoded before the clock starts
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
    stats = StreamStats()
    connector = aiohttp.TCPConnector(limit=max_concurrency or 0, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    results: list[tuple[RequestTiming, Received] | None] = [None] * len(requests)
    lags = [0.0] * len(requests)  # per request (input order): its POST's start - when it was due

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:

        async def one(i: int, due: float) -> None:
            if sem is None:
                results[i] = await _stream_one(session, cfg, requests[i], bodies[i], headers, stats)
                lags[i] = results[i][0].start - due
                return
            async with sem:
                ready = max(due, time.perf_counter())  # a wait for a free slot is the closed loop, not lag
                results[i] = await _stream_one(session, cfg, requests[i], bodies[i], headers, stats)
                lags[i] = results[i][0].start - ready

        cpu0 = time.process_time()
        t0 = time.perf_counter()
        stats.started = t0
        tasks = []
        for i in order:
            due = t0 + requests[i].arrival_s
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, due)))
        await asyncio.gather(*tasks)
        stats.send_lag_s = [max(0.0, lag) for lag in lags]
        stats.client_cpu_s = time.process_time() - cpu0
    timings = [r[0] for r in results if r is not None]
    stats.received = [r[1] for r in results if r is not None]
    for t in timings:
        t.arrival = t0 + t.arrival  # absolute, on the same clock as start/token_times
    stats.send_times = sorted(t.start for t in timings)
    stats.ended = max((t.end for t in timings), default=t0)
    return timings, stats


async def list_models(base_url: str, timeout_s: float = 10.0, api_key: str | None = None) -> tuple[int, object]:
    """Return (HTTP status, parsed JSON or text) of GET /v1/models; raise on connection failure."""
    import aiohttp

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.get(base_url.rstrip("/") + "/v1/models", headers=headers) as resp:
            text = await resp.text(errors="replace")
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text
