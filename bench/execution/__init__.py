"""Execution: running a matrix's cells in worker processes and turning each pass into an event.

Owns the parent side of a build group (`supervisor`: subprocess, timeouts, deaths, logs), the
worker (`worker`: build once, warm up, measure), the one failure classifier (`failures`), the
memory cap (`memory_cap`), NVML telemetry (`telemetry`), the environment fingerprint
(`environment`) and the progress display (`progress`). May import: the spec stage, workloads,
backends, serving and bench.results.metrics (which sits in this stage). `matrix` is the
run driver: it sits one stage down, with results, because it plans from the store and appends
each record as it arrives (docs/architecture.md).
"""
