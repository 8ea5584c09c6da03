"""Results: typed records, the run context every record carries, the store and the one query API.

Writers (matrix runs, OOM probes, profiles, the asv suite, test helpers) build every stored
line with `records.new_record` and append it with `store`; readers (tables, dashboard, `bench
compare`, the OOM frontier, the asv suite, scripts) load and select through `query`; `stats`
and `compare` judge spreads and regressions. A reported figure aggregates one run context of a
cell (the latest) unless pooling is asked for (docs/results.md). `metrics` (what a pass's
timings mean) lives here but sits in the execution stage: the worker computes it. May import:
the spec stage, workloads, execution (the environment's comparability keys); nothing that
runs, probes, profiles or reports.
"""
