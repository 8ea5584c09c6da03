"""`openai` backend: benchmarks a running OpenAI-compatible server (vLLM, trtllm-serve, SGLang, ...).

Nothing is built: the server decides the model, precision and batching, so a cell's
`precision` is a free-form label of what the server runs ("server", "bf16", "fp8", ...) and
`model` is the harness's label for it (any name: nothing is loaded here); the name sent in requests is the option `model_name`
(default: the first model the server lists). `load()` checks that the server answers before
any cell runs: an unreachable server fails the whole group with a clear message.

Servers differ in what they accept. Once per cell (the first pass, i.e. the warm-up), one
small request finds out: the extension fields `ignore_eos`/`min_tokens` (exact output
lengths), token-id prompts, `stream_options.include_usage`. An option left at 'auto' is
dropped when the server rejects it; one set to true stops the cell with a message naming the
option. The record says what was sent and what the server accepted (`extra.sent`,
`extra.server_accepts`, `extra.probe`).

A pass replays the workload with streaming (bench/serving/client.py): requests are due at the
workload's arrival times when it has them, else at times drawn from `request_rate` and
`burstiness` (bench/workloads/arrivals.py, vLLM's schedule); at most `max_concurrency` are in
flight (default: the cell's max_batch_size, so the max_batch_sizes axis is a concurrency
sweep; "none" = no limit). Output tokens are the server's usage counts, else the streamed text
re-tokenized with the workload's tokenizer (never chunk counts). Metrics come from the
completed requests; failed ones are counted by kind. The pass is stored as an error, with its
metrics, samples and counts, when more than `max_failed_fraction` failed or the output-length
check fails; `extra.output_len_check` says whether that check applied and why.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.backends.base import Backend, Loaded, RunOutput
from bench.backends.openai.config import (
    OpenAIConfig,
)


class ServerError(RuntimeError):
    """The server cannot be benchmarked (unreachable, not OpenAI-compatible, unknown model)."""


class OpenAIBackend(OpenAIConfig, Backend):
    """The runtime of the openai backend; declarations in OpenAIConfig."""

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
    if status in (401, 403):
        raise ServerError(f"{base_url} refused the request (HTTP {status}): put the API key in the environment "
                          "variable named by the option api_key_env")
    served = None
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
        if model_name in served:
            return model_name
    elif not model_name:
        raise ServerError(f"{base_url}/v1/models answered HTTP {status} ({str(body)[:200]!r}); set the option model_name")
    # No usable model list (absent, or broken: transformers serve 5.17 answers HTTP 500 without a hub
    # cache), or a list without model_name: one plain one-token streamed request decides.
    cfg = ClientConfig(base_url, endpoint, model_name, timeout_s=60, ignore_eos=False, min_tokens=False,
                       include_usage=False, api_key=api_key)
    (timing,), _ = asyncio.run(replay(cfg, [ServeRequest("probe", "Hello", 1, 1)]))
    if timing.error is None:
        return model_name
    if served is not None:
        raise ServerError(f"model_name {model_name!r} is not served by {base_url}: it lists {served}, and a one-token "
                          f"request for it answered {timing.error}")
    raise ServerError(f"{base_url}/v1/models answered HTTP {status}, and a one-token test request failed: {timing.error}")


@dataclass
class RequestPlan:
    """What this backend sends a server, found out once per cell by a test request (`find_request_plan`)."""

    prompt: str  # token_ids | text
    ignore_eos: bool
    min_tokens: bool
    include_usage: bool
    usage_in_stream: bool = False  # the test request's stream carried usage
    done_marker: bool = False  # ... and ended with data: [DONE]
    rejected: dict = field(default_factory=dict)  # field -> the server's answer that refused it
    attempts: list = field(default_factory=list)  # [{"sent": ..., "answer": ...}]

    def sent(self) -> dict:
        return {"prompt": self.prompt, "ignore_eos": self.ignore_eos, "min_tokens": self.min_tokens,
                "stream_options.include_usage": self.include_usage}

    def accepts(self) -> dict:
        """Return, per feature, whether the server took it (None: not tried)."""
        def took(name: str, sent: bool):
            return False if name in self.rejected else (True if sent else None)

        return {"token_id_prompts": took("prompt", self.prompt == "token_ids"),
                "ignore_eos": took("ignore_eos", self.ignore_eos), "min_tokens": took("min_tokens", self.min_tokens),
                "stream_options": took("include_usage", self.include_usage),
                "usage_in_stream": self.usage_in_stream, "done_marker": self.done_marker}

    @property
    def exact_lengths(self) -> bool:
        """True when the server was asked for exactly max_tokens (ignore_eos or min_tokens sent)."""
        return self.ignore_eos or self.min_tokens


# The words by which a server's refusal names each request feature (each feature is also the option that sets it).
REFUSAL_WORDS = {"ignore_eos": ("ignore_eos",), "min_tokens": ("min_tokens",), "include_usage": ("stream_options",),
                 "prompt": ("prompt",)}
UNKNOWN_FIELD_WORDS = ("unexpected field", "extra inputs", "extra fields", "unrecognized", "unknown field", "not permitted")


def refused_features(answer: str, plan: RequestPlan) -> list[str]:
    """Return the features a 4xx answer refuses: those it names, else (an unnamed unknown field) the extensions sent."""
    text = answer.lower()
    sent = {"ignore_eos": plan.ignore_eos, "min_tokens": plan.min_tokens, "include_usage": plan.include_usage,
            "prompt": plan.prompt == "token_ids"}
    named = [f for f, words in REFUSAL_WORDS.items() if sent[f] and any(w in text for w in words)]
    # "prompt" also appears in messages about other fields; trust it only when no other field is named.
    if len(named) > 1 and "prompt" in named:
        named.remove("prompt")
    if named:
        return named
    if any(w in text for w in UNKNOWN_FIELD_WORDS):
        return [f for f in ("ignore_eos", "min_tokens", "include_usage") if sent[f]]
    return []


def find_request_plan(base_url: str, endpoint: str, model: str, api_key: str | None, opts: dict, request,
                      decode, timeout_s: float = 120.0) -> RequestPlan:
    """Return what to send this server, from test requests built on `request`; ServerError naming the option to set."""
    import asyncio

    from bench.serving.client import ClientConfig, ServeRequest, replay

    chat = endpoint == "chat"
    plan = RequestPlan(prompt="text" if chat or opts["prompt"] == "text" else "token_ids",
                       ignore_eos=opts["ignore_eos"] is not False, min_tokens=opts["min_tokens"] is not False,
                       include_usage=opts["include_usage"] is not False)
    max_tokens = max(1, min(int(request.output_len), 4))
    for _ in range(6):  # at most one step per feature, plus the answer
        prompt = decode(request.prompt_ids) if plan.prompt == "text" else list(request.prompt_ids)
        cfg = ClientConfig(base_url, endpoint, model, timeout_s, plan.ignore_eos, plan.min_tokens, plan.include_usage, api_key)
        (timing,), stats = asyncio.run(replay(cfg, [ServeRequest("probe", prompt, request.input_len, max_tokens)]))
        plan.attempts.append({"sent": plan.sent(), "answer": "ok" if timing.error is None else timing.error[:300]})
        if timing.error is None:
            got = stats.received[0]
            plan.usage_in_stream = got.completion_tokens is not None
            plan.done_marker = got.saw_done
            return plan
        where = f"{base_url}{cfg.url[len(base_url):]}"
        if timing.error.startswith(("http_404", "http_405")):
            other = "completions" if chat else "chat"
            raise ServerError(f"{where} answered {timing.error[:200]}: this server has no {endpoint} endpoint; "
                              f"set endpoint = {other!r}")
        if not timing.error.startswith("http_4"):
            raise ServerError(f"{where}: a test request ({max_tokens} tokens) failed: {timing.error}")
        refused = refused_features(timing.error, plan)
        if not refused:
            raise ServerError(f"{where} refused a test request: {timing.error}; sent {plan.sent()}. If it rejects one "
                              "of these, set ignore_eos, min_tokens or include_usage = false, or prompt = 'text'")
        for feature in refused:
            if opts[feature] != "auto":
                wanted = "'text'" if feature == "prompt" else "false"
                raise ServerError(f"{where} refused {feature} ({timing.error[:200]}), which option {feature} = "
                                  f"{opts[feature]!r} requires; set {feature} = {wanted} (or 'auto')")
            plan.rejected[feature] = timing.error[:200]
            if feature == "prompt":
                plan.prompt = "text"
            else:
                setattr(plan, feature, False)
    raise ServerError(f"{base_url}: no test request succeeded after {len(plan.attempts)} tries: {plan.attempts}")


class OpenAILoaded(Loaded):
    def __init__(self, base_url: str, endpoint: str, model: str, api_key: str | None):
        self.base_url, self.endpoint, self.model, self.api_key = base_url, endpoint, model, api_key
        self._plans: dict[tuple, RequestPlan] = {}

    def request_plan(self, opts: dict, max_batch_size: int, request) -> RequestPlan:
        """Return the request plan of a cell (its options and batch size), found out on its first pass (the warm-up)."""
        key = (json.dumps(opts, sort_keys=True, default=str), max_batch_size)
        if key not in self._plans:
            self._plans[key] = find_request_plan(self.base_url, self.endpoint, self.model, self.api_key, opts, request,
                                                 _decoder(opts["tokenizer"]), timeout_s=float(opts["timeout_s"]))
        return self._plans[key]

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        """Replay the requests against the server; return their timings and the client's figures."""
        import asyncio

        from bench.serving.client import ClientConfig, ServeRequest, replay
        from bench.workloads.arrivals import arrival_times

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
        plan = self.request_plan(opts, max_batch_size, requests[0])
        if plan.prompt == "text":
            decode = _decoder(opts["tokenizer"])
            prompts = [decode(r.prompt_ids) for r in requests]
        else:
            prompts = [list(r.prompt_ids) for r in requests]
        conc = opts["max_concurrency"]
        concurrency = max_batch_size if conc == "batch" else None if conc == "none" else int(conc)
        cfg = ClientConfig(self.base_url, self.endpoint, self.model, float(opts["timeout_s"]), plan.ignore_eos,
                           plan.min_tokens, plan.include_usage, self.api_key)
        reqs = [ServeRequest(r.id, p, r.input_len, r.output_len, a)
                for r, p, a in zip(requests, prompts, arrivals, strict=True)]
        timings, stats = asyncio.run(replay(cfg, reqs, concurrency))
        source = count_output_tokens(timings, stats.received, opts)
        extra = pass_extra(timings, stats, opts, plan, source, arrivals, workload_arrivals, concurrency)
        extra.update(server=self.base_url, endpoint=self.endpoint, model_name=self.model, gpus=opts["server_gpus"])
        extra["notes"] = server_notes(self.base_url, plan, timings, extra["metrics"].get("server_input_tokens"))
        return RunOutput(timings, stats.started, max(stats.ended, stats.started + 1e-9), extra)


def _decoder(tokenizer: str):
    from bench.workloads.prompt_text import decoder

    return decoder(tokenizer)


def count_output_tokens(timings, received, opts: dict) -> str:
    """Set each completed request's output_len to the server's count or a re-tokenized count; return the source.

    Never a chunk count: a pass whose counts can be had neither way fails, naming the fix.
    """
    missing = [i for i, (t, got) in enumerate(zip(timings, received, strict=True))
               if t.error is None and got.completion_tokens is None]
    if not missing:
        return "usage"
    fix = ("ask the server for usage: leave include_usage at 'auto' (or true) and, if the server sends usage only "
           "when enabled, enable it there (stream_options.include_usage)")
    if opts["count_tokens"] == "usage":
        raise RuntimeError(f"the server sent no token counts (usage) for {len(missing)} of {len(timings)} requests and "
                           f"count_tokens = 'usage' forbids counting the streamed text; {fix}, or set count_tokens = "
                           "'auto' to count it with the workload's tokenizer")
    from bench.workloads.tokenizers import load_tokenizer

    try:
        tok = load_tokenizer(opts["tokenizer"])
    except Exception as exc:  # BenchInputError, or a tokenizer directory that fails to load here
        raise RuntimeError(f"the server sent no token counts (usage) for {len(missing)} requests, and the streamed "
                           f"text cannot be counted with tokenizer {opts['tokenizer']!r} ({exc}); {fix}, or set "
                           "tokenizer to the workload's tokenizer") from None
    for i in missing:
        timings[i].output_len = len(tok.encode(received[i].text))
    return "tokenizer" if len(missing) == sum(t.error is None for t in timings) else "mixed"


def pass_extra(timings, stats, opts, plan: RequestPlan, source: str, arrivals, workload_arrivals, concurrency) -> dict:
    """Return the record's extra for one pass: figures for `metrics`, what was sent, checks and their verdicts."""
    from bench.metrics import goodput, saturation_metrics, send_lag_metrics
    from bench.serving.client import error_kind
    from bench.workloads.arrivals import offered_rate

    ok = [t for t in timings if t.error is None]
    failed = [t for t in timings if t.error is not None]
    n = len(timings)
    longer = [t for t in ok if t.output_len > t.expected_output_len]
    shorter = [t for t in ok if t.output_len < t.expected_output_len]
    duration = max(stats.ended - stats.started, 1e-9)
    offered = offered_rate(arrivals)
    last_send = max(stats.send_times, default=stats.started) - stats.started
    slo = {"ttft": opts["slo_ttft_ms"], "tpot": opts["slo_tpot_ms"], "e2el": opts["slo_e2el_ms"]}
    kinds = dict(Counter(error_kind(t.error) for t in failed))
    achieved = n / last_send if offered is not None and last_send > 0 else None
    metrics = {
        "offered_request_rate": offered,
        # requests sent per second of sending, over the same window as offered (sends wait for a slot too)
        "achieved_request_rate": achieved,
        "max_concurrency": concurrency,
        "request_goodput": goodput(timings, duration, slo),
        "failed_by_kind": kinds,
        "output_len_longer": len(longer),
        "output_len_shorter": len(shorter),
        **send_lag_metrics(stats.send_lag_s, offered, achieved),
        **(saturation_metrics(timings) if offered is not None else {}),  # a constant-rate pass only
        "client_cpu_ms_per_request": stats.client_cpu_s * 1000 / n if n else None,
    }
    # The prompt as the server counted it (usage.prompt_tokens), beside the workload tokenizer's count
    # that total_input_tokens and every input-token figure use (extra.input_tokens_source).
    received = stats.received
    server_in = [g.prompt_tokens for t, g in zip(timings, received, strict=True) if t.error is None]
    if server_in and all(isinstance(x, int) for x in server_in):
        metrics["server_input_tokens"] = sum(server_in)
    check, error = output_len_verdict(opts["strict_output_len"], plan, source, longer, shorter, len(ok))
    if failed and len(failed) > opts["max_failed_fraction"] * n:
        error = (f"{len(failed)} of {n} requests failed (more than max_failed_fraction={opts['max_failed_fraction']}): "
                 f"{', '.join(f'{k} x{v}' for k, v in sorted(kinds.items()))}; first: {failed[0].request_id}: "
                 f"{failed[0].error}" + (f"; also {error}" if error else ""))
    extra = {
        "metrics": metrics,
        "request_rate": opts["request_rate"],
        "burstiness": opts["burstiness"],
        "arrivals": "workload" if workload_arrivals else ("generated" if offered is not None else "all at once"),
        "sent": plan.sent(),
        "server_accepts": plan.accepts(),
        "probe": plan.attempts,
        "output_tokens_source": source,
        "output_lengths": "requested (exact)" if plan.exact_lengths else "as produced by the server",
        "output_len_check": check,
        "streams_without_done": sum(1 for t, g in zip(timings, received, strict=True) if t.error is None and not g.saw_done),
        "chunks": stats.chunks,
        "prompt_tokens_mismatches": sum(1 for t, g in zip(timings, received, strict=True)
                                        if g.prompt_tokens is not None and g.prompt_tokens != t.input_len),
        "input_tokens_source": "workload",  # total_input_tokens: the workload tokenizer's count, not the server's
        "unknown_events": stats.unknown_events,
        "slo_ms": {k: v for k, v in slo.items() if v},
        "request_errors": {"by_kind": kinds, "first": [[t.request_id, t.error] for t in failed[:5]]},
        "output_len_mismatch_ids": [t.request_id for t in (longer + shorter)[:20]],
    }
    if error:
        extra["pass_error"] = error  # the worker stores the pass as an error, keeping its metrics
    return extra


def server_notes(server: str, plan: RequestPlan, timings, server_input_tokens: int | None) -> list[str]:
    """Return what a reader must know about how the server treated the pass (the console and the tables say it).

    The same server and workload give the same sentences on every pass, so each is said once.
    """
    notes = []
    if not plan.exact_lengths:
        rejected = [f for f in ("ignore_eos", "min_tokens") if f in plan.rejected]
        how = (f"refused length control (it rejected {' and '.join(rejected)})" if rejected
               else "was not asked for exact lengths (ignore_eos and min_tokens are off)")
        notes.append(f"server {server} {how}: output lengths are what it produced, not the workload's, and are not "
                     "checked; figures of different servers then compare different outputs")
    ok_in = sum(t.input_len for t in timings if t.error is None)
    if server_input_tokens is not None and ok_in and server_input_tokens != ok_in:
        notes.append(f"server {server} counted the prompts as {server_input_tokens} tokens, the workload as {ok_in} "
                     f"({(server_input_tokens / ok_in - 1) * 100:+.1f}%; usage.prompt_tokens): input-token figures "
                     "use the workload's count (metric server_input_tokens has the server's)")
    return notes


def output_len_verdict(strict, plan: RequestPlan, source: str, longer: list, shorter: list, completed: int
                       ) -> tuple[str, str | None]:
    """Return (what the output-length check did, the pass's error or None) under strict_output_len = strict."""
    wrong = longer + shorter
    if not plan.exact_lengths:
        rejected = [f for f in ("ignore_eos", "min_tokens") if f in plan.rejected]
        why = (f"the server cannot be asked for exact output lengths (it rejected {' and '.join(rejected)})" if rejected
               else "ignore_eos and min_tokens are off (options)")
    elif source != "usage":
        why = "output tokens were counted by re-tokenizing the streamed text (the server sent no usage), which is approximate"
    else:
        why = None
    counted = f"{len(longer)} longer and {len(shorter)} shorter than requested, of {completed}"
    if why is not None:
        if strict is True:
            return f"failed: cannot be checked: {why}", (
                f"strict_output_len = true, but {why}; set strict_output_len = 'auto' to measure with the lengths "
                "the server produces (the record then says so)")
        return f"not applied: {why}; measured with the lengths produced ({counted})", None
    if not wrong:
        return f"passed: all {completed} completed requests produced the requested number of tokens", None
    first = wrong[0]
    detail = f"{counted}; first: {first.request_id} gave {first.output_len} of {first.expected_output_len}"
    if strict is False:
        return f"counted, not enforced (strict_output_len = false): {detail}", None
    return f"failed: {detail}", (f"the server was asked for exact output lengths (ignore_eos/min_tokens) but produced "
                                 f"other lengths: {detail}; set strict_output_len = false to keep such passes")
