"""The dashboard in a real browser (headless Chromium): loads with no errors or network, every figure
draws, and hostile text from data cannot inject markup. Skips only when Chromium is missing
(the nox tests session installs it)."""

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from bench.report.build import build_report
from tests.support import browser
from tests.support.dashboard import dashboard_figures
from tests.support.synthetic import synthetic_records, write_store

HOSTILE = "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"

needs_chromium = pytest.mark.skipif(browser.chromium() is None,
                                    reason="chromium not installed (nox -s tests installs it: apt-get install -y chromium)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    recs = synthetic_records(backends=("hf", "trtllm"), precisions=("bf16", "int4"), batch_sizes=(1, 4, 32),
                             trials=2, requests=16, model=HOSTILE)
    recs = [dataclasses.replace(r, error=HOSTILE) if r.status == "oom" else r for r in recs]
    write_store(tmp / "a.jsonl", recs)
    newer = synthetic_records(backends=("hf", "trtllm"), precisions=("bf16", "int4"), batch_sizes=(1, 4, 32),
                              trials=2, requests=16, model=HOSTILE, seed=1)
    write_store(tmp / "b.jsonl", newer)
    kernels = pd.DataFrame({"backend": ["hf", "trtllm", "hf", "trtllm"], "precision": ["bf16"] * 4,
                            "range": ["RMSNorm", "RMSNorm", "attention", HOSTILE],
                            "kernels_per_instance": [7, 1, 12, 3], "time_per_instance_us": [20.0, 4.1, 90.0, 35.5]})
    paths = build_report([tmp / "a.jsonl", tmp / "b.jsonl"], tmp / "out", kernels=kernels)
    return tmp, paths


def test_page_text_is_escaped(built):
    _, paths = built
    page = paths["dashboard"].read_text()
    data = page[page.index("id='bench-data'>"):]
    data = data[: data.index("</script>")]
    assert "<" not in data[len("id='bench-data'>"):]  # the JSON block cannot close itself
    assert HOSTILE not in page and "onerror=\"window" not in page
    blob = json.loads(data[len("id='bench-data'>"):])
    assert any("Comparison" in f["layout"]["title"]["text"] or "ratio" in f["layout"]["title"]["text"] for f in blob["figures"])


@needs_chromium
def test_dashboard_draws_every_figure_in_chromium(built):
    tmp, paths = built
    status = browser.page_status(paths["dashboard"], "#all")
    assert status["errors"] == [] and status["resources"] == []
    assert status["expected"] >= 8 and status["drawn"] == status["expected"], status
    assert status["state"] == "ok"
    dom = status["dom"]
    # The hostile text shows as text: no extra <script> element (hook, plotly.js, data, app) and no <img>.
    assert dom.count("<script") == 4 and "<img" not in dom
    png = browser.screenshot(paths["dashboard"], tmp / "dashboard.png")
    assert png.stat().st_size > 10_000


@needs_chromium
def test_empty_sections_show_notes(tmp_path):
    recs = synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2), trials=1, requests=4, telemetry=False)
    write_store(tmp_path / "s.jsonl", recs)
    paths = build_report([tmp_path / "s.jsonl"], tmp_path / "out")
    page = paths["dashboard"].read_text()
    assert "no kernel profiles in this store" in page and "no telemetry" in page
    status = browser.page_status(paths["dashboard"])
    assert status["state"] == "ok", status



def _figure(figs: list[dict], title_start: str) -> dict:
    return next(f for f in figs if f["layout"]["title"]["text"].startswith(title_start))


def test_series_keep_their_colour_and_failure_markers_never_hide_a_point(built):
    _, paths = built
    figs = dashboard_figures(paths["dashboard"].read_text())
    lines = _figure(figs, "Output throughput vs max_batch_size")
    boxes = _figure(figs, "Latency per request")
    line_color = {t["name"]: t["line"]["color"] for t in lines["data"] if t["mode"] == "lines+markers"}
    ttft = {t["name"]: t["marker"]["color"] for t in boxes["data"] if t["xaxis"] == "x"}
    tpot = {t["name"]: t["marker"]["color"] for t in boxes["data"] if t["xaxis"] == "x2"}
    assert ttft and ttft == tpot  # TPOT boxes: the TTFT boxes' (and the legend's) colours
    assert all(line_color[name] == color for name, color in ttft.items())  # and the throughput lines'
    assert len(set(line_color.values())) == len(line_color)  # one colour per series
    # every failure marker sits at its own (x, y), above every measured point
    measured = [(x, y) for t in lines["data"] if t["mode"] == "lines+markers" for x, y in zip(t["x"], t["y"], strict=True)]
    failed = [(x, y) for t in lines["data"] if t["mode"] == "markers+text" for x, y in zip(t["x"], t["y"], strict=True)]
    assert failed and len(set(failed)) == len(failed)
    assert min(y for _, y in failed) > max(y for _, y in measured)
    assert lines["layout"]["yaxis"]["rangemode"] == "tozero"


def test_speedup_heatmap_diverges_around_one(built):
    import math

    _, paths = built
    heat = _figure(dashboard_figures(paths["dashboard"].read_text()), "Generation speedup")
    axis = heat["layout"]["coloraxis"]
    assert axis["cmid"] == 0 and axis["cmin"] == -axis["cmax"]  # log2 of the speedup: 1.0x in the middle
    assert axis["colorscale"][2] == [0.5, "#f7f7f7"]  # white at 1.0x
    (trace,) = heat["data"]
    texts = [(z, t) for zrow, trow in zip(trace["z"], trace["text"], strict=True) for z, t in zip(zrow, trow, strict=True)]
    centre = [t for z, t in texts if z == 0.0]
    assert centre and all(t == "1.00x" for t in centre)  # the baseline sits at the centre
    for z, t in texts:
        if z is not None:
            assert math.isclose(2 ** z, float(t.split("x")[0]), rel_tol=0.01)
            assert t == "1.00x" or t.endswith("<br>(1 run)")  # one process a cell: no interval, and the cell says so
    assert "1x" in axis["colorbar"]["ticktext"]


def _moved(records, host, gpu):
    return [dataclasses.replace(r, environment={**r.environment, "host": host, "gpu_name": gpu}) for r in records]


def test_stores_of_the_same_name_from_two_machines_stay_apart(tmp_path):
    recs = synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1, 4), trials=1, requests=4,
                             telemetry=False)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_store(tmp_path / "a" / "default.jsonl", _moved(recs, "box-a", "NVIDIA H200"))
    write_store(tmp_path / "b" / "default.jsonl", _moved(recs, "box-b", "NVIDIA A10"))
    paths = build_report([tmp_path / "a" / "default.jsonl", tmp_path / "b" / "default.jsonl"], tmp_path / "out")
    page = paths["dashboard"].read_text()
    comparisons = [f for f in dashboard_figures(page) if f["layout"]["title"]["text"].startswith("Output tok/s ratio")]
    assert comparisons, "two stores of one name must still be compared, not merged"
    title = comparisons[0]["layout"]["title"]["text"]
    assert "box-a (NVIDIA H200)" in title and "box-b (NVIDIA A10)" in title and "default" not in title
    assert "<title>bench: box-a (NVIDIA H200) · 0123456" in page


# The H200 sweep's two stores, copied from its record's data folder (tests/data/README.md).
SERVING = Path(__file__).resolve().parent / "data" / "h200-serving"


def test_a_rate_sweep_gets_latency_and_requests_against_the_offered_rate(tmp_path):
    """The H200 sweep (two `transformers serve` processes): one line per server, rates in order.

    Its record: docs/measurements/2026-12-01-h200-serving.md.
    """
    paths = build_report([SERVING / "serving-sweep.jsonl.gz", SERVING / "serving-sweep-2.jsonl.gz"], tmp_path,
                         {"backend": "openai", "request_rate": 1.0})
    figs = dashboard_figures(paths["dashboard"].read_text())
    latency = _figure(figs, "Latency vs offered request rate")
    requests = _figure(figs, "Requests/s vs offered request rate")
    ttft = {t["name"]: t for t in latency["data"] if t["name"].endswith("TTFT p50")}
    assert len(ttft) == 2 and all("request_rate" not in name for name in ttft)  # a line per server, not per rate
    # servers not named by their ephemeral ports: model_name (each its own directory) tells them apart here
    assert not any("base_url" in name or "127.0.0.1" in name for name in ttft)
    first = next(t for name, t in ttft.items() if "/tmp/serving/model" in name)  # the server on port 33829
    assert first["x"] == [1.0, 2.0, 4.0, 8.0, 16.0]  # ascending, every rate of the first server
    assert first["y"][-1] == pytest.approx(159.48, abs=0.01)  # its 16 req/s pass: TTFT p50 of the store
    completed = next(t for t in requests["data"] if t["name"].endswith("completed req/s") and "/tmp/serving/model" in t["name"])
    assert completed["y"][0] == pytest.approx((0.59196 + 0.74088) / 2, abs=1e-4)  # 1 req/s: the mean of its 2 runs
    assert latency["layout"]["xaxis"]["type"] == "log" and latency["layout"]["yaxis2"]["overlaying"] == "y"


def test_no_rate_figures_without_a_sweep(built):
    _, paths = built
    titles = [f["layout"]["title"]["text"] for f in dashboard_figures(paths["dashboard"].read_text())]
    assert not any("offered request rate" in t for t in titles)
