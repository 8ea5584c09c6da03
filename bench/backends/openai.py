"""`openai` backend: benchmarks a running OpenAI-compatible server (vLLM, trtllm-serve, SGLang, ...).

Nothing is built: the server decides the model, precision and batching, so a cell's
`precision` is a free-form label of what the server runs ("server", "bf16", "fp8", ...) and
`model` is the harness's label for it (any name: nothing is loaded here); the name sent in requests is the option `model_name`
(default: the first model the server lists). `load()` checks that the server answers before
any cell runs: an unreachable server fails the whole group with a clear message.

A pass replays the workload with streaming (bench/serving/client.py): requests are due at the
workload's arrival times when it has them, else at times drawn from `request_rate` and
`burstiness` (bench/serving/load.py); at most `max_concurrency` are in flight (default: the
cell's max_batch_size, so the max_batch_sizes axis is a concurrency sweep; "none" = no limit).
Failed requests and output lengths that differ from max_tokens are counted in the metrics and
the pass stays ok (`tolerate_request_errors`) unless more than `max_failed_fraction` failed,
or `strict_output_len` is set and a length differs.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from bench.backends.base import Backend, Loaded, Option, RunOutput
from bench.errors import BenchInputError

BOOL = (True, False)
PRECISION_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")


class ServerError(RuntimeError):
    """The server cannot be benchmarked (unreachable, not OpenAI-compatible, unknown model)."""


class OpenAIBackend(Backend):
    name = "openai"
    precisions = ("server",)  # canonical label; any label matching PRECISION_RE is accepted
    tolerate_request_errors = True
    paces_requests = True  # arrivals (request_rate, burstiness) and concurrency are what it measures under
    local_model = False  # `model` labels the served model; the harness never loads it
    options = {
        "base_url": Option("http://127.0.0.1:8000", kind=str, help="server address scheme://host:port (a trailing /v1 is dropped)"),
        "endpoint": Option("completions", ("completions", "chat"), help="/v1/completions or /v1/chat/completions"),
        "model_name": Option("", kind=str, help="model name sent in requests; '' = the first one GET /v1/models lists"),
        "prompt": Option("auto", ("auto", "token_ids", "text"), in_build_key=False,
                         help="token ids (completions only) or decoded text; auto: ids for completions, text for chat"),
        "tokenizer": Option("qwen-7b-chat", kind=str, in_build_key=False, help="decodes text prompts; must be the workload's"),
        "request_rate": Option("inf", kind=(int, float, str), in_build_key=False,
                               help="mean requests/s of generated arrivals, or 'inf' (all at once / the workload's arrivals)"),
        "burstiness": Option(1.0, kind=(int, float), in_build_key=False, help="gamma shape of the gaps; 1 = Poisson"),
        "seed": Option(0, kind=int, in_build_key=False, help="seed of generated arrivals"),
        "max_concurrency": Option("batch", kind=(int, str), in_build_key=False,
                                  help="requests in flight at most: 'batch' (the cell's max_batch_size), 'none' or N"),
        "timeout_s": Option(600.0, kind=(int, float), in_build_key=False, help="per request, send to end of stream"),
        "ignore_eos": Option(True, BOOL, in_build_key=False, help="send ignore_eos (vLLM/SGLang/TensorRT-LLM extension)"),
        "min_tokens": Option(True, BOOL, in_build_key=False, help="send min_tokens = max_tokens (vLLM/TensorRT-LLM extension)"),
        "include_usage": Option(True, BOOL, in_build_key=False, help="ask for the server's token counts (stream_options)"),
        "max_failed_fraction": Option(0.05, kind=(int, float), in_build_key=False,
                                      help="a pass with more failed requests than this fraction is an error"),
        "strict_output_len": Option(False, BOOL, in_build_key=False, help="an output length != max_tokens makes the pass an error"),
        "slo_ttft_ms": Option(0.0, kind=(int, float), in_build_key=False, help="goodput SLO on TTFT (0 = none)"),
        "slo_tpot_ms": Option(0.0, kind=(int, float), in_build_key=False, help="goodput SLO on TPOT (0 = none)"),
        "slo_e2el_ms": Option(0.0, kind=(int, float), in_build_key=False, help="goodput SLO on E2E latency (0 = none)"),
        "api_key_env": Option("OPENAI_API_KEY", kind=str, in_build_key=False,
                              help="environment variable holding a bearer token, sent when set"),
    }

    @classmethod
    def normalize_options(cls, given: dict) -> dict:
        """Return the full, checked option dict; BenchInputError naming the bad option."""
        opts = super().normalize_options(given)
        opts["base_url"] = normalize_base_url(opts["base_url"])
        rate = opts["request_rate"]
        if isinstance(rate, float) and math.isinf(rate) and rate > 0:
            opts["request_rate"] = rate = "inf"  # JSON has no infinity: one spelling in cell ids
        if isinstance(rate, str) and rate != "inf" or isinstance(rate, bool) or (not isinstance(rate, str) and not rate > 0):
            raise BenchInputError(f"option request_rate={rate!r} for backend 'openai' must be a positive number or 'inf'")
        conc = opts["max_concurrency"]
        if (isinstance(conc, str) and conc not in ("batch", "none")) or isinstance(conc, bool) or (isinstance(conc, int) and conc <= 0):
            raise BenchInputError(f"option max_concurrency={conc!r} for backend 'openai' must be 'batch', 'none' or a positive integer")
        for key in ("burstiness", "timeout_s"):
            if not opts[key] > 0:
                raise BenchInputError(f"option {key}={opts[key]!r} for backend 'openai' must be positive")
        if not 0 <= opts["max_failed_fraction"] <= 1:
            raise BenchInputError(f"option max_failed_fraction={opts['max_failed_fraction']!r} must be between 0 and 1")
        for key in ("slo_ttft_ms", "slo_tpot_ms", "slo_e2el_ms"):
            if opts[key] < 0:
                raise BenchInputError(f"option {key}={opts[key]!r} must be >= 0 (0 = no SLO)")
        return opts

    @classmethod
    def validate(cls, cell) -> None:
        """Raise BenchInputError for a precision label or prompt setting this backend cannot use."""
        if not isinstance(cell.precision, str) or not PRECISION_RE.match(cell.precision):
            raise BenchInputError(
                f"precision {cell.precision!r} for backend 'openai' must be a label of letters, digits, '.', '_', '-' "
                "(the server decides the precision; e.g. 'server', 'bf16', 'fp8')"
            )
        opts = cell.options_dict
        mode = prompt_mode(opts)
        if opts.get("endpoint") == "chat" and mode == "token_ids":
            raise BenchInputError("backend 'openai': the chat endpoint takes text; set prompt = 'text' (or 'auto')")
        if mode == "text" and opts.get("tokenizer") != cell.workload.tokenizer:
            raise BenchInputError(
                f"backend 'openai': text prompts are decoded with option tokenizer={opts.get('tokenizer')!r} but workload "
                f"{cell.workload.name!r} was tokenized with {cell.workload.tokenizer!r}; set tokenizer = {cell.workload.tokenizer!r}"
            )

    def build(self, key, engines_dir: Path) -> dict:
        """Return the server's address: nothing is built for a running server."""
        opts = dict(key.options)
        return {"options": opts, "build_info": {"server": opts.get("base_url"), "endpoint": opts.get("endpoint")}}

    def load(self, artifact: dict) -> OpenAILoaded:
        """Return a client for the server after checking it answers; ServerError if it does not."""
        opts = self.normalize_options(artifact["options"])
        api_key = os.environ.get(opts["api_key_env"]) or None
        model = probe_server(opts["base_url"], opts["model_name"], opts["endpoint"], api_key)
        return OpenAILoaded(opts["base_url"], opts["endpoint"], model, api_key)


def normalize_base_url(url: str) -> str:
    """Return scheme://host[:port][/prefix] without a trailing '/' or '/v1'; BenchInputError if malformed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BenchInputError(
            f"option base_url={url!r} for backend 'openai' is not a server address: use http://HOST:PORT "
            "(for example http://127.0.0.1:8000 for `vllm serve`)"
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise BenchInputError(f"option base_url={url!r} for backend 'openai' has a bad port: {exc}") from None
    out = url.rstrip("/")
    return out[: -len("/v1")] if out.endswith("/v1") else out


def prompt_mode(opts: dict) -> str:
    """Return 'token_ids' or 'text': what the prompt of each request is sent as."""
    mode = opts.get("prompt", "auto")
    if mode == "auto":
        return "text" if opts.get("endpoint") == "chat" else "token_ids"
    return mode


def probe_server(base_url: str, model_name: str, endpoint: str, api_key: str | None = None) -> str:
    """Return the model name to send after checking the server answers; ServerError if it cannot be used."""
    import asyncio

    from bench.serving.client import ClientConfig, ServeRequest, list_models, replay

    fix = ("start the server first (e.g. `vllm serve MODEL --port 8000`, `trtllm-serve MODEL --port 8000`) "
           "or fix the openai backend's base_url option")
    try:
        status, body = asyncio.run(list_models(base_url, api_key=api_key))
    except Exception as exc:  # connection refused, DNS, timeout: aiohttp raises several types
        raise ServerError(f"cannot reach the OpenAI-compatible server at {base_url}: {type(exc).__name__}: {exc}; {fix}") from None
    if status == 200:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise ServerError(f"{base_url}/v1/models did not return an OpenAI model list ({str(body)[:200]!r}): "
                              "is base_url an OpenAI-compatible server?")
        served = [m["id"] for m in data]
        if not model_name:
            if not served:
                raise ServerError(f"{base_url}/v1/models lists no model; set the option model_name")
            return served[0]
        if model_name not in served:
            raise ServerError(f"model_name {model_name!r} is not served by {base_url}: it serves {served}")
        return model_name
    if status in (401, 403):
        raise ServerError(f"{base_url} refused the request (HTTP {status}): put the API key in the environment "
                          "variable named by the option api_key_env")
    if status not in (404, 405) or not model_name:
        raise ServerError(f"{base_url}/v1/models answered HTTP {status} ({str(body)[:200]!r}); "
                          + ("set the option model_name" if status in (404, 405) else fix))
    # No model list (some frontends): one tiny streamed request proves the endpoint works.
    cfg = ClientConfig(base_url, endpoint, model_name, timeout_s=60, ignore_eos=False, min_tokens=False, api_key=api_key)
    (timing,), _ = asyncio.run(replay(cfg, [ServeRequest("probe", "Hello", 1, 1)]))
    if timing.error:
        raise ServerError(f"{base_url}: a one-token test request failed: {timing.error}")
    return model_name


class OpenAILoaded(Loaded):
    def __init__(self, base_url: str, endpoint: str, model: str, api_key: str | None):
        self.base_url, self.endpoint, self.model, self.api_key = base_url, endpoint, model, api_key

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        """Replay the requests against the server; return their timings and the client's figures."""
        import asyncio

        from bench.results.metrics import goodput
        from bench.serving.client import ClientConfig, ServeRequest, replay
        from bench.serving.load import arrival_times

        opts = OpenAIBackend.normalize_options(options)
        requests = list(requests)
        rate = math.inf if opts["request_rate"] == "inf" else float(opts["request_rate"])
        workload_arrivals = any(r.arrival_s for r in requests)
        if workload_arrivals and not math.isinf(rate):
            raise ValueError("the workload carries its own arrival times; set request_rate = 'inf' to replay them, "
                             "or use a workload without arrivals to generate them from request_rate")
        if workload_arrivals:
            arrivals = [r.arrival_s for r in requests]
        else:
            arrivals = arrival_times(len(requests), rate, opts["burstiness"], opts["seed"])
        if prompt_mode(opts) == "text":
            from bench.workloads.prompt_text import decoder

            decode = decoder(opts["tokenizer"])
            prompts = [decode(r.prompt_ids) for r in requests]
        else:
            prompts = [list(r.prompt_ids) for r in requests]
        conc = opts["max_concurrency"]
        concurrency = max_batch_size if conc == "batch" else None if conc == "none" else int(conc)
        cfg = ClientConfig(self.base_url, self.endpoint, self.model, float(opts["timeout_s"]), opts["ignore_eos"],
                           opts["min_tokens"], opts["include_usage"], self.api_key)
        reqs = [ServeRequest(r.id, p, r.input_len, r.output_len, a)
                for r, p, a in zip(requests, prompts, arrivals, strict=True)]
        timings, stats = asyncio.run(replay(cfg, reqs, concurrency))
        return RunOutput(timings, stats.started, max(stats.ended, stats.started + 1e-9),
                         self._extra(timings, stats, opts, rate, arrivals, workload_arrivals, concurrency, goodput))

    def _extra(self, timings, stats, opts, rate, arrivals, workload_arrivals, concurrency, goodput) -> dict:
        ok = [t for t in timings if t.error is None]
        failed = [t for t in timings if t.error is not None]
        longer = [t for t in ok if t.output_len > t.expected_output_len]
        shorter = [t for t in ok if t.output_len < t.expected_output_len]
        n = len(timings)
        if failed and len(failed) > opts["max_failed_fraction"] * n:
            raise RuntimeError(
                f"{len(failed)} of {n} requests failed (more than max_failed_fraction={opts['max_failed_fraction']}); "
                f"first: {failed[0].request_id}: {failed[0].error}"
            )
        if opts["strict_output_len"] and (longer or shorter):
            t = (longer or shorter)[0]
            raise RuntimeError(f"{len(longer)} output(s) longer and {len(shorter)} shorter than max_tokens "
                               f"(strict_output_len); first: {t.request_id} gave {t.output_len} of {t.expected_output_len}")
        sends = stats.send_times
        span = sends[-1] - sends[0] if len(sends) > 1 else 0.0
        duration = max(stats.ended - stats.started, 1e-9)
        requested = None if math.isinf(rate) else rate
        if workload_arrivals and arrivals[-1] > 0:
            requested = (n - 1) / max(arrivals)
        slo = {"ttft": opts["slo_ttft_ms"], "tpot": opts["slo_tpot_ms"], "e2el": opts["slo_e2el_ms"]}
        lags = sorted(stats.send_lag_s)
        metrics = {
            "requested_request_rate": requested,
            "achieved_request_rate": (n - 1) / span if span > 0 else None,
            "max_concurrency": concurrency,
            "request_goodput": goodput(timings, duration, slo),
            "output_len_longer": len(longer),
            "output_len_shorter": len(shorter),
            "send_lag_p99_ms": lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000 if lags else None,
            "client_cpu_ms_per_request": stats.client_cpu_s * 1000 / n if n else None,
        }
        if stats.usage_counted == len(ok):
            source = "usage"
        else:
            source = "chunks" if stats.usage_counted == 0 else "mixed"
        kinds = Counter(t.error.split(":")[0] for t in failed)
        return {
            "metrics": metrics,
            "server": self.base_url,
            "endpoint": self.endpoint,
            "model_name": self.model,
            "request_rate": opts["request_rate"],
            "arrivals": "workload" if workload_arrivals else ("generated" if not math.isinf(rate) else "all at once"),
            "output_tokens_source": source,
            "chunks": stats.chunks,
            "prompt_tokens_mismatches": stats.prompt_tokens_mismatches,
            "unknown_events": stats.unknown_events,
            "slo_ms": {k: v for k, v in slo.items() if v},
            "request_errors": {"by_kind": dict(kinds), "first": [[t.request_id, t.error] for t in failed[:5]]},
            "output_len_mismatch_ids": [t.request_id for t in (longer + shorter)[:20]],
        }
