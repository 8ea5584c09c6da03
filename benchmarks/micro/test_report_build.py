"""Report build: typed records -> frames -> speedup tables -> the whole report (tables + dashboard written)."""

import warnings

from bench.report.build import build_report
from bench.report.data import report_data
from bench.report.render import to_markdown
from bench.report.tables import speedup_table
from bench.results import query


def test_report_frames(benchmark, synthetic_store):
    records = query.select(query.load([synthetic_store])).records
    data = benchmark(report_data, records)
    assert len(data.frame) == len(records)


def test_speedup_tables(benchmark, synthetic_store):
    frame = report_data(query.select(query.load([synthetic_store])).records).frame
    markdown = benchmark(lambda: to_markdown(speedup_table(frame)))
    assert "OOM" in markdown


def test_build_report(benchmark, synthetic_store, tmp_path):
    def build():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return build_report([synthetic_store], tmp_path / "report")

    paths = benchmark.pedantic(build, rounds=5, warmup_rounds=1)
    assert paths["dashboard"].stat().st_size > 0
