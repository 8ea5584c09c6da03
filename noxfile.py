"""nox sessions: tests, gpu-tests, lint, bench-matrix, dashboard, asv.

On a machine without a CUDA GPU the sessions install torch's CPU build first (torch==2.13.0),
so nothing pulls a multi-GB CUDA wheel. On a machine whose Python already has torch with CUDA
(a GPU box, NVIDIA's containers), `bench-matrix` runs in that existing environment instead of
building a new one; force either way with BENCH_NOX_REUSE_ENV=1 / 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import nox

nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = False

CPU_TORCH = "torch==2.13.0"


def _system_has_cuda_torch() -> bool:
    forced = os.environ.get("BENCH_NOX_REUSE_ENV")
    if forced is not None:
        return forced == "1"
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
            capture_output=True, timeout=120,
        )
        return probe.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


REUSE = _system_has_cuda_torch()


def _install(session: nox.Session, *extras: str) -> None:
    session.install(CPU_TORCH)  # the CPU build: first, so the project's `torch` is satisfied
    target = ".[" + ",".join(extras) + "]" if extras else "."
    session.install("-e", target)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (GPU tests are skipped without a GPU)."""
    _install(session, "test")
    if not shutil.which("chromium") and os.geteuid() == 0:
        # The dashboard test opens the page in headless Chromium (Debian's package); CI runs as root.
        session.run("apt-get", "update", external=True, success_codes=[0, 100])
        session.run("apt-get", "install", "-y", "--no-install-recommends", "chromium", external=True, success_codes=[0, 100])
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]))


@nox.session(name="gpu-tests", venv_backend="none")
def gpu_tests(session: nox.Session) -> None:
    """Run the tests marked `gpu` (tests/test_gpu.py) on this machine's GPU, in the existing environment.

    GPU machines come with torch (CUDA build) and transformers installed and may have no
    network, so this session installs nothing and runs the interpreter nox runs in (start it
    as `python3 -m nox -s gpu-tests` with the Python that has torch); it fails at once where
    torch sees no GPU (instead of reporting skipped tests as a pass). Same as:
    `python3 -m pytest -m gpu tests/test_gpu.py -v -rs`.
    """
    session.run(sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else "
                "'gpu-tests: torch sees no CUDA device here (run on the GPU machine)')", external=True)
    session.run(sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-v", "-rs", "-p", "no:cacheprovider",
                *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "bench", "tests", "noxfile.py")


@nox.session(name="bench-matrix", venv_backend="none" if REUSE else None)
def bench_matrix(session: nox.Session) -> None:
    """Run a matrix (default: the CPU preset) and build its tables and dashboard.

    Arguments pass through: `nox -s bench-matrix -- --preset h200-qwen7b`.
    """
    if not REUSE:
        _install(session)
    session.run("python", "-m", "bench", "run", *session.posargs)


@nox.session(venv_backend="none" if REUSE else None)
def dashboard(session: nox.Session) -> None:
    """Rebuild tables and dashboards from every store in results/."""
    if not REUSE:
        _install(session)
    session.run("python", "-m", "bench", "report", *session.posargs)


@nox.session
def asv(session: nox.Session) -> None:
    """`asv continuous` between two commits (default HEAD~1 HEAD); fails on a regression.

    `nox -s asv -- BASE HEAD [more asv args]`. The factor is BENCH_ASV_FACTOR (default 1.10:
    10% worse). asv builds each commit into its own virtualenv under .asv/env; the HTML goes to
    dashboards/asv. GPU machines: see docs/regressions.md (existing environment, spawn).
    """
    session.install("asv>=0.6", "virtualenv")
    base, head, *extra = session.posargs if len(session.posargs) >= 2 else ["HEAD~1", "HEAD"]
    factor = os.environ.get("BENCH_ASV_FACTOR", "1.10")
    session.run("asv", "machine", "--yes")
    try:
        session.run("asv", "continuous", "--factor", factor, "--launch-method", "spawn", *extra, base, head)
    finally:
        session.run("asv", "publish", success_codes=[0, 1])
