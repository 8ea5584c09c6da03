"""The dashboard in a real browser (headless Chromium): loads with no errors or network, every figure
draws, and hostile text from data cannot inject markup. Skips only when Chromium is missing
(the nox tests session installs it)."""

import dataclasses
import json

import pandas as pd
import pytest

from bench.report.build import build_report
from tests.support import browser
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

