"""Where a test runs: its own folder and the environment every test of the suite has (tests/conftest.py).

A module- or session-scoped fixture is set up before the first test's own folder and environment exist, so
it runs in whatever folder and environment came before. One that runs workers makes it here too
(`isolated`): in another environment (PYTHONPATH is read at import) the suite's zygote would be replaced
for the fixture and again for the test after it, each time paying torch's and transformers' imports (3-4 s)
at the next hf worker (bench.execution.zygote.shared).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import ROOT


def isolate(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in `folder`: results/, engines/, dashboards/ never touch the repo; the suite's environment."""
    monkeypatch.chdir(folder)
    paths = os.environ.get("PYTHONPATH", "")
    # ROOT once: `isolated` inside a test (which the suite isolates already) put it there a second time, a PYTHONPATH
    # unlike the suite zygote's, which was replaced for the test's workers and again after it (4-5 s of imports).
    if paths.split(os.pathsep)[0] != str(ROOT):
        monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + paths)
    # `bench build` builds under an absolute root (engine_artifact.BUILD_ROOT): the folder's own.
    monkeypatch.setenv("BENCH_ARTIFACT_BUILD_ROOT", str(folder / "engine-builds"))
    # `bench build` records what it made in a ledger of trusted artifacts (bench.backends.artifact_trust): the folder's own.
    monkeypatch.setenv("BENCH_TRUSTED_ARTIFACTS", str(folder / "state" / "trusted-artifacts.json"))


@contextmanager
def isolated(folder: Path) -> Iterator[Path]:
    """In `folder` with the environment a test has (isolate), for a fixture of wider scope; all undone after."""
    with pytest.MonkeyPatch.context() as mp:
        isolate(folder, mp)
        yield folder
