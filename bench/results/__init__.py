"""Results: typed records, the run context every record carries, the store and the one query API.

Writers (matrix runs, OOM probes, profiles, the asv suite, test helpers) build every stored
line with `records.new_record` and append it with `store`; readers (tables, dashboard, `bench
compare`, the OOM frontier, the asv suite, scripts) load and select through `query`, which reads
every stored line through `jsonl.read_lines` (plain or .jsonl.gz); `stats` and `compare` judge
spreads and regressions. A reported figure aggregates one run context of a cell (the latest)
unless pooling is asked for (docs/guide/results.md). What a pass's timings mean is defined in
bench.metrics (the base stage). May import: base, machine (the environment's comparability
keys), spec and workloads, and of execution only the pure schedule of bench.execution.session_pool
(`makespan`: the accuracy estimate follows the schedule its sessions run by); nothing that runs,
probes, profiles or reports.
"""
