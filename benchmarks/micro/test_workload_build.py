"""Workload build: read, sample, tokenize and filter a ShareGPT slice, as `bench workload build` does."""

import warnings

from bench.spec.cells import WorkloadSpec
from bench.workloads.workload import build_workload

SPEC = WorkloadSpec(name="micro", num_requests=32, max_input_len=256, max_total_len=512, max_output_len=32)


def _build():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package's copy of ShareGPT is truncated by design
        return build_workload(SPEC)


def test_build_sharegpt_slice(benchmark):
    wl = benchmark.pedantic(_build, rounds=3, warmup_rounds=1)  # warm-up: tokenizer ranks, page cache
    assert len(wl.requests) == 32


def test_build_synthetic_fixed_lengths(benchmark):
    spec = WorkloadSpec(name="micro-fixed", source="synthetic", num_requests=256, input_len=512, output_len=128)
    wl = benchmark(build_workload, spec)
    assert len(wl.requests) == 256
