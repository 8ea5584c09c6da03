"""The openai backend through bench.runner.matrix.run_matrix: worker subprocesses talk to 127.0.0.1."""

import socket

import pytest

pytest.importorskip("aiohttp")

from bench.results.store import ResultStore  # noqa: E402
from bench.runner.matrix import run_matrix  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402
from bench.spec.matrix import parse_matrix  # noqa: E402


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
    assert served == 2 * (1 + 4 + 8)  # per cell: one test request, a warm-up of max_batch_size requests, then 8
    recs = {r["cell"]["options"]["request_rate"]: r for r in ResultStore(store).records()}
    for rec in recs.values():
        m = rec["metrics"]
        assert m["completed"] == 8 and m["failed"] == 0 and m["output_len_mismatches"] == 0
        assert m["ttft_median_ms"] >= 5 and m["itl_median_ms"] >= 2
        assert m["request_goodput"] > 0 and m["max_concurrency"] == 4
        assert rec["extra"]["output_tokens_source"] == "usage" and rec["build"]["server"] == srv.base_url
        assert rec["extra"]["output_len_check"].startswith("passed") and rec["metrics"]["failed_by_kind"] == {}
    assert recs["inf"]["metrics"]["offered_request_rate"] is None
    assert recs[100.0]["metrics"]["offered_request_rate"] == pytest.approx(100.0)
    assert recs[100.0]["metrics"]["achieved_request_rate"] > 0
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


def test_every_request_failed_is_an_error(tiny_sharegpt, tmp_path):
    store = tmp_path / "s.jsonl"
    with TestServer(fault_plan=("ok",) + ("http500",) * 12) as srv:  # the test request passes, then all fail
        run_matrix(matrix(tiny_sharegpt, srv.base_url, max_failed_fraction=1.0), store, show_progress=False)
    (rec,) = ResultStore(store).records()
    # every request failed: nothing was measured, so the pass is an error even when tolerated
    assert rec["status"] == "error" and "8 failed" in rec["error"]


def test_a_pass_over_max_failed_fraction_keeps_its_figures(tiny_sharegpt, tmp_path):
    from bench.report.build import build_report

    store = tmp_path / "s.jsonl"
    # test request ok, the warm-up's 4 ok, then 3 of the 8 measured requests fail (HTTP 500, cut, error event)
    plan = ("ok",) * 5 + ("ok", "http500", "ok", "cut", "ok", "stream_error", "ok", "ok")
    with TestServer(fault_plan=plan, cut_after=1, ttft_s=0.002) as srv:
        summary = run_matrix(matrix(tiny_sharegpt, srv.base_url, slo_ttft_ms=1000), store, show_progress=False)
    assert summary.statuses == {"error": 1}
    (rec,) = ResultStore(store).records()
    assert rec["error"].startswith("3 of 8 requests failed (more than max_failed_fraction=0.05)")
    m = rec["metrics"]
    assert m["completed"] == 5 and m["failed"] == 3
    assert m["failed_by_kind"] == {"http_500": 1, "cut": 1, "stream_error": 1}
    assert m["ttft_median_ms"] >= 2 and m["request_goodput"] > 0
    assert len(rec["samples"]) == 8 and sum(1 for s in rec["samples"] if s["error"]) == 3
    # a tolerated pass shows its failures, goodput and ITL in the table
    store2 = tmp_path / "t.jsonl"
    with TestServer(fault_plan=plan, cut_after=1, ttft_s=0.002) as srv:
        run_matrix(matrix(tiny_sharegpt, srv.base_url, slo_ttft_ms=1000, max_failed_fraction=0.5, request_rate=200.0), store2,
                   show_progress=False)
    (rec2,) = ResultStore(store2).records()
    assert rec2["status"] == "ok"
    md = build_report([store2], tmp_path / "report", {"backend": "openai"})["markdown"].read_text()
    header = next(line for line in md.splitlines() if line.startswith("| backend"))
    for column in ("failed", "goodput (req/s)", "ITL p50 (ms)", "offered req/s", "achieved req/s"):
        assert f"| {column} |" in header, header
