"""Execution: running a build group's cells in worker processes and turning each pass into an event.

Owns the parent side of a build group (`supervisor`: subprocess, timeouts, deaths, logs), the
worker (`worker`: build once, warm up, measure, assemble a pass's metrics), the executors that
place workers (`executors`) and the progress display (`progress`). May import: base, machine,
spec, workloads, serving and backends; never results (the run driver in bench.runner writes
the store).
"""
