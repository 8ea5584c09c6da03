"""OOM boundary: the largest max_batch_size that fits each input/output length, found with few probes.

Owns the driver of `bench oom` (`driver`: settings, one search per configuration and length
pair, the frontier file), the search (`search`: pure, driven by a probe function; the frontier
table) and the probes (`probes`: one full worst-case batch through the worker machinery, stored
as an `oom-probe` record). May import: the spec stage, workloads, execution (the supervisor),
backends (the registry), results and runner (the matrix's group context); never report, study
or commands.
"""
