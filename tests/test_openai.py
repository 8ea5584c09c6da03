"""The openai (serving) backend against a paced local streaming server on 127.0.0.1."""

import asyncio
import socket
import statistics

import pytest

pytest.importorskip("aiohttp")

from bench.backends.openai.backend import OpenAIBackend, ServerError  # noqa: E402
from bench.backends.openai.config import normalize_base_url  # noqa: E402
from bench.errors import BenchInputError  # noqa: E402
from bench.metrics import goodput  # noqa: E402
from bench.serving.client import ClientConfig, ServeRequest, error_kind, replay  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402
from bench.serving.sse import SSEDecoder  # noqa: E402
from bench.workloads.arrivals import arrival_times  # noqa: E402
from bench.workloads.request import (
    Request,  # noqa: E402
    RequestTiming,  # noqa: E402
)

# Loose bound for a 2-core machine shared with other jobs; scripts/bench_openai_client.py
# measures the real TTFT error (target < 1 ms) on an idle client.
SLACK_S = 0.010


def free_port() -> int:
    """Return a loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cfg, reqs, conc=None):
    return asyncio.run(replay(cfg, reqs, conc))


def reqs(n, max_tokens=6, prompt=(1, 2, 3)):
    return [ServeRequest(f"r{i}", list(prompt), len(prompt), max_tokens) for i in range(n)]


def test_sse_decoder_handles_split_crlf_comments_and_multiline():
    d = SSEDecoder()
    assert d.feed(b"data: {\"a\"") == []
    assert d.feed(b": 1}\n\ndata: [DO") == [b'{"a": 1}']
    assert d.feed(b"NE]\r\n\r\n: keep-alive\n\nevent: x\ndata: 1\ndata:2\n\n") == [b"[DONE]", b"1\n2"]
    assert d.pending == b""
    d.feed(b"data: cut")
    assert d.pending == b"data: cut"


def test_ttft_and_itl_match_the_servers_pace():
    # prompt [i] tags request i, so each timing is matched to the server's log of it
    with TestServer(ttft_s=0.040, itl_s=0.010, record=True) as srv:
        cfg = ClientConfig(srv.base_url, model="test-model")
        timings, stats = run(cfg, [ServeRequest(f"r{i}", [i], 1, 6) for i in range(6)], conc=2)
        log = {e.body["prompt"][0]: e for e in srv.log}
    assert [t.error for t in timings] == [None] * 6
    assert [g.completion_tokens for g in stats.received] == [6] * 6 and stats.chunks == 36
    assert all(g.saw_done and g.text == " tok" * 6 for g in stats.received)
    ttft_errors = []
    for i, t in enumerate(timings):
        e = log[i]
        assert t.output_len == 6 and len(t.token_times) == 6
        ttft = t.token_times[0] - t.start
        server_ttft = e.t_chunks[0] - e.t_recv
        assert ttft >= server_ttft >= 0.040
        # the first two open their connection (part of a client's real TTFT); the rest reuse one
        assert ttft - server_ttft < (2 * SLACK_S if i >= 2 else 5 * SLACK_S)
        if i >= 2:
            ttft_errors.append(ttft - server_ttft)
        for got, want in zip(
            [b - a for a, b in zip(t.token_times, t.token_times[1:], strict=False)],
            [b - a for a, b in zip(e.t_chunks, e.t_chunks[1:], strict=False)], strict=False,
        ):
            assert want >= 0.010 and abs(got - want) < 2 * SLACK_S
        assert t.end >= t.token_times[-1]
    assert statistics.median(ttft_errors) < SLACK_S


def test_chat_role_chunk_and_multi_token_chunks():
    # 7 tokens, 3 per chunk -> chunks of 3, 3, 1. The role rides on the first content chunk.
    with TestServer(tokens_per_chunk=3, record=True) as srv:
        cfg = ClientConfig(srv.base_url, endpoint="chat", model="test-model")
        (t,), _ = run(cfg, [ServeRequest("c", "hello there", 2, 7)])
        assert srv.log[0].body["messages"][0]["content"] == "hello there"
        assert srv.log[0].body["ignore_eos"] is True and srv.log[0].body["min_tokens"] == 7
        assert t.error is None and t.output_len == 7 and len(t.token_times) == 3  # usage count, 3 ITL events
        # without usage the client leaves the count to its caller: no usage, the text to re-tokenize
        (t2,), st = run(ClientConfig(srv.base_url, endpoint="chat", model="test-model", include_usage=False),
                        [ServeRequest("c", "hi", 1, 7)])
        assert t2.error is None and st.received[0].completion_tokens is None and st.received[0].text == " tok" * 7


@pytest.mark.parametrize(
    ("mode", "kind", "expect"),
    [
        ("http500", "http_500", "injected failure"),
        ("bad_json", "bad_response", "not a server-sent-event stream"),
        ("cut", "cut", ""),
        ("stream_error", "stream_error", "injected failure"),
        ("hang", "timeout", "timeout_s=0.5"),
    ],
)
def test_server_failures_are_per_request_errors_of_a_kind(mode, kind, expect):
    with TestServer(mode=mode, cut_after=2) as srv:
        timings, _ = run(ClientConfig(srv.base_url, model="test-model", timeout_s=0.5), reqs(3))
    assert len(timings) == 3
    assert all(t.error and error_kind(t.error) == kind and expect in t.error for t in timings), [t.error for t in timings]


def test_a_stream_ending_cleanly_without_done_is_a_success():
    # transformers serve ends its stream after the usage chunk; vLLM and guidellm count that as a success
    with TestServer(mode="no_done", ttft_s=0.002, itl_s=0.002) as srv:
        timings, stats = run(ClientConfig(srv.base_url, model="test-model"), reqs(3, max_tokens=5))
    assert [t.error for t in timings] == [None] * 3 and [t.output_len for t in timings] == [5] * 3
    assert not any(g.saw_done for g in stats.received)
    # E2E ends at the last chunk with choices, as vLLM's latency does
    assert all(t.end == t.token_times[-1] for t in timings)


def test_unreachable_server_is_a_per_request_error_and_a_clear_load_error():
    url = f"http://127.0.0.1:{free_port()}"
    timings, _ = run(ClientConfig(url, model="m", timeout_s=2), reqs(2))
    assert all(error_kind(t.error) == "connection" for t in timings)
    with pytest.raises(ServerError, match="cannot reach the OpenAI-compatible server"):
        OpenAIBackend().load({"options": {"base_url": url}})


def test_load_checks_the_model_list():
    with TestServer(models=("a", "b")) as srv:
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url + "/v1/"}}).model == "a"
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "b"}}).model == "b"
        with pytest.raises(ServerError, match=r"'c' is not served .*\['a', 'b'\], and a one-token request .*http_404"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "c"}})
    with TestServer(models_status=404) as srv:  # no /v1/models: a one-token request proves it works
        with pytest.raises(ServerError, match="set the option model_name"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url}})
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "x"}}).model == "x"
    with TestServer(models_status=500) as srv:  # transformers serve 5.17 without a hub cache: a broken model list
        with pytest.raises(ServerError, match="answered HTTP 500 .*set the option model_name"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url}})
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "/models/x"}}).model == "/models/x"
    with TestServer(models_status=404, mode="bad_json") as srv:
        with pytest.raises(ServerError, match="test request failed"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "x"}})


def workload_requests(n, out=5):
    return [Request(f"q{i}", (10, 11, 12, 13), out) for i in range(n)]


def load(srv, **options):
    return OpenAIBackend().load({"options": {"base_url": srv.base_url, **options}})


def test_backend_checks_output_lengths_when_the_server_was_asked_for_them():
    with TestServer(extra_tokens=2) as srv:
        loaded = load(srv)
        out = loaded.run(workload_requests(4), 2, {})
        assert all(t.error is None and t.output_len == 7 for t in out.timings)
        m = out.extra["metrics"]
        assert m["output_len_longer"] == 4 and out.extra["output_len_mismatch_ids"][0] == "q0"
        # asked with ignore_eos/min_tokens and counted by the server: a different length fails the pass
        assert out.extra["output_lengths"] == "requested (exact)" and out.extra["output_len_check"].startswith("failed")
        assert "asked for exact output lengths" in out.extra["pass_error"] and "q0 gave 7 of 5" in out.extra["pass_error"]
        kept = loaded.run(workload_requests(4), 2, {"strict_output_len": False})
        assert "pass_error" not in kept.extra and kept.extra["output_len_check"].startswith("counted, not enforced")
    with TestServer() as srv:
        out = load(srv).run(workload_requests(2), 2, {})
        assert "pass_error" not in out.extra and out.extra["output_len_check"].startswith("passed")


def test_a_server_that_rejects_the_extension_fields_is_measured_with_its_lengths():
    # transformers serve: HTTP 422 "Unexpected fields in the request: {'ignore_eos', 'min_tokens'}"
    with TestServer(reject_fields=("ignore_eos", "min_tokens"), extra_tokens=-1, record=True) as srv:
        out = load(srv).run(workload_requests(3), 2, {})
        sent = [e.body for e in srv.log]
    assert out.extra["sent"] == {"prompt": "token_ids", "ignore_eos": False, "min_tokens": False,
                                 "stream_options.include_usage": True}
    assert out.extra["server_accepts"]["ignore_eos"] is False and out.extra["server_accepts"]["min_tokens"] is False
    assert [a["answer"][:8] for a in out.extra["probe"]] == ["http_422", "ok"]
    assert all("ignore_eos" not in b for b in sent[1:])  # only the first test request carried them
    assert out.extra["output_lengths"] == "as produced by the server"
    check = out.extra["output_len_check"]
    assert check.startswith("not applied: the server cannot be asked for exact output lengths (it rejected ignore_eos "
                            "and min_tokens)") and "0 longer and 3 shorter" in check
    assert "pass_error" not in out.extra and [t.output_len for t in out.timings] == [4, 4, 4]
    with TestServer(reject_fields=("ignore_eos", "min_tokens")) as srv:
        with pytest.raises(ServerError, match="set ignore_eos = false"):
            load(srv).run(workload_requests(1), 1, {"ignore_eos": True})
        out = load(srv).run(workload_requests(1), 1, {"strict_output_len": True})
        assert "strict_output_len = true, but the server cannot be asked" in out.extra["pass_error"]


def test_a_server_that_takes_only_text_prompts_gets_text():
    # transformers serve: HTTP 400 "prompt must be a string." for token ids
    with TestServer(text_prompts_only=True, record=True) as srv:
        out = load(srv).run(workload_requests(2), 2, {})
        prompts = [e.body["prompt"] for e in srv.log]
        with pytest.raises(ServerError, match="set prompt = 'text'"):
            load(srv).run(workload_requests(1), 1, {"prompt": "token_ids"})
    assert out.extra["sent"]["prompt"] == "text" and out.extra["server_accepts"]["token_id_prompts"] is False
    assert isinstance(prompts[0], list) and all(isinstance(p, str) for p in prompts[1:])
    assert all(t.error is None for t in out.timings)


def test_without_usage_output_tokens_are_re_tokenized_never_chunk_counts():
    # 4 tokens per chunk and no usage: 16 chunks must not read as 16 tokens (issue 20: TPOT 4x too high)
    with TestServer(tokens_per_chunk=4, usage=False) as srv:
        out = load(srv).run(workload_requests(3, out=64), 3, {})
        assert out.extra["chunks"] == 3 * 16 and out.extra["output_tokens_source"] == "tokenizer"
        assert [t.output_len for t in out.timings] == [64] * 3 and [len(t.token_times) for t in out.timings] == [16] * 3
        assert out.extra["server_accepts"]["usage_in_stream"] is False
        assert out.extra["output_len_check"].startswith("not applied: output tokens were counted by re-tokenizing")
        with pytest.raises(RuntimeError, match="include_usage"):
            load(srv).run(workload_requests(1), 1, {"count_tokens": "usage"})


def test_fault_server_failures_are_counted_by_kind_and_metrics_come_from_the_rest():
    plan = ("ok", "http500", "ok", "cut", "ok", "stream_error", "ok", "short", "ok", "no_done")
    # the first POST is the test request (ok); then each workload request takes the next fault in turn
    with TestServer(fault_plan=("ok", *plan), cut_after=2) as srv:
        loaded = load(srv)
        out = loaded.run(workload_requests(10), 10, {"strict_output_len": False})
    m = out.extra["metrics"]
    assert m["failed_by_kind"] == {"http_500": 1, "cut": 1, "stream_error": 1}
    assert out.extra["request_errors"]["by_kind"] == m["failed_by_kind"] and m["output_len_shorter"] == 1
    assert out.extra["streams_without_done"] == 1
    # 3 of 10 failed, more than max_failed_fraction = 0.05: an error that keeps its figures
    assert out.extra["pass_error"].startswith("3 of 10 requests failed (more than max_failed_fraction=0.05): "
                                              "cut x1, http_500 x1, stream_error x1")
    ok = [t for t in out.timings if t.error is None]
    assert len(ok) == 7 and all(t.output_len in (4, 5) for t in ok)


def test_backend_run_rate_concurrency_goodput_and_failure_fraction():
    with TestServer(ttft_s=0.005, itl_s=0.002) as srv:
        loaded = load(srv)
        out = loaded.run(workload_requests(20), 4, {"request_rate": 200.0, "slo_ttft_ms": 1000, "seed": 3})
        m = out.extra["metrics"]
        assert m["offered_request_rate"] == pytest.approx(200.0) and m["max_concurrency"] == 4
        assert 0 < m["achieved_request_rate"] <= 200.0 * 1.01 and m["client_cpu_ms_per_request"] > 0
        assert m["request_goodput"] == pytest.approx(20 / (out.ended - out.started))
        assert out.extra["arrivals"] == "generated" and out.extra["output_tokens_source"] == "usage"
        # requests sent no earlier than their arrival on vLLM's schedule
        due = arrival_times(20, 200.0, 1.0, 3)
        for t, a in zip(out.timings, due, strict=True):
            assert t.start - out.started >= a - 1e-6
        out = loaded.run(workload_requests(3), 1, {"max_concurrency": "none", "slo_ttft_ms": 0.001})
        assert out.extra["metrics"]["request_goodput"] == 0 and out.extra["metrics"]["offered_request_rate"] is None
    with TestServer(fault_plan=("ok", "http500")) as srv:  # the test request passes; every other one fails
        loaded = load(srv)
        out = loaded.run(workload_requests(3), 1, {})
        assert out.extra["pass_error"].startswith("2 of 3 requests failed")
        out = loaded.run(workload_requests(3), 1, {"max_failed_fraction": 1.0})  # another cell: its own test request
        assert "pass_error" not in out.extra and out.extra["metrics"]["failed_by_kind"] == {"http_500": 2}


def test_goodput_definition():
    def t(ttft, e2e, n, err=None):
        return RequestTiming("x", 1, n, n, 0.0, [ttft] + [e2e] * (n - 1), e2e, error=err)

    ts = [t(0.1, 1.1, 11), t(0.3, 0.8, 6), t(0.1, 0.1, 1), t(0.0, 0.1, 2, err="boom")]
    # TPOT: 100 ms, 100 ms, 0 (one token)
    assert goodput(ts, 2.0, {"ttft": 200}) == 1.0  # requests 1 and 3
    assert goodput(ts, 2.0, {"ttft": 500, "tpot": 100}) == 1.5
    assert goodput(ts, 2.0, {"e2el": 900, "tpot": 0}) == 1.0  # a 0 bound is no SLO
    assert goodput(ts, 2.0, {"ttft": 0}) is None
    with pytest.raises(ValueError, match="unknown SLO"):
        goodput(ts, 1.0, {"itl": 5})


def test_option_validation_is_input_error(tiny_sharegpt):
    from bench.spec.matrix import parse_matrix

    def m(options, **over):
        data = {"backends": ["openai"], "model": "qwen-tiny", "precisions": ["fp8"], "max_batch_sizes": [4],
                "workloads": ["w"], "device": "cpu",
                "workload": {"w": {"num_requests": 4, "path": str(tiny_sharegpt)}}, "options": options}
        data.update(over)
        return parse_matrix(data)

    cells = m({"request_rate": [1, 2.5, float("inf")]}).cells
    assert [c.options_dict["request_rate"] for c in cells] == [1, 2.5, "inf"]
    for bad, match in [
        ({"base_url": "localhost:8000"}, "not a server address"),
        ({"base_url": "http://127.0.0.1:99999"}, "bad port"),
        ({"request_rate": "fast"}, "request_rate"),
        ({"request_rate": 0}, "request_rate"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"endpoint": "chat", "prompt": "token_ids"}, "chat endpoint takes text"),
        ({"endpoint": "chat", "tokenizer": "/nope"}, "set tokenizer = 'qwen-7b-chat'"),
        ({"tokenizer": "/nope"}, "output token counts need; set tokenizer = 'qwen-7b-chat'"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
        ({"count_tokens": "chunks"}, "count_tokens"),
        ({"slo_ttft_ms": -1}, "slo_ttft_ms"),
    ]:
        with pytest.raises(BenchInputError, match=match):
            m(bad)
    with pytest.raises(BenchInputError, match="precision 'bf 16'"):
        m({}, precisions=["bf 16"])
    assert normalize_base_url("https://h.example:8443/v1/") == "https://h.example:8443"


def test_served_model_needs_no_local_config():
    """`model` only labels a served model: any name is valid for the openai backend, not for hf."""
    from bench.errors import BenchInputError
    from bench.spec.matrix import parse_matrix

    base = {"backends": ["openai"], "model": "Qwen/Qwen2-7B-Instruct", "precisions": ["server"],
            "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu",
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}}
    assert parse_matrix(base).cells[0].model == "Qwen/Qwen2-7B-Instruct"
    with pytest.raises(BenchInputError, match="unknown model"):
        parse_matrix({**base, "backends": ["openai", "hf"], "precisions": ["server", "bf16"]})


def test_which_features_a_refusal_names():
    from bench.backends.openai.backend import RequestPlan, refused_features

    plan = RequestPlan(prompt="token_ids", ignore_eos=True, min_tokens=True, include_usage=True)
    # transformers serve; a pydantic server that forbids extras without naming them; vLLM's prompt length error
    assert refused_features("http_422: Unexpected fields in the request: {'min_tokens', 'ignore_eos'}", plan) == [
        "ignore_eos", "min_tokens"]
    assert refused_features("http_400: prompt must be a string.", plan) == ["prompt"]
    assert refused_features("http_422: Extra inputs are not permitted", plan) == ["ignore_eos", "min_tokens",
                                                                                   "include_usage"]
    assert refused_features("http_400: stream_options is only allowed for streaming", plan) == ["include_usage"]
    assert refused_features("http_400: bad request", plan) == []
    text = RequestPlan(prompt="text", ignore_eos=False, min_tokens=False, include_usage=True)
    assert refused_features("http_400: prompt must be a string.", text) == []  # nothing it names was sent


def test_a_matrix_cannot_name_another_secret_as_its_bearer_token(monkeypatch):
    """api_key_env names what is sent to base_url: only OPENAI_API_KEY unless the user allows more."""
    from bench.spec.matrix import parse_matrix

    def matrix(name):
        return {"backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"], "max_batch_sizes": [1],
                "workloads": ["w"], "device": "cpu", "options": {"api_key_env": name},
                "workload": {"w": {"source": "synthetic", "input_len": 4, "output_len": 4, "num_requests": 2}}}

    monkeypatch.delenv("BENCH_ALLOW_API_KEY_ENV", raising=False)
    parse_matrix(matrix("OPENAI_API_KEY"))
    with pytest.raises(BenchInputError, match="AWS_SECRET_ACCESS_KEY.*export BENCH_ALLOW_API_KEY_ENV=AWS_SECRET"):
        parse_matrix(matrix("AWS_SECRET_ACCESS_KEY"))
    monkeypatch.setenv("BENCH_ALLOW_API_KEY_ENV", "MY_SERVER_KEY, OTHER")
    assert parse_matrix(matrix("MY_SERVER_KEY")).cells[0].options_dict["api_key_env"] == "MY_SERVER_KEY"
