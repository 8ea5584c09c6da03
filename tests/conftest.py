import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"

# Inductor probes, in each new cache folder, which vector instruction sets the C++ compiler builds: a C++ build and a
# Python subprocess per set, 6.6 s on the 2-core CI machine. Each compiled build key has a cache folder of its own
# (bench.backends.hf.backend), so every test that compiles on the CPU paid it again (about 12 s of the suite's
# Inductor tests, measured 2026-12-06). With this the CPU's own flags still choose the sets (the same list there:
# avx512 avx512_vnni, avx512, avx2), and a compiler that could not build one would fail the test's compile.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


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


@pytest.fixture(autouse=True)
def _isolate_cwd(tmp_path, monkeypatch):
    """Every test runs in its own folder: results/, engines/, dashboards/ never touch the repo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # `bench build` builds under an absolute root (engine_artifact.BUILD_ROOT): the test's own.
    monkeypatch.setenv("BENCH_ARTIFACT_BUILD_ROOT", str(tmp_path / "engine-builds"))
    # `bench build` records what it made in a ledger of trusted artifacts (bench.backends.artifact_trust): the test's own.
    monkeypatch.setenv("BENCH_TRUSTED_ARTIFACTS", str(tmp_path / "state" / "trusted-artifacts.json"))
