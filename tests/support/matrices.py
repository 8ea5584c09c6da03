"""Matrix files the tests write."""

from __future__ import annotations

from pathlib import Path

from bench.spec.matrix import parse_matrix


def fake_matrix(tiny_sharegpt, **over):
    """Return the fake backend's matrix on qwen-tiny (batch 1 and 4, 2 trials, short timeouts) on the CPU, `over`
    replacing any of its keys (e.g. device="cuda": the fake backend runs anywhere)."""
    data = {
        "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1, 4],
        "workloads": ["w"], "device": "cpu", "trials": 2, "warmup": 1, "timeout_s": 20, "build_timeout_s": 20,
        "workload": {"w": {"num_requests": 8, "path": str(tiny_sharegpt), "max_output_len": 16}},
    }
    data.update(over)
    return parse_matrix(data)


def tiny_hf_matrix(path: Path, name: str, backends: str = '["hf"]') -> Path:
    """Write the small qwen-tiny CPU matrix the profiling tests run (fp32 and bf16, batch 1) to `path`."""
    path.write_text(f"""
name = "{name}"
backends = {backends}
model = "qwen-tiny"
device = "cpu"
precisions = ["fp32", "bf16"]
max_batch_sizes = [1]
workloads = ["w"]
[workload.w]
num_requests = 2
max_input_len = 64
max_total_len = 128
max_output_len = 8
""")
    return path


def planted_matrix(name: str, plants: list[str], runs: int, baseline: str | None = None) -> str:
    """Return the text of a qwen-tiny CPU matrix whose cells differ only in `plant` (one request of 8 + 4 tokens, one
    trial a process, one warm-up); `baseline`: the plant of the matrix's baseline cell, where it names one."""
    import json

    base = "" if baseline is None else \
        f'baseline = {{ backend = "hf", precision = "fp32", max_batch_size = 1, plant = "{baseline}" }}\n'
    return (f'name = "{name}"\nbackends = ["hf"]\nmodel = "qwen-tiny"\ndevice = "cpu"\nprecisions = ["fp32"]\n'
            f'max_batch_sizes = [1]\nworkloads = ["syn"]\ntrials = 1\nruns = {runs}\nwarmup = 1\n{base}[options]\n'
            f'plant = {json.dumps(plants)}\n[workload.syn]\nsource = "synthetic"\nnum_requests = 1\ninput_len = 8\n'
            'output_len = 4\n')
