"""Profiling: kernel timelines of a short window of a cell, per NVTX range and kernel category.

Owns the driver of `bench profile` (`driver`: settings, one session per cell, its record), the
read-back of a profiler's report into kernel tables (`readback`: after a session, and `bench
kernels` on a report made elsewhere), the NVTX ranges (`nvtx`), the collectors that produce the
same KernelTable (`torch_collector`, `nsys_collector`, `ncu_collector`), the table and the
kernel categories (`kernels`) and the profiling worker (`session`). May import: the spec stage,
workloads, execution, backends and results; never report, study or commands.
"""
