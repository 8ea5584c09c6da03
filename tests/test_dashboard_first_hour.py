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


def _cpu_store(path, busy_bs=8):
    """Write a CPU sweep of the fake backend: bs1 (the baseline), 2, 8, nothing failed; bs8's passes ran on a busy machine."""
    from tests.support.records import make_record
    from tests.support.synthetic import write_store

    def cell(bs):
        return {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": bs, "device": "cpu",
                "options": {}, "workload": {"name": "w"}}

    busy = {"host_load": {"busy": ["other processes used 1.2 of 2 core(s)"]}}
    recs = [make_record(f"c{bs}", cell=cell(bs), trial=t, request_throughput=bs * (1 + t / 100),
                        output_throughput=10.0 * bs * (1 + t / 100), decode_throughput=11.0 * bs * (1 + t / 100),
                        output_throughput_per_user=5.0 / bs, output_throughput_per_gpu=10.0 * bs,
                        extra=busy if bs == busy_bs else None)
            for bs in (1, 2, 8) for t in range(3)]
    write_store(path, recs)
    return path


def test_a_cpu_run_dashboard_shows_no_empty_figure_no_gpu_column_and_one_warning_box(tmp_path):
    paths = build_report([_cpu_store(tmp_path / "cpu.jsonl")], tmp_path / "out", {"backend": "fake", "max_batch_size": 1})
    page = paths["dashboard"].read_text()
    titles = [f["layout"]["title"]["text"] for f in dashboard_figures(page)]
    assert not any(t.startswith("OOM frontier") for t in titles)  # nothing failed: nothing to draw
    assert "tok/s per GPU" not in paths["markdown"].read_text()  # a CPU run has no GPU to divide by
    pareto = next(f for f in dashboard_figures(page) if f["layout"]["title"]["text"].startswith("Interactivity"))
    assert pareto["layout"]["yaxis"]["title"]["text"] == "output tok/s"
    # the busy machine's warning: under its table once, counted (not repeated) in the one box at the top
    warning = "fake/bf16/bs8 on w: 3 of 3 pass(es) measured on a busy machine"
    assert page.count(warning) == 1 and page.count("class='warn'") == 2  # the summary and the table's list
    assert "⚠ 1 warning(s): 1 under the speedup tables below (1 about a busy machine)" in page
    # the wide table scrolls in its own box; the bs8 speedups are marked in the table and in the heatmap
    assert "<div class='scroll'><table class='speedup'>" in page and ".scroll{overflow-x:auto" in page
    heat = next(f for f in dashboard_figures(page) if f["layout"]["title"]["text"].startswith("Generation speedup"))
    texts = [t for row in heat["data"][0]["text"] for t in row if t]
    assert [t for t in texts if "*" in t] == ["8.00x*<br>(1 run)"] and "not a result" in heat["layout"]["title"]["text"]


def test_an_oom_frontier_is_drawn_when_a_cell_failed(tmp_path):
    from bench.results.store import ResultStore
    from tests.support.records import make_record

    store = _cpu_store(tmp_path / "cpu.jsonl")
    cell = {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": 16, "device": "cpu", "options": {},
            "workload": {"name": "w"}}
    ResultStore(store).append(make_record("c16", cell=cell, status="oom"))
    paths = build_report([store], tmp_path / "out", {"backend": "fake", "max_batch_size": 1})
    titles = [f["layout"]["title"]["text"] for f in dashboard_figures(paths["dashboard"].read_text())]
    assert any(t.startswith("OOM frontier") for t in titles)
