"""SLO capacity search: the largest load (request rate, concurrency or batch size) whose latency percentiles meet an SLO.

Owns the driver of `bench capacity` (`driver`: one search per configuration, the report file),
the search (`search`: pure: SLO parsing, the load grid, bench.oom.search's bracketing and
bisection, the report) and the probes (`probes`: full measured passes through the worker
machinery, stored as `capacity-probe` records). May import: the spec stage, workloads,
execution (the supervisor), backends (the registry), results, runner (the matrix's group
context) and bench.oom.search (the same analysis stage); never report, study or commands.
"""
