"""Store parsing and selection through bench.results.query, the one reader every report uses."""

from bench.results import query


def test_load_store(benchmark, synthetic_store):
    records = benchmark(query.load, [synthetic_store])
    assert len(records) == 212


def test_select_latest_runs(benchmark, synthetic_store):
    records = query.load([synthetic_store])
    selection = benchmark(query.select, records)
    assert selection.records
