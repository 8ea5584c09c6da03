"""The load generator's own lag, over-saturation, and output tok/s per user and per GPU (hand-computed cases)."""

import asyncio
import time

import pytest

from bench.metrics import interactivity_metrics, saturation_metrics, send_lag_metrics
from bench.workloads.request import RequestTiming


def timing(start, ttft, end, out=4, error=None):
    return RequestTiming("r", 3, out, out, start, [start + ttft, end], end, error=error)


def test_send_lag_percentiles_and_the_behind_rule():
    lags = [0.001] * 98 + [0.002, 0.050]  # 1 ms, a 2 ms and one 50 ms straggler
    m = send_lag_metrics(lags, offered_rate=10.0, achieved_rate=10.0)
    assert m["send_lag_p50_ms"] == pytest.approx(1.0)
    assert m["send_lag_max_ms"] == pytest.approx(50.0)
    # numpy's linear percentile: rank 0.99 x 99 = 98.01 -> 2 + 0.01 x 48 ms
    assert m["send_lag_p99_ms"] == pytest.approx(2.48)
    assert m["client_behind"] is False
    assert send_lag_metrics(lags, 10.0, 9.4)["client_behind"] is True  # 94 % of offered
    assert send_lag_metrics([0.02] * 10, None, None)["client_behind"] is True  # p99 20 ms > 10 ms
    assert send_lag_metrics([], None, None)["client_behind"] is None


def test_interactivity_is_trtllm_bench_s_per_request_mean_and_per_gpu_share():
    # request 1: 4 tokens in 2 s -> 2 tok/s; request 2: 4 tokens in 1 s -> 4 tok/s; a failed one is left out
    ts = [timing(0.0, 0.5, 2.0), timing(1.0, 0.2, 2.0), timing(0.0, 0.1, 0.5, error="cut: x")]
    m = interactivity_metrics(ts, output_throughput=8.0, gpus=2)
    assert m == {"output_throughput_per_user": pytest.approx(3.0), "output_throughput_per_gpu": 4.0, "gpus": 2}
    with pytest.raises(ValueError):
        interactivity_metrics(ts, 8.0, 0)


def test_saturation_rule_on_hand_made_passes():
    # steady: each request ends before the next is sent -> 1 in flight throughout, TTFT flat
    steady = [timing(i, 0.1, i + 0.5) for i in range(9)]
    m = saturation_metrics(steady)
    assert (m["in_flight_first"], m["in_flight_last"], m["oversaturated"]) == (1.0, 1.0, False)
    # collapsing: requests never end inside the pass and TTFT grows with the index
    collapsing = [timing(i, 0.1 * (i + 1), 100 + i) for i in range(9)]
    m = saturation_metrics(collapsing)
    assert m["in_flight_first"] == pytest.approx(2.0)  # 1, 2, 3 in flight
    assert m["in_flight_last"] == pytest.approx(8.0)  # 7, 8, 9
    assert m["ttft_first_ms"] == pytest.approx(200.0) and m["ttft_last_ms"] == pytest.approx(800.0)
    assert m["oversaturated"] is True
    # load rises but TTFT does not: not flagged (both must rise)
    queued = [timing(i, 0.1, 100 + i) for i in range(9)]
    assert saturation_metrics(queued)["oversaturated"] is False
    assert saturation_metrics(steady[:5])["oversaturated"] is None


aiohttp = pytest.importorskip("aiohttp")

from bench.serving.client import ClientConfig, ServeRequest, replay  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402


def paced(n, rate, max_tokens=4):
    return [ServeRequest(f"r{i}", [1, 2, 3], 3, max_tokens, arrival_s=i / rate) for i in range(n)]


async def _replay_starved(cfg, reqs, block_s):
    """Replay while another task holds the event loop for block_s at a time (a client starved of CPU)."""
    stop = False

    async def hog():
        while not stop:
            time.sleep(block_s)  # holds the loop: the client cannot send on time
            await asyncio.sleep(0.001)

    task = asyncio.create_task(hog())
    try:
        return await replay(cfg, reqs)
    finally:
        stop = True
        await task


def test_a_starved_client_reports_its_lag_and_an_unstarved_one_does_not():
    with TestServer(ttft_s=0.002, itl_s=0.001) as srv:
        cfg = ClientConfig(srv.base_url, model="test-model")
        reqs = paced(20, rate=100.0)
        offered = 100.0
        # Other jobs share this machine's cores: a descheduled process lags too, so the unstarved client
        # gets three tries to show a clean pass (a starved one cannot: its loop is held every 60 ms).
        for _ in range(3):
            _, free = asyncio.run(replay(cfg, reqs))
            ok = send_lag_metrics(free.send_lag_s, offered, None)
            if not ok["client_behind"]:
                break
        _, starved = asyncio.run(_replay_starved(cfg, reqs, block_s=0.060))
    bad = send_lag_metrics(starved.send_lag_s, offered, None)
    assert len(starved.send_lag_s) == 20
    # a loop blocked 60 ms at a time sends requests due every 10 ms tens of ms late
    assert bad["send_lag_max_ms"] > 30 and bad["client_behind"] is True
    # Unstarved: a loose bound for a shared 2-core machine (scripts/bench_openai_client.py measures the real error).
    assert ok["send_lag_p50_ms"] < 5.0 and ok["client_behind"] is False


def test_a_server_slowing_with_load_is_flagged_oversaturated_and_a_light_load_is_not():
    # 20 ms TTFT, 10 ms ITL x 8 tokens ~ 90 ms per request alone; past 1 stream in flight each wait
    # grows by 100 % per extra stream, so 40 req/s (4 in flight at the light pace) piles up.
    with TestServer(ttft_s=0.02, itl_s=0.01, knee=1, load_slowdown=1.0) as srv:
        cfg = ClientConfig(srv.base_url, model="test-model")
        heavy, _ = asyncio.run(replay(cfg, paced(24, rate=40.0, max_tokens=8)))
        light, _ = asyncio.run(replay(cfg, paced(8, rate=4.0, max_tokens=8)))
    h = saturation_metrics(heavy)
    assert h["oversaturated"] is True, h
    assert saturation_metrics(light)["oversaturated"] is False


def test_the_table_warns_about_an_oversaturated_pass_and_a_lagging_client(tmp_path):
    from bench.report.data import report_data
    from bench.report.tables import load_warnings, speedup_table
    from bench.results import query
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix

    with TestServer(ttft_s=0.02, itl_s=0.01, knee=1, load_slowdown=1.0) as srv:
        m = parse_matrix({
            "name": "sat", "backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"], "max_batch_sizes": [1],
            "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0, "timeout_s": 60, "build_timeout_s": 60,
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 24}},
            "options": {"base_url": srv.base_url, "request_rate": 40.0, "burstiness": 1e9, "max_concurrency": "none"},
        })
        run_matrix(m, tmp_path / "s.jsonl", show_progress=False)
    data = report_data(query.select(query.load([tmp_path / "s.jsonl"])).records)
    (table,) = speedup_table(data.frame, {"backend": "openai"}).values()
    assert any("over-saturated" in w for w in table.warnings), table.warnings
    assert "send_lag_p99_ms" in table.frame and "output_throughput_per_user" in table.frame
    behind = load_warnings({"client_behind": 1.0, "send_lag_p99_ms": 25.0, "offered_request_rate": 8.0,
                            "achieved_request_rate": 7.0})
    assert behind and "fell behind" in behind[0] and "25.0 ms" in behind[0]
    assert load_warnings({"client_behind": 0.0, "oversaturated": 0.0}) == []


def test_a_servers_gpus_divide_its_per_gpu_figure(tmp_path):
    """The client cannot see a server's GPUs: `server_gpus` says them, and the record's per-GPU figure divides by it."""
    from bench.errors import BenchInputError
    from bench.results import query
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix

    def matrix(url, gpus):
        return parse_matrix({
            "name": "tp", "backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"], "max_batch_sizes": [2],
            "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0, "timeout_s": 60, "build_timeout_s": 60,
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 4}},
            "options": {"base_url": url, "server_gpus": gpus},
        })

    with pytest.raises(BenchInputError, match="server_gpus"):
        matrix("http://127.0.0.1:1", 0)
    with TestServer(ttft_s=0.01, itl_s=0.005) as srv:
        run_matrix(matrix(srv.base_url, 4), tmp_path / "s.jsonl", show_progress=False)
    (rec,) = query.load([tmp_path / "s.jsonl"])
    assert rec.ok and rec.metrics["gpus"] == 4 and "gpus" not in rec.extra
    assert rec.metrics["output_throughput_per_gpu"] == pytest.approx(rec.metrics["output_throughput"] / 4)
