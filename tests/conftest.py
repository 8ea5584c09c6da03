import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def tiny_sharegpt(tmp_path) -> Path:
    """A small ShareGPT-format file (complete, valid)."""
    records = []
    for i in range(40):
        records.append({
            "id": f"r{i}",
            "conversations": [
                {"from": "human", "value": f"Question number {i}: " + "tell me about the weather " * (1 + i % 7)},
                {"from": "gpt", "value": "Here is a long answer about it. " * (2 + i % 5)},
            ],
        })
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records, indent=2))
    return path


def write_matrix(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


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


@pytest.fixture(autouse=True)
def _isolate_cwd(tmp_path, monkeypatch):
    """Every test runs in its own folder: results/, engines/, dashboards/ never touch the repo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def make_record(cell_id="a", trial=0, status="ok", *, run=0, run_id="run-1", started_at=1.0, commit="c" * 40,
                cell=None, kind="measurement", env=None, cap=None, baseline=None, extra=None, **metrics):
    """Return a typed record for tests, built by the one constructor (bench.results.records.new_record)."""
    from bench.results.records import RunContext, new_record

    cell = cell or {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cpu",
                    "options": {}, "workload": {"name": "w"}}
    ctx = RunContext(run_id=run_id, command="test", matrix="t", commit=commit, dirty=False, gpu_memory_gb=cap,
                     started_at=started_at, baseline=baseline)
    outcome = {"cell_id": cell_id, "trial": trial, "status": status, "metrics": metrics or None, "extra": extra,
               "started_at": started_at + trial, "ended_at": started_at + trial + 1}
    return new_record(kind, cell, outcome, context=ctx, run=run, environment=env or {"cpu": "test", "torch": "x"})
