"""The interactivity-vs-throughput front on hand-computed points, and its figure from a fake batch sweep."""

import json
import math
from pathlib import Path

from bench.report.pareto import pareto_front
from tests.support.dashboard import dashboard_figures


def test_front_on_hand_computed_points():
    # (per user, per GPU): bs1 is the most interactive, bs16 the most throughput; bs8b is beaten by bs8 on both
    pts = [(50.0, 50.0), (40.0, 150.0), (30.0, 300.0), (25.0, 280.0), (10.0, 500.0), (None, 900.0), (math.nan, 1.0)]
    assert pareto_front(pts) == [4, 2, 1, 0]  # ascending per-user tok/s
    assert pareto_front([(1.0, 1.0), (1.0, 1.0), (0.5, 0.5)]) == [0, 1]  # equal points both stay; dominated one out
    assert pareto_front([(1.0, 2.0), (1.0, 1.0)]) == [0]  # same x, lower y: dominated
    assert pareto_front([]) == []


def test_a_batch_sweep_gets_the_pareto_figure(tmp_path):
    from bench.report.build import build_report
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix

    m = parse_matrix({"name": "p", "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"],
                      "max_batch_sizes": [1, 4, 16], "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0,
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 16}}})
    store = tmp_path / "p.jsonl"
    run_matrix(m, store, show_progress=False)
    rows = [json.loads(line) for line in store.read_text().splitlines()]
    per_user = {r["cell"]["max_batch_size"]: r["metrics"]["output_throughput_per_user"] for r in rows}
    per_gpu = {r["cell"]["max_batch_size"]: r["metrics"]["output_throughput_per_gpu"] for r in rows}
    # the fake backend's batches: larger ones are slower per request and faster per device
    assert per_user[1] > per_user[4] > per_user[16] and per_gpu[1] < per_gpu[4] < per_gpu[16]
    assert all(r["metrics"]["gpus"] == 1 for r in rows)
    out = build_report([store], tmp_path / "report", {"backend": "fake", "max_batch_size": 1})
    page = (tmp_path / "report" / "dashboard.html").read_text()
    assert "Interactivity vs throughput (Pareto front)" in page and "Pareto front" in page
    assert out
    front = next(t for f in dashboard_figures(page) for t in f["data"] if t.get("name") == "Pareto front")
    # every point of this sweep is on the front; a point in the right half of the plot is labelled to its left, so
    # the long label stays inside the plot (cut off at the right edge on two H200 dashboards), the others to the right
    assert front["text"][-1].endswith("bs1") and len(front["x"]) == 3
    right = max(front["x"])
    assert front["textposition"] == ["top left" if x > right / 2 else "top right" for x in front["x"]]


def test_the_h200_study_front_keeps_its_labels_inside(tmp_path):
    """The H200 study's bf16 batch sweep (2026-12-01, tests/data/README.md): its front is compiled bs8 at 89.7 and bs1 at 129.4
    tok/s per user; both labels go left (bs8's ran past the plot's right edge when only the rightmost went left)."""
    from bench.report.build import build_report

    store = Path(__file__).parent / "data" / "h200-study-sweep" / "study-sweep.jsonl.gz"
    build_report([store], tmp_path / "report")
    page = (tmp_path / "report" / "dashboard.html").read_text()
    front = next(t for f in dashboard_figures(page) for t in f["data"] if t.get("name") == "Pareto front")
    assert [round(x, 1) for x in front["x"]] == [89.7, 129.4] and front["textposition"] == ["top left", "top left"]
    assert [t.split("] ")[-1] for t in front["text"]] == ["cap 24 GB bs8", "cap 24 GB bs1"], front["text"]
