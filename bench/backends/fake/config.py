"""The fake backend's declaration: precisions and options (deterministic virtual clock, for tests)."""

from __future__ import annotations

from bench.backends.declaration import (
    TENSOR_PARALLEL,
    BackendConfig,
    Option,
    check_tensor_parallel,
)


class FakeConfig(BackendConfig):
    name = "fake"
    computes_on_device = False  # a simulation: its device is a label, tests place it on any
    precisions = ("fp32", "fp16", "bf16", "int8", "int4")
    options = {
        "step_ms": Option(10.0, kind=(int, float), minimum=0, help="fixed cost of one decode step"),
        "step_ms_per_seq": Option(0.5, kind=(int, float), minimum=0, help="extra decode-step cost per sequence in the batch"),
        "prefill_ms_per_token": Option(0.05, kind=(int, float), minimum=0),
        "noise": Option(0.0, kind=(int, float), minimum=0, in_build_key=False, help="relative std of per-step time"),
        "slowdown": Option(1.0, kind=(int, float), minimum=0, in_build_key=False, help="multiplies every duration"),
        "memory_gb": Option(0.0, kind=(int, float), minimum=0, help="device memory; 0 = unlimited"),
        "weights_gb": Option(1.0, kind=(int, float), minimum=0),
        "kv_bytes_per_token": Option(524288, kind=int, minimum=0, help="KV cache bytes per token (Qwen-7B bf16: 512 KiB)"),
        "oom_flaky_band": Option(
            0.0, kind=(int, float), in_build_key=False, minimum=0, maximum=1,
            help="fraction of memory below the limit where a batch OOMs on alternate runs (non-monotonic noise)",
        ),
        "fail": Option("none", ("none", "crash", "hang", "error", "oom", "build-oom", "build-hang", "sigkill")),
        "seed": Option(0, kind=int, in_build_key=False, minimum=0),
        "short_rows": Option(
            0, kind=int, in_build_key=False, keeps_ids_at_default=True, minimum=0,
            help="the first N requests of each pass produce one token fewer than asked (the length check must fail)",
        ),
        "wall_ms": Option(
            0, kind=(int, float), in_build_key=False, keeps_ids_at_default=True, minimum=0,
            help="real milliseconds each pass sleeps (the virtual clock costs no wall time): executor tests",
        ),
        "tuning_spread": Option(
            0.0, kind=(int, float), keeps_ids_at_default=True,
            help="simulate a tuned build: each cold build draws a speed factor in 1 ± this and a tuned digest, "
                 "kept in its engine folder (tuned.json) and carried by its artifact (tests of tuning spread)",
        ),
        "diverge_at": Option(
            -1, kind=int, in_build_key=False, keeps_ids_at_default=True, minimum=-1,
            help="the generated ids of every request differ from the common ones from this position on (-1: never): "
                 "tests of timed-output parity",
        ),
        "tensor_parallel_size": TENSOR_PARALLEL,
    }

    @classmethod
    def validate(cls, cell) -> None:
        super().validate(cell)
        check_tensor_parallel(cell, kv_heads_too=False)
