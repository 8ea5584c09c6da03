"""The openai (serving) backend against a paced local streaming server on 127.0.0.1."""

import asyncio
import math
import socket
import statistics

import pytest

pytest.importorskip("aiohttp")

from bench.backends.base import RequestTiming  # noqa: E402
from bench.backends.openai import OpenAIBackend, ServerError, normalize_base_url  # noqa: E402
from bench.errors import BenchInputError  # noqa: E402
from bench.results.metrics import goodput  # noqa: E402
from bench.serving.client import ClientConfig, ServeRequest, replay  # noqa: E402
from bench.serving.load import arrival_times  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402
from bench.serving.sse import SSEDecoder  # noqa: E402
from bench.workloads.workload import Request  # noqa: E402

# Loose bound for a 2-core machine shared with other jobs; benchmarks/bench_openai_client.py
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


def test_arrival_times_rate_burstiness_and_seed():
    assert arrival_times(3, math.inf) == [0.0, 0.0, 0.0]
    a = arrival_times(4000, 100.0, 1.0, seed=1)
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:], strict=False))
    assert 3999 / a[-1] == pytest.approx(100.0, rel=0.05)
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    # Poisson: coefficient of variation 1; gamma shape 0.25 (bursty): CV = 1/sqrt(0.25) = 2
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.1)
    b = arrival_times(4000, 100.0, 0.25, seed=1)
    gb = [y - x for x, y in zip(b, b[1:], strict=False)]
    assert statistics.pstdev(gb) / statistics.mean(gb) == pytest.approx(2.0, rel=0.15)
    assert arrival_times(5, 10.0, seed=7) == arrival_times(5, 10.0, seed=7) != arrival_times(5, 10.0, seed=8)


def test_ttft_and_itl_match_the_servers_pace():
    # prompt [i] tags request i, so each timing is matched to the server's log of it
    with TestServer(ttft_s=0.040, itl_s=0.010, record=True) as srv:
        cfg = ClientConfig(srv.base_url, model="test-model")
        timings, stats = run(cfg, [ServeRequest(f"r{i}", [i], 1, 6) for i in range(6)], conc=2)
        log = {e.body["prompt"][0]: e for e in srv.log}
    assert [t.error for t in timings] == [None] * 6
    assert stats.usage_counted == 6 and stats.chunks == 36
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
        # without usage the client counts chunks: 3, flagged as a mismatch by the caller
        (t2,), st = run(ClientConfig(srv.base_url, endpoint="chat", model="test-model", include_usage=False),
                        [ServeRequest("c", "hi", 1, 7)])
        assert t2.error is None and t2.output_len == 3 and st.usage_counted == 0


@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        ("http500", "HTTP 500"),
        ("bad_json", "not a server-sent-event stream"),
        ("cut", "stream"),
        ("no_done", "before 'data: [DONE]'"),
        ("hang", "timeout"),
    ],
)
def test_server_failures_are_per_request_errors(mode, expect):
    with TestServer(mode=mode, cut_after=2) as srv:
        timings, _ = run(ClientConfig(srv.base_url, model="test-model", timeout_s=0.5), reqs(3))
    assert len(timings) == 3
    assert all(t.error and expect in t.error for t in timings), [t.error for t in timings]


def test_unreachable_server_is_a_per_request_error_and_a_clear_load_error():
    url = f"http://127.0.0.1:{free_port()}"
    timings, _ = run(ClientConfig(url, model="m", timeout_s=2), reqs(2))
    assert all(t.error.startswith("connection error") for t in timings)
    with pytest.raises(ServerError, match="cannot reach the OpenAI-compatible server"):
        OpenAIBackend().load({"options": {"base_url": url}})


def test_load_checks_the_model_list():
    with TestServer(models=("a", "b")) as srv:
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url + "/v1/"}}).model == "a"
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "b"}}).model == "b"
        with pytest.raises(ServerError, match=r"'c' is not served .*\['a', 'b'\]"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "c"}})
    with TestServer(models_status=404) as srv:  # no /v1/models: a one-token request proves it works
        with pytest.raises(ServerError, match="set the option model_name"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url}})
        assert OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "x"}}).model == "x"
    with TestServer(models_status=404, mode="bad_json") as srv:
        with pytest.raises(ServerError, match="test request failed"):
            OpenAIBackend().load({"options": {"base_url": srv.base_url, "model_name": "x"}})


def workload_requests(n, out=5):
    return [Request(f"q{i}", (10, 11, 12, 13), out) for i in range(n)]


def test_backend_run_counts_and_flags_wrong_lengths():
    with TestServer(extra_tokens=2) as srv:
        loaded = OpenAIBackend().load({"options": {"base_url": srv.base_url}})
        out = loaded.run(workload_requests(4), 2, {})
        assert all(t.error is None and t.output_len == 7 for t in out.timings)
        assert out.extra["metrics"]["output_len_longer"] == 4 and out.extra["output_len_mismatch_ids"][0] == "q0"
        with pytest.raises(RuntimeError, match="4 output.* longer .*strict_output_len"):
            loaded.run(workload_requests(4), 2, {"strict_output_len": True})
    with TestServer(extra_tokens=-1) as srv:
        out = OpenAIBackend().load({"options": {"base_url": srv.base_url}}).run(workload_requests(2), 2, {})
        assert out.extra["metrics"]["output_len_shorter"] == 2


def test_backend_run_rate_concurrency_goodput_and_failure_fraction():
    with TestServer(ttft_s=0.005, itl_s=0.002) as srv:
        loaded = OpenAIBackend().load({"options": {"base_url": srv.base_url}})
        out = loaded.run(workload_requests(20), 4, {"request_rate": 200.0, "slo_ttft_ms": 1000, "seed": 3})
        m = out.extra["metrics"]
        assert m["requested_request_rate"] == 200.0 and m["max_concurrency"] == 4
        assert m["achieved_request_rate"] > 0 and m["client_cpu_ms_per_request"] > 0
        assert m["request_goodput"] == pytest.approx(20 / (out.ended - out.started))
        assert out.extra["arrivals"] == "generated" and out.extra["output_tokens_source"] == "usage"
        # requests sent no earlier than their generated arrival
        due = arrival_times(20, 200.0, 1.0, 3)
        for t, a in zip(out.timings, due, strict=False):
            assert t.start - out.started >= a - 1e-6
        out = loaded.run(workload_requests(3), 1, {"max_concurrency": "none", "slo_ttft_ms": 0.001})
        assert out.extra["metrics"]["request_goodput"] == 0 and out.extra["metrics"]["requested_request_rate"] is None
    with TestServer(mode="http500") as srv:
        loaded = OpenAIBackend().load({"options": {"base_url": srv.base_url}})
        with pytest.raises(RuntimeError, match="3 of 3 requests failed"):
            loaded.run(workload_requests(3), 1, {})
        out = loaded.run(workload_requests(3), 1, {"max_failed_fraction": 1.0})
        assert [t.error[:8] for t in out.timings] == ["HTTP 500"] * 3


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
    from bench.spec import parse_matrix

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
    from bench.spec import parse_matrix

    base = {"backends": ["openai"], "model": "Qwen/Qwen2-7B-Instruct", "precisions": ["server"],
            "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu",
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}}
    assert parse_matrix(base).cells[0].model == "Qwen/Qwen2-7B-Instruct"
    with pytest.raises(BenchInputError, match="unknown model"):
        parse_matrix({**base, "backends": ["openai", "hf"], "precisions": ["server", "bf16"]})
