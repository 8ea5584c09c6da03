"""The asv suite's figure for a cell is the figure `bench report` prints for the same records."""

import pandas as pd
import pytest

from bench.report.build import build_report
from benchmarks import asv_cells


def test_asv_value_is_the_report_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_ASV_FAKE_NOISE", "0.02")
    matrix = asv_cells._fake_matrix()
    values = asv_cells.measure(matrix, keep_store=tmp_path / "kept")
    store = tmp_path / "kept" / f"{matrix.name}.jsonl"
    paths = build_report([store], tmp_path / "report", {"backend": "fake", "max_batch_size": 1})
    table = pd.read_csv(paths["csv"]).set_index("max_batch_size")
    assert values and set(values) == {f"bf16/bs{bs}" for bs in table.index}
    for label, v in values.items():
        tok_s = table.loc[int(label.split("bs")[1]), "output_throughput"]
        assert 1000.0 / v["ms_per_output_token"] == pytest.approx(tok_s, rel=1e-5), label
