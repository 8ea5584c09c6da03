"""Results: typed records, the run context every record carries, and the one query API.

Writers (matrix runs, OOM probes, profiles, the asv suite, test helpers) build every stored
line with `records.new_record`; readers (tables, dashboard, `bench compare`, the OOM frontier,
the asv suite, scripts) load and select through `query`. A reported figure aggregates one run
context of a cell (the latest) unless pooling is asked for; repeats come in two levels,
trials inside a worker process and runs in fresh processes (docs/results.md).
May import: bench (errors, spec's hashing), bench.execution.environment, bench.results.stats; nothing that runs.
"""
