"""Profiling: kernel timelines of a short window of a cell, per NVTX range and kernel category.

Owns the NVTX ranges (`nvtx`), the two collectors that produce the same KernelTable
(`torch_collector`, `nsys_collector`), the table and the kernel categories (`kernels`), the
profiling worker (`session`) and its figures (`figures`). May import: the spec stage,
workloads, execution, backends and results; never reports or commands.
"""
