"""Matrix files the tests write."""

from __future__ import annotations

from pathlib import Path


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
