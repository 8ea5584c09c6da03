"""Harness micro-benchmarks (pytest-benchmark): `nox -s micro-benchmarks`, not part of `nox -s tests`.

The suite lives outside `testpaths`, so the default test run never collects it. The tree's
own `bench` and `tests.support` come first on the path, as in tests/conftest.py.
"""

import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def synthetic_store(tmp_path_factory) -> Path:
    """A store of 212 synthetic records: 2 workloads x 2 backends x 3 precisions x 6 batch sizes, 3 trials each
    (an OOM cell stores one record); each holds 32 per-request samples and an 11-point telemetry timeline.
    """
    from tests.support.synthetic import synthetic_records, write_store

    path = tmp_path_factory.mktemp("micro") / "synthetic.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_store(path, synthetic_records())
    return path
