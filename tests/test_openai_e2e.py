"""The openai backend through bench.execution.matrix.run_matrix: worker subprocesses talk to 127.0.0.1."""

import socket

import pytest

pytest.importorskip("aiohttp")

from bench.execution.matrix import run_matrix  # noqa: E402
from bench.results.store import ResultStore  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402
from bench.spec import parse_matrix  # noqa: E402


def matrix(tiny_sharegpt, base_url, **options):
    return parse_matrix({
        "backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"], "max_batch_sizes": [4],
        "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 1, "timeout_s": 30, "build_timeout_s": 30,
        "workload": {"w": {"num_requests": 8, "path": str(tiny_sharegpt), "max_output_len": 8}},
        "options": {"base_url": base_url, **options},
    })


def test_rate_sweep_through_the_matrix(tiny_sharegpt, tmp_path):
    store = tmp_path / "s.jsonl"
    with TestServer(ttft_s=0.005, itl_s=0.002, record=True) as srv:
        summary = run_matrix(matrix(tiny_sharegpt, srv.base_url, request_rate=["inf", 100.0], slo_ttft_ms=500),
                             store, show_progress=False)
        served = len(srv.log)
    assert summary.statuses == {"ok": 2}
    assert served == 2 * (4 + 8)  # per cell: a warm-up of max_batch_size requests, then 8
    recs = {r["cell"]["options"]["request_rate"]: r for r in ResultStore(store).records()}
    for rec in recs.values():
        m = rec["metrics"]
        assert m["completed"] == 8 and m["failed"] == 0 and m["output_len_mismatches"] == 0
        assert m["ttft_median_ms"] >= 5 and m["itl_median_ms"] >= 2
        assert m["request_goodput"] > 0 and m["max_concurrency"] == 4
        assert rec["extra"]["output_tokens_source"] == "usage" and rec["build"]["server"] == srv.base_url
    assert recs["inf"]["metrics"]["requested_request_rate"] is None
    assert recs[100.0]["metrics"]["requested_request_rate"] == 100.0
    assert recs[100.0]["extra"]["arrivals"] == "generated"


def test_unreachable_server_fails_the_cells_clearly(tiny_sharegpt, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = tmp_path / "s.jsonl"
    summary = run_matrix(matrix(tiny_sharegpt, f"http://127.0.0.1:{port}"), store, show_progress=False)
    assert summary.statuses == {"error": 1}
    (rec,) = ResultStore(store).records()
    assert "cannot reach the OpenAI-compatible server" in rec["error"]


def test_failed_requests_are_counted_and_the_pass_stays_ok(tiny_sharegpt, tmp_path):
    store = tmp_path / "s.jsonl"
    with TestServer(mode="http500") as srv:
        run_matrix(matrix(tiny_sharegpt, srv.base_url, max_failed_fraction=1.0), store, show_progress=False)
    (rec,) = ResultStore(store).records()
    # every request failed: nothing was measured, so the pass is an error even when tolerated
    assert rec["status"] == "error" and "8 failed" in rec["error"]
