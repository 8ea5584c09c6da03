"""nox sessions: tests, gpu-tests, lint, bench-matrix, dashboard, asv, asv-planted, micro-benchmarks.

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

CPU_TORCH = "torch==2.13.0"  # asv.conf.json's matrix pins the same (tests/test_asv_config.py)
ASV = "asv==0.6.6"  # scripts/asv_site.py vendors the scripts this version's site loads
# What `nox -s asv` fails on: deterministic values (FakeCell: the fake backend's virtual clock)
# and values asv times itself, with its statistics (the harness's hot paths). ModelCell's CPU
# values are single wall-clock medians that a shared 2-core machine moves by more than any
# useful factor (docs/guide/regressions.md): they are printed and published, not gated, on the CPU.
ASV_GATED = r"^asv_cells\.FakeCell|^asv_harness\."
ASV_TRACKED = r"^asv_cells\.ModelCell"


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


def _chromium(session: nox.Session) -> None:
    # The dashboard test and the asv site check open pages in headless Chromium (Debian's
    # package); CI runs as root.
    if not shutil.which("chromium") and os.geteuid() == 0:
        session.run("apt-get", "update", external=True, success_codes=[0, 100])
        session.run("apt-get", "install", "-y", "--no-install-recommends", "chromium", external=True, success_codes=[0, 100])


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (GPU tests are skipped without a GPU)."""
    _install(session, "test")
    _chromium(session)
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


@nox.session(name="micro-benchmarks")
def micro_benchmarks(session: nox.Session) -> None:
    """The harness's own hot paths under pytest-benchmark: workload build, store load, report build, SSE parsing.

    Not part of `tests` (benchmarks/micro is outside testpaths). Each run is saved as JSON under
    .benchmarks/ and compared with the latest saved run of this machine; pass e.g.
    `-- --benchmark-compare-fail=median:25%` to fail on a slowdown (docs/guide/regressions.md).
    """
    _install(session, "test")
    session.run("python", "-m", "pytest", "benchmarks/micro", "-p", "no:cacheprovider", "--benchmark-only",
                "--benchmark-autosave", "--benchmark-compare", "--benchmark-sort=name",
                "--benchmark-columns=min,median,iqr,ops,rounds", *session.posargs)


@nox.session
def asv(session: nox.Session) -> None:
    """`asv continuous` between two commits (default HEAD~1 HEAD); fails on a regression.

    `nox -s asv -- BASE HEAD [more asv args]`. The factor is BENCH_ASV_FACTOR (default 1.25:
    25% worse, above the noise of the harness's CPU times on a loaded 2-core machine and below a
    30% slowdown; on a quiet, dedicated machine use 1.10). asv builds a wheel of each commit and
    installs it, with the CPU torch, into a virtualenv under .asv/env; then `asv publish` writes
    dashboards/asv, made to work offline and opened in headless Chromium (scripts/asv_site.py).
    GPU machines: docs/guide/regressions.md.
    """
    session.install(ASV, "virtualenv")
    base, head, *extra = session.posargs if len(session.posargs) >= 2 else ["HEAD~1", "HEAD"]
    factor = os.environ.get("BENCH_ASV_FACTOR", "1.25")
    session.run("asv", "machine", "--yes", silent=True)
    continuous = ["asv", "continuous", "--factor", factor, "--launch-method", "spawn", *extra]
    try:
        session.log("ModelCell (the real model on the CPU): compared and published, not gated")
        session.run(*continuous, "--bench", ASV_TRACKED, base, head, success_codes=[0, 1])
        session.log(f"the gate: {ASV_GATED}")
        session.run(*continuous, "--bench", ASV_GATED, base, head)
    finally:
        session.run("asv", "publish")
        _chromium(session)
        session.run("python", "-m", "scripts.asv_site", "dashboards/asv")


@nox.session(name="asv-planted")
def asv_planted(session: nox.Session) -> None:
    """Plant a 30% slowdown in a throwaway clone: `asv continuous` must catch it and pass its undo.

    `nox -s asv-planted -- --mode existing` checks the GPU flow's script the same way, in seconds.
    """
    session.install(ASV, "virtualenv")
    if "existing" in session.posargs:
        _install(session)  # the existing-environment mode runs the suite in this session's Python
    session.run("python", "-m", "scripts.asv_planted", *session.posargs)
