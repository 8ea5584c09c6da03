import pandas as pd
import pytest

from bench.errors import BenchInputError
from bench.report.tables import render_rows, speedup_table, to_markdown


def frame(rows):
    base = {"store": "s", "model": "m", "device": "cpu", "workload": "w", "options": "{}", "gpu_name": None,
            "commit": None, "error": None, "started_at": 0.0, "schema_version": 1}
    return pd.DataFrame([{**base, **r} for r in rows])


ROWS = [
    {"cell_id": "a", "trial": 0, "status": "ok", "backend": "hf", "precision": "bf16", "max_batch_size": 1,
     "request_throughput": 0.12, "output_throughput": 60.0},
    {"cell_id": "a", "trial": 1, "status": "ok", "backend": "hf", "precision": "bf16", "max_batch_size": 1,
     "request_throughput": 0.12, "output_throughput": 62.0},
    {"cell_id": "b", "trial": 0, "status": "ok", "backend": "trtllm", "precision": "int4", "max_batch_size": 2,
     "request_throughput": 0.5, "output_throughput": 333.6},
    {"cell_id": "c", "trial": 0, "status": "oom", "backend": "trtllm", "precision": "int4", "max_batch_size": 4,
     "request_throughput": None, "output_throughput": None},
]


def test_speedups_spread_and_oom_rows():
    t = speedup_table(frame(ROWS))["w"]
    assert list(t.backend) == ["hf", "trtllm", "trtllm"]
    assert t.loc[1, "throughput_speedup"] == pytest.approx(0.5 / 0.12)
    assert t.loc[1, "generation_speedup"] == pytest.approx(333.6 / 61.0)
    headers, rows = render_rows(t)
    assert rows[0][3] == "0.120 ± 0.000" and rows[0][4] == "61.0 ± 1.4"
    assert rows[2][3:7] == ["OOM"] * 4
    md = to_markdown({"w": t})
    assert "| trtllm | int4 | 2 | 0.500 | 333.6 | 4.17x | 5.47x |" in md


def test_missing_baseline_lists_cells():
    rows = [r for r in ROWS if r["cell_id"] != "a"]
    with pytest.raises(BenchInputError) as err:
        speedup_table(frame(rows))
    assert "trtllm/int4/bs2 (ok)" in str(err.value) and "--baseline" in str(err.value)


def test_empty_store():
    with pytest.raises(BenchInputError, match="empty"):
        speedup_table(pd.DataFrame())
