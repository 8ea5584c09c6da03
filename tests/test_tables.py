import pandas as pd
import pytest

from bench.errors import BenchInputError
from bench.report.render import render_rows, to_markdown
from bench.report.tables import speedup_table


def frame(rows):
    base = {"store": "s", "model": "m", "device": "cpu", "workload": "w", "options": "{}", "gpu_name": None,
            "commit": None, "error": None, "started_at": 0.0, "schema_version": 1}
    return pd.DataFrame([{**base, **r} for r in rows])


ROWS = [
    {"cell_id": "a", "trial": 0, "status": "ok", "backend": "hf", "precision": "bf16", "max_batch_size": 1,
     "request_throughput": 0.12, "output_throughput": 60.0, "decode_throughput": 64.0},
    {"cell_id": "a", "trial": 1, "status": "ok", "backend": "hf", "precision": "bf16", "max_batch_size": 1,
     "request_throughput": 0.12, "output_throughput": 62.0, "decode_throughput": 66.0},
    {"cell_id": "b", "trial": 0, "status": "ok", "backend": "trtllm", "precision": "int4", "max_batch_size": 2,
     "request_throughput": 0.5, "output_throughput": 333.6, "decode_throughput": 520.0},
    {"cell_id": "c", "trial": 0, "status": "oom", "backend": "trtllm", "precision": "int4", "max_batch_size": 4,
     "request_throughput": None, "output_throughput": None},
]


def test_speedups_spread_and_oom_rows():
    t = speedup_table(frame(ROWS))["w"]
    assert list(t.frame.backend) == ["hf", "trtllm", "trtllm"] and t.baseline == "hf/bf16/bs1"
    assert t.frame.loc[1, "throughput_speedup"] == pytest.approx(0.5 / 0.12)
    # generation speedup: the decode phase's rate, not end-to-end tok/s
    assert t.frame.loc[1, "generation_speedup"] == pytest.approx(520.0 / 65.0)
    headers, rows = render_rows(t)
    col = {h: i for i, h in enumerate(headers)}
    assert headers[:4] == ["backend", "model", "precision", "max_batch_size"]  # no option varies: no options column
    # one run of two trials: the ± is the spread between trials, and the row says so
    assert rows[0][col["req/s"]] == "0.120 ± 0.000" and rows[0][col["output tok/s"]] == "61.0 ± 1.4"
    assert rows[0][col["generation tok/s"]] == "65.0 ± 1.4"
    assert rows[0][col["runs × trials"]] == "1 × 2" and rows[0][col["tok/s spread: runs / trials"]] == "— / 2.3%"
    assert rows[2][col["req/s"]:col["generation speedup"] + 1] == ["OOM"] * 5
    md = to_markdown({"w": t})
    # one process on each side: no interval, and the cell says why; the baseline's own row says nothing more
    assert "| trtllm | m | int4 | 2 | 0.500 | 333.6 | 520.0 | 4.17x (1 run) | 8.00x (1 run) | 1 × 1 | — / — |" in md
    assert "| hf | m | bf16 | 1 | 0.120 ± 0.000 | 61.0 ± 1.4 | 65.0 ± 1.4 | 1.00x | 1.00x |" in md
    assert "`(1 run)`: the row or the baseline ran in one process" in md


def test_runs_give_the_spread_between_processes():
    """Two runs (processes) of two trials: value = mean of run means, ± = std of the run means, both spreads shown."""
    rows = [{"cell_id": "a", "run_id": "x", "run": run, "trial": t, "status": "ok", "backend": "hf", "precision": "bf16",
             "max_batch_size": 1, "request_throughput": 1.0, "output_throughput": v}
            for run, vals in ((0, (100.0, 101.0)), (1, (110.0, 111.0))) for t, v in enumerate(vals)]
    t = speedup_table(frame(rows))["w"]
    assert t.frame.loc[0, "output_throughput"] == pytest.approx(105.5)
    assert t.frame.loc[0, "output_throughput__std"] == pytest.approx(7.0710678)  # std of (100.5, 110.5)
    headers, (row,) = render_rows(t)
    col = {h: i for i, h in enumerate(headers)}
    assert row[col["runs × trials"]] == "2 × 2" and row[col["tok/s spread: runs / trials"]] == "6.7% / 0.7% ⚠"
    assert t.warnings and "differ by 6.7% (standard deviation of the run means 100.5, 110.5 over their mean; limit 3%)" in t.warnings[0]


def test_missing_baseline_lists_cells():
    rows = [r for r in ROWS if r["cell_id"] != "a"]
    with pytest.raises(BenchInputError) as err:
        speedup_table(frame(rows))
    assert "--baseline backend=trtllm,precision=int4,max_batch_size=2  (ok)" in str(err.value)


def test_empty_store():
    with pytest.raises(BenchInputError, match="empty"):
        speedup_table(pd.DataFrame())


# --- golden files and bad input, from a fixed synthetic store ----------------------------------

import os  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.report.data import report_data  # noqa: E402
from bench.report.render import environment_note, to_csv, to_html  # noqa: E402
from tests.support.synthetic import synthetic_records  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"


def golden_tables():
    # a GPU memory cap on one backend's results (context.gpu_memory_gb)
    recs = synthetic_records(backends=("hf", "trtllm"), precisions=("bf16", "int4"), batch_sizes=(1, 8, 32), trials=3,
                             requests=8, telemetry=False, gpu_memory_gb={"trtllm": 80})
    data = report_data(recs)
    return speedup_table(data.frame), environment_note(data.frame, data.environments)


def check_golden(name: str, text: str):
    path = GOLDEN / name
    if os.environ.get("BENCH_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file; rerun with BENCH_UPDATE_GOLDEN=1 if intended"


def test_golden_markdown_and_csv():
    tables, env = golden_tables()
    check_golden("speedup.md", to_markdown(tables, env))
    check_golden("speedup.csv", to_csv(tables))


def test_html_table_escapes_text():
    rows = [dict(r, backend="<script>alert(1)</script>") if r["cell_id"] == "b" else r for r in ROWS]
    page = to_html(speedup_table(frame(rows)), "Environment:\n- gpu_name: <b>x</b>")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page and "<td>OOM</td>" in page


def test_mixed_gpus_warn_and_show_environment_column():
    recs = synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2), trials=1, requests=4, telemetry=False)
    other = synthetic_records(backends=("hf",), precisions=("int4",), batch_sizes=(1,), trials=1, requests=4,
                              telemetry=False, gpu_name="NVIDIA A100")
    data = report_data(recs + other)
    assert any("mixes environments" in w for w in data.warnings)
    md = to_markdown(speedup_table(data.frame), environment_note(data.frame, data.environments))
    assert "| environment |" in md and "NVIDIA A100" in md and "MIXED" in md




def test_empty_records():
    with pytest.raises(BenchInputError, match="empty"):
        report_data([])


def test_rows_show_model_lengths_and_only_the_options_that_vary():
    from tests.support.records import make_record

    wl = {"name": "sg", "source": "sharegpt", "max_input_len": 1024, "max_total_len": 2048, "max_output_len": 32}

    def cell(bs, cache, compile_):
        return {"backend": "fake", "model": "qwen-7b-shape", "precision": "bf16", "max_batch_size": bs, "device": "cuda",
                "options": {"attn": "sdpa", "cache": cache, "compile": compile_}, "workload": wl}

    metrics = {"completed": 4, "total_input_tokens": 1650, "total_output_tokens": 126, "request_throughput": 1.0}
    recs = [
        make_record("e", cell=cell(1, "dynamic", "off"), output_throughput=20.0, decode_throughput=28.0, **metrics),
        make_record("c", cell=cell(1, "static", "reduce-overhead"), output_throughput=100.0, decode_throughput=190.0,
                    **metrics),
        make_record("o", status="oom", cell=cell(16, "static", "reduce-overhead")),
    ]
    data = report_data(recs)
    (table,) = speedup_table(data.frame, {"backend": "fake", "max_batch_size": 1, "cache": "dynamic"}).values()
    headers, rows = render_rows(table)
    col = {h: i for i, h in enumerate(headers)}
    assert [r[col["options"]] for r in rows] == ["cache=dynamic, compile=off", "cache=static, compile=reduce-overhead",
                                                 "cache=static, compile=reduce-overhead"]  # attn=sdpa is everywhere
    assert {r[col["model"]] for r in rows} == {"qwen-7b-shape"}
    # mean of 4 requests' lengths, and the workload's limits; an OOM row still says what it was asked
    assert rows[0][col["tokens in / out: mean (limit)"]] == "412 (≤1024) / 32 (≤32)"
    assert rows[2][col["tokens in / out: mean (limit)"]] == "– (≤1024) / – (≤32)"
    # throughput speedup is end to end (5x); generation speedup the decode rate's (190 / 28)
    assert rows[1][col["generation speedup"]] == f"{190 / 28:.2f}x (1 run)" and table.frame.loc[1, "generation_speedup"] != 5.0


def test_a_stability_warning_names_its_row_options_and_table():
    """Two bs1 rows of one table differ only in options: the warning says which one did not reproduce."""
    from tests.support.records import make_record

    def cell(cache):
        return {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cpu",
                "options": {"cache": cache}, "workload": {"name": "sg"}}

    recs = [make_record(cid, cell=cell(cache), run=run, request_throughput=1.0, output_throughput=v)
            for cid, cache, vals in (("d", "dynamic", (20.0, 20.1)), ("s", "static", (100.0, 120.0)))
            for run, v in enumerate(vals)]
    (table,) = speedup_table(report_data(recs).frame, {"backend": "fake", "max_batch_size": 1, "cache": "dynamic"}).values()
    (warning,) = table.warnings
    assert warning.startswith("fake/bf16/bs1 [cache=static] on sg: output_throughput: the runs (fresh processes) differ")


def test_a_stability_warning_says_when_the_runs_ran_different_tuned_kernels():
    """int8wo on the H200 (2026-12-01): three processes, three tuned-config digests, 175 / 167 / 249 tok/s."""
    from tests.support.records import make_record

    def tuned(digest):
        return {"inductor": {"coordinate_descent_tuning": True, "tuned": {"kernels": 17, "digest": digest}}}

    def recs(digests, values):
        return [make_record("i", run=run, trial=t, request_throughput=1.0, output_throughput=v + t * 0.1,
                            extra=tuned(d)) for run, (d, v) in enumerate(zip(digests, values, strict=True)) for t in range(3)]

    def warning(records):
        (table,) = speedup_table(report_data(records).frame, {"backend": "fake"}).values()
        return " ".join(table.warnings)

    differ = warning(recs(["2ca593a1", "ee1b23a3", "40526472"], [175.0, 166.8, 248.8]))
    assert "differ by" in differ and "different tuned kernels" in differ
    assert "2ca593a1, ee1b23a3, 40526472" in differ
    same = warning(recs(["2ca593a1"] * 3, [175.0, 166.8, 248.8]))  # same kernels: the warning names no cause
    assert "differ by" in same and "tuned kernels" not in same


def test_rows_order_numeric_options_as_numbers():
    """A rate sweep's rows run 1, 2, 4, 16 req/s, not 1, 16, 2, 4 (the options are a JSON string)."""
    rows = [{"cell_id": f"r{rate}", "trial": 0, "status": "ok", "backend": "openai", "precision": "bf16",
             "max_batch_size": 8, "options": f'{{"request_rate": {rate}}}', "request_throughput": rate / 2,
             "output_throughput": 10.0 * rate} for rate in (16.0, 2.0, 1.0, 4.0)]
    t = speedup_table(frame(rows), baseline={"backend": "openai", "request_rate": 1.0})["w"]
    assert list(t.frame.output_throughput) == [10.0, 20.0, 40.0, 160.0]


def _sweep(values: dict, extra: dict | None = None):
    """Return the speedup table of fake cells bs1 (the baseline) and bs8, their output tok/s per run and trial."""
    from tests.support.records import make_record

    def cell(bs):
        return {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": bs, "device": "cpu",
                "options": {}, "workload": {"name": "w"}}

    recs = [make_record(f"c{bs}", cell=cell(bs), run=run, trial=t, request_throughput=v / 10, output_throughput=v,
                        decode_throughput=v, extra=(extra or {}).get(bs))
            for bs, runs in values.items() for run, trials in enumerate(runs) for t, v in enumerate(trials)]
    (table,) = speedup_table(report_data(recs).frame, {"backend": "fake", "max_batch_size": 1}).values()
    return table


def test_every_speedup_carries_its_interval_from_both_rows_spreads_between_processes():
    from bench.results.stats import ratio_interval

    table = _sweep({1: [[100.0, 101.0], [102.0, 103.0]], 8: [[700.0, 706.0], [712.0, 718.0]]})
    headers, rows = render_rows(table)
    col = {h: i for i, h in enumerate(headers)}
    f = table.frame
    low, high = ratio_interval(f.decode_throughput[1], f.decode_throughput__std[1], 2, f.decode_throughput[0],
                               f.decode_throughput__std[0], 2)
    assert rows[1][col["generation speedup"]] == f"{f.generation_speedup[1]:.2f}x [{low:.2f}-{high:.2f}]"
    assert low < f.generation_speedup[1] < high
    assert rows[0][col["generation speedup"]] == "1.00x"  # the baseline against itself: no interval to give
    md = to_markdown({"w": table})
    assert "`[low-high]`: the 95% interval of a speedup" in md and "(1 run)" not in md


def test_a_speedup_over_an_unstable_or_busy_baseline_is_marked_in_its_cell():
    """The first hour on a 2-core laptop: a bs8 speedup over a baseline whose trials spread 92 % is no result."""
    table = _sweep({1: [[50.0, 150.0, 40.0]], 8: [[700.0, 702.0, 701.0]]})
    headers, rows = render_rows(table)
    col = {h: i for i, h in enumerate(headers)}
    assert rows[1][col["throughput speedup"]].startswith(f"{table.frame.throughput_speedup[1]:.2f}x* ")
    assert rows[1][col["generation speedup"]].endswith("* (1 run)")
    md = to_markdown({"w": table})
    assert "`*`: a speedup whose row or baseline is unstable" in md and "the baseline fake/bf16/bs1 is, so every speedup" in md
    # a stable baseline, a busy row: only that row's speedups are marked, and the footnote points at the ⚠ lines
    busy = {"host_load": {"busy": ["other processes used 1.2 of 2 core(s)"]}}
    table = _sweep({1: [[100.0, 100.5, 100.2]], 8: [[700.0, 702.0, 701.0]]}, extra={8: busy})
    headers, rows = render_rows(table)
    assert "*" not in rows[0][col["generation speedup"]] and "x*" in rows[1][col["generation speedup"]]
    assert "the ⚠ lines name which" in to_markdown({"w": table})
    # stable on both sides: nothing marked, no footnote
    table = _sweep({1: [[100.0, 100.5, 100.2]], 8: [[700.0, 702.0, 701.0]]})
    assert "*" not in to_markdown({"w": table}).split("\n\n")[1]

def test_the_environment_note_names_the_cudnn_that_ran_and_not_a_missing_one():
    """Records from before cuDNN was stated (no key) beside new ones: the note names the version, never 'None', and a
    cuDNN difference alone is stated, not flagged as incomparable (torch's own version decides comparability)."""
    recs = synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1,), trials=1, requests=2, telemetry=False)
    data = report_data(recs)
    envs = [{**data.environments[0], "cudnn": "9.19.0"}, {**data.environments[0], "cudnn": "9.10.2"},
            {k: v for k, v in data.environments[0].items() if k != "cudnn"}]
    note = environment_note(data.frame, envs)
    assert "- cudnn: 9.10.2, 9.19.0\n" in note + "\n" and "None" not in note and "MIXED" not in note


def test_a_gpu_row_whose_timed_pass_ran_shapes_its_warm_up_had_not_is_flagged():
    """The hf backend records `unwarmed_batches` (the pass's batches at a shape its warm-up did not run): on a GPU
    those carry first-time costs (cuDNN attention's graph per new length: 37-39 ms each on an H100), so the row says
    so; on a CPU the warm-up runs the worst batch of each size only, by design, and says nothing."""
    from dataclasses import replace

    recs = synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2), trials=2, requests=4,
                             telemetry=False)
    cold = [replace(r, extra={**r.extra, "unwarmed_batches": 3 if r.cell.get("max_batch_size") == 1 else 0})
            for r in recs]
    warns = [w for t in speedup_table(report_data(cold).frame).values() for w in t.warnings]
    flagged = [w for w in warns if "warm-up left shapes out" in w]
    assert len(flagged) == 2 and all("hf/bf16/bs1 " in w and "3 of the timed pass's batches" in w for w in flagged)
    assert {w.split(" on ")[1].split(":")[0] for w in flagged} == {"sharegpt", "fixed-128-128"}  # one a table
    on_cpu = [replace(r, cell={**r.cell, "device": "cpu"}) for r in cold]
    warns = [w for t in speedup_table(report_data(on_cpu).frame).values() for w in t.warnings]
    assert not any("warm-up left shapes out" in w for w in warns)
