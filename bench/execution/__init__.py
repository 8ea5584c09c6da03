"""Execution: starting the processes that run cells, and turning each pass into an event.

Owns the one worker launcher (`launcher`: the child's environment, its own process group, the
timeout-and-kill rule, its log, its outcome; every verb starts a cell's process through it), the
parent side of a build group (`supervisor`: the event stream, progress timeouts, a hang or a
death as its cell's outcome), the worker (`worker`: build once, warm up, measure, assemble a
pass's metrics), the executors that place workers (`executors`), the pool that runs session-style
children N at a time (`session_pool`) and the progress display (`progress`). May import: base,
machine, spec, workloads, serving and backends; never results (the run driver in bench.runner
writes the store).
"""
