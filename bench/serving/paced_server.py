"""A paced OpenAI-compatible streaming server for tests and client benchmarks (loopback only).

It answers GET /v1/models, GET /health, POST /v1/completions and /v1/chat/completions with an SSE stream:
wait `ttft_s`, then emit max_tokens (+ `extra_tokens`) tokens, `tokens_per_chunk` per chunk,
`itl_s` apart, then a usage chunk (when asked for with stream_options.include_usage) and
`data: [DONE]`. `mode` injects one failure into every request: http500, bad_json (200 with a
non-OpenAI JSON body), cut (connection closed after `cut_after` chunks), hang (never answers),
no_done (stream ends cleanly without [DONE]), stream_error (an error event after `cut_after`
chunks, as vLLM and transformers serve send one), short (one token fewer than asked).
`fault_plan` varies it per request: the k-th POST gets fault_plan[k % len] (a fault server:
some requests fail, most do not). Servers differ in what they accept: `reject_fields` answers
HTTP 422 naming the fields when a request carries any of them (transformers serve's
"Unexpected fields"), `text_prompts_only` answers HTTP 400 to token-id prompts, `usage=False`
never sends usage, a model it does not list gets HTTP 404. `knee` and `load_slowdown` make it
slow down with load: past `knee` streams in flight, every wait grows (ServerConfig.pace). With `record=True` it logs, per request, when its handler started and when
each chunk was written (time.perf_counter: CLOCK_MONOTONIC on Linux, the same clock as the
client in another process), so tests can compare the client's TTFT/ITL with what the server
really did.

`TestServer(...)` runs in a background thread of the calling process (tests);
`python -m bench.serving.paced_server --port 0` runs it as a process (benchmarks) and prints
`LISTENING http://127.0.0.1:PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field

MODES = ("ok", "http500", "bad_json", "cut", "hang", "no_done", "stream_error", "short")


@dataclass
class ServerConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens_per_chunk: int = 1
    extra_tokens: int = 0  # emit max_tokens + this (negative: fewer; a server ignoring max_tokens)
    mode: str = "ok"
    cut_after: int = 2
    models: tuple[str, ...] = ("test-model",)
    models_status: int = 200  # 404: a server without /v1/models
    usage: bool = True  # honour stream_options.include_usage
    record: bool = False
    fault_plan: tuple[str, ...] = ()  # per request, cycling: a mode each (overrides `mode`)
    reject_fields: tuple[str, ...] = ()  # HTTP 422 when a request carries any of these fields
    text_prompts_only: bool = False  # HTTP 400 for token-id prompts
    # Load: with more than `knee` streams in flight, every wait (TTFT, ITL) is multiplied by
    # 1 + load_slowdown x (in flight - knee): a server whose latency rises past a known knee.
    knee: int = 0
    load_slowdown: float = 0.0

    def pace(self, in_flight: int) -> float:
        """Return the factor on TTFT and ITL with `in_flight` streams open."""
        return 1.0 + self.load_slowdown * max(0, in_flight - self.knee)


@dataclass
class ServedRequest:
    path: str
    body: dict
    t_recv: float
    t_chunks: list[float] = field(default_factory=list)  # token chunks written


def _chunk(chat: bool, text: str, finish: str | None, first: bool = False) -> bytes:
    if chat:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    event = {"id": "cmpl-test", "object": obj, "created": 0, "model": "test-model", "choices": [choice]}
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def make_app(cfg: ServerConfig, log: list[ServedRequest]):
    """Return the aiohttp web.Application serving `cfg`, appending to `log` when recording."""
    from aiohttp import web

    cache: dict = {}
    counter = [0]  # POSTs seen, for fault_plan
    streaming = [0]  # streams in flight (the load that slows a paced server down past its knee)

    def chunk(chat: bool, k: int, finish: str | None, first: bool) -> bytes:
        key = (chat, k, finish, first)
        if key not in cache:
            cache[key] = _chunk(chat, " tok" * k, finish, first)
        return cache[key]

    async def models(request):
        if cfg.models_status != 200:
            return web.json_response({"detail": "Not Found"}, status=cfg.models_status)
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in cfg.models]})

    async def health(request):
        return web.json_response({"status": "ok"})

    async def generate(request):
        t_recv = time.perf_counter()
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        entry = ServedRequest(request.path, body, t_recv)
        if cfg.record:
            log.append(entry)
        if cfg.models_status == 200 and body.get("model") not in cfg.models:  # as vLLM: an unknown model is a 404
            return web.json_response({"object": "error", "message": f"The model `{body.get('model')}` does not exist."},
                                     status=404)
        rejected = sorted(set(cfg.reject_fields) & set(body))
        if rejected:
            return web.json_response({"detail": f"Unexpected fields in the request: {set(rejected)}"}, status=422)
        if cfg.text_prompts_only and not isinstance(body.get("prompt", ""), str):
            return web.json_response({"detail": "prompt must be a string."}, status=400)
        mode = cfg.fault_plan[counter[0] % len(cfg.fault_plan)] if cfg.fault_plan else cfg.mode
        counter[0] += 1
        if mode == "http500":
            return web.json_response({"object": "error", "message": "injected failure"}, status=500)
        if mode == "bad_json":
            return web.json_response({"result": "hello", "tokens": [1, 2, 3]})
        if mode == "hang":
            await asyncio.sleep(3600)
        n = max(0, int(body.get("max_tokens", 16)) + cfg.extra_tokens - (mode == "short"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        streaming[0] += 1
        try:
            return await _stream(request, resp, body, chat, entry, mode, n)
        finally:
            streaming[0] -= 1

    async def _stream(request, resp, body, chat, entry, mode, n):
        if cfg.ttft_s:
            await asyncio.sleep(cfg.ttft_s * cfg.pace(streaming[0]))
        k = max(1, cfg.tokens_per_chunk)
        sent = chunks = 0
        while sent < n:
            if chunks and cfg.itl_s:
                await asyncio.sleep(cfg.itl_s * cfg.pace(streaming[0]))
            m = min(k, n - sent)
            sent += m
            await resp.write(chunk(chat, m, "length" if sent == n else None, chunks == 0))
            if cfg.record:
                entry.t_chunks.append(time.perf_counter())
            chunks += 1
            if mode == "cut" and chunks >= cfg.cut_after:
                request.transport.close()  # mid-stream: no terminating chunk, no [DONE]
                return resp
            if mode == "stream_error" and chunks >= cfg.cut_after:
                await resp.write(b'data: {"error": {"message": "injected failure", "code": 500}}\n\n')
                await resp.write_eof()
                return resp
        if cfg.usage and (body.get("stream_options") or {}).get("include_usage"):
            prompt = body.get("prompt", "")
            usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else len(str(prompt).split()),
                     "completion_tokens": n, "total_tokens": n}
            await resp.write(b"data: " + json.dumps({"id": "cmpl-test", "choices": [], "usage": usage}).encode() + b"\n\n")
        if mode != "no_done":
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    return app


class TestServer:
    """The server in a background thread with its own event loop; a context manager."""

    __test__ = False  # not a pytest test class

    def __init__(self, cfg: ServerConfig | None = None, **kw):
        self.cfg = cfg or ServerConfig(**kw)
        self.log: list[ServedRequest] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="bench-testserver")
        self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        from aiohttp import web

        self._runner = web.AppRunner(make_app(self.cfg, self.log), access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    def start(self) -> TestServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> TestServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Serve on 127.0.0.1 until stdin closes (or the process is terminated)."""
    from aiohttp import web

    p = argparse.ArgumentParser(prog="python -m bench.serving.paced_server", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--mode", choices=MODES, default="ok")
    p.add_argument("--fault-plan", default="", help="comma-separated modes, one per request in turn (overrides --mode)")
    p.add_argument("--cut-after", type=int, default=2, help="chunks before a cut or an error event")
    p.add_argument("--no-usage", action="store_true", help="never send usage (as a server without stream_options)")
    p.add_argument("--reject-fields", default="", help="comma-separated request fields answered with HTTP 422")
    p.add_argument("--text-prompts-only", action="store_true", help="HTTP 400 for token-id prompts")
    p.add_argument("--knee", type=int, default=0, help="streams in flight beyond which TTFT and ITL grow")
    p.add_argument("--load-slowdown", type=float, default=0.0,
                   help="TTFT and ITL x (1 + this x streams in flight beyond --knee)")
    p.add_argument("--uvloop", action="store_true", help="use uvloop if installed")
    p.add_argument("--record-file", help="on exit, write each request's prompt, t_recv and chunk times here (JSON)")
    args = p.parse_args(argv)
    plan = tuple(m for m in args.fault_plan.split(",") if m)
    if set(plan) - set(MODES):
        p.error(f"--fault-plan: unknown mode(s) {sorted(set(plan) - set(MODES))}; modes are {', '.join(MODES)}")
    cfg = ServerConfig(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000, tokens_per_chunk=args.tokens_per_chunk,
                       mode=args.mode, cut_after=args.cut_after, usage=not args.no_usage, record=bool(args.record_file),
                       fault_plan=plan, reject_fields=tuple(f for f in args.reject_fields.split(",") if f),
                       text_prompts_only=args.text_prompts_only, knee=args.knee, load_slowdown=args.load_slowdown)
    log: list[ServedRequest] = []
    if args.uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            print("uvloop not installed; using asyncio's loop", file=sys.stderr)

    async def serve() -> None:
        runner = web.AppRunner(make_app(cfg, log), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        print(f"LISTENING http://127.0.0.1:{port}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # parent closes stdin to stop us
        await runner.cleanup()

    asyncio.run(serve())
    if args.record_file:
        with open(args.record_file, "w") as fh:
            json.dump([{"prompt": e.body.get("prompt", e.body.get("messages")), "max_tokens": e.body.get("max_tokens"),
                        "t_recv": e.t_recv, "t_chunks": e.t_chunks} for e in log], fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
