"""Dashboard figures a new user can read (issue 34): log ticks written in full, round ticks on the rate
figure's right axis, long legends below the plot, no batch/OOM figures for server sweeps, an OOM bar that
says when nothing failed, paced cells not painted as slowdowns, one run's request count, server names."""

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.report import figures as F
from bench.report import plotting
from bench.report.build import build_report
from tests.support.dashboard import dashboard_figures
from tests.test_dashboard import SERVING, _figure


def test_log_ticks_are_written_in_full():
    t = plotting.log_ticks([3.0, 8000.0])
    assert t["tickvals"][0] <= 3 and t["tickvals"][-1] >= 8000
    assert "5 000" in t["ticktext"] and "5" in t["ticktext"] and "0.5" not in t["ticktext"]
    assert all(len(x) > 1 or x in "125" for x in t["ticktext"])
    narrow = plotting.log_ticks([12.0, 19.0])  # within a decade: finer steps, still labelled in full
    assert narrow["ticktext"][:3] == ["10", "15", "20"]


def test_nice_ticks_are_round():
    t = plotting.nice_ticks(89.0)
    assert t["tickvals"] == [0, 20, 40, 60, 80, 100]
    assert plotting.nice_ticks(0.37)["tickvals"] == [0, 0.1, 0.2, 0.3, 0.4]


def test_server_sweep_dashboard(tmp_path):
    paths = build_report([SERVING / "serving-sweep.jsonl.gz", SERVING / "serving-sweep-2.jsonl.gz"], tmp_path,
                         {"backend": "openai", "request_rate": 1.0})
    page = paths["dashboard"].read_text()
    figs = dashboard_figures(page)
    titles = [f["layout"]["title"]["text"] for f in figs]
    # batch size and memory are the server's: no throughput-vs-batch or OOM figure
    assert not any(t.startswith("Output throughput vs max_batch_size") or t.startswith("OOM frontier") for t in titles)
    latency = _figure(figs, "Latency vs offered request rate")
    y2 = latency["layout"]["yaxis2"]["tickvals"]
    step = y2[1] - y2[0]
    assert all(abs(v / step - round(v / step)) < 1e-9 for v in y2) and str(step)[0] in "125"
    # paced cells: written, not coloured as a slowdown
    heat = _figure(figs, "Generation speedup")
    texts = [x for row in heat["data"][0]["text"] for x in row if x]
    assert texts and all("(paced)" in x for x in texts if x != "1.00x (paced)")
    assert all(v is None for row in heat["data"][0]["z"] for v in row)
    # one run's requests: the workload's 40, not 40 x runs (its cells ran twice)
    lengths = _figure(figs, "Request lengths")
    assert lengths["layout"]["title"]["text"].startswith("Request lengths (40 requests)")
    assert "127.0.0.1:33829" not in json.dumps([t.get("name") for f in figs for t in f["data"]])


def test_long_option_legends_go_below_and_oom_bar_says_nothing_failed():
    options = json.dumps({"attn_implementation": "sdpa", "cache": "static", "compile": "reduce-overhead",
                          "decode_loop": "harness"})
    plain = json.dumps({"attn_implementation": "eager", "cache": "dynamic", "compile": "off", "decode_loop": "generate"})
    cells = pd.DataFrame([
        {"cell_id": f"c{i}", "backend": "hf", "model": "m", "precision": "bf16", "max_batch_size": bs, "device": "cuda",
         "workload": "w", "options": o, "all_options": o, "gpu_memory_gb": None, "status": st, "trials": 1,
         "output_throughput": 10.0 * bs if st == "ok" else None, "output_throughput__std": 1.0, "error": None,
         "request_throughput": 1.0, "length": ""}
        for i, (o, bs, st) in enumerate([(options, 1, "ok"), (options, 8, "ok"), (plain, 1, "ok"), (plain, 8, "oom")])])
    fig = F.throughput_vs_batch(cells, "w")
    assert fig["layout"]["legend"]["orientation"] == "h"  # labels of 70+ characters: the legend goes below
    oom = F.oom_frontier(cells, "w")
    bars = {t["y"][0]: t for t in oom["data"] if t["type"] == "bar"}
    fits = next(t for label, t in bars.items() if "static" in label)
    failed = next(t for label, t in bars.items() if "dynamic" in label)
    assert fits["text"] == ["fits up to the largest tested (8)"] and fits["marker"]["pattern"]["shape"] == "/"
    assert failed["text"] == ["1"] and "pattern" not in failed["marker"]


@pytest.mark.parametrize("root", [Path(__file__).parents[1]])
def test_two_servers_with_different_labels_need_no_server_name(root):
    a, b = (json.dumps({"base_url": u, "request_rate": 1}) for u in ("http://127.0.0.1:1", "http://127.0.0.1:2"))
    cells = pd.DataFrame({"backend": ["openai"] * 2, "precision": ["bf16", "fp8"], "options": [a, b],
                          "all_options": [a, b], "gpu_memory_gb": [None, None]})
    assert list(plotting.series_labels(cells)) == ["openai bf16", "openai fp8"]
    same = cells.assign(precision="bf16")
    assert list(plotting.series_labels(same)) == ["openai bf16 [server 1]", "openai bf16 [server 2]"]
