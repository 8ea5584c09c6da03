"""The asv suite's figure for a cell is the figure `bench report` prints for the same records."""

import re

from bench.report.build import build_report
from benchmarks import asv_cells


def test_asv_value_is_the_report_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_ASV_FAKE_NOISE", "0.02")
    matrix = asv_cells._fake_matrix()
    values = asv_cells.measure(matrix, keep_store=tmp_path / "kept")
    store = tmp_path / "kept" / f"{matrix.name}.jsonl"
    table = build_report([store], tmp_path / "report", {"backend": "fake", "max_batch_size": 1})["markdown"].read_text()
    for label, v in values.items():
        bs = label.split("bs")[1]
        row = next(line for line in table.splitlines() if line.startswith(f"| fake | bf16 | {bs} |"))
        tok_s = float(re.split(r"\s*\|\s*", row)[5].split(" ± ")[0])  # the 'output tok/s' column
        assert abs(1000.0 / v["ms_per_output_token"] - tok_s) <= 0.05 + 1e-3 * tok_s, (label, row)
