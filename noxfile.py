"""nox sessions: tests, gpu-tests, lint, bench-matrix, dashboard, asv, asv-planted, micro-benchmarks.

Torch, one version for every session and the README's install (CPU_TORCH): the sessions install
it first, so the project's `torch>=2.4` is already met. Which build (`torch_install_args`, a pure
function tests/test_noxfile.py checks): on a machine without an NVIDIA GPU, the CPU build from
PyTorch's CPU wheel index (https://download.pytorch.org/whl/cpu), so nothing pulls the multi-GB
CUDA wheels; where that index cannot be reached within a few seconds (an offline machine whose
pip configuration serves a local wheel), pip's own configuration (its default index, PyPI unless
configured otherwise); on a machine with an NVIDIA GPU, the default index's build (CUDA on
Linux). BENCH_TORCH_INDEX = cpu | default | URL forces the choice.

On a machine whose Python already has torch with CUDA (a GPU box, NVIDIA's containers),
`bench-matrix` and `dashboard` run in that existing environment instead of building a new one;
force either way with BENCH_NOX_REUSE_ENV=1 / 0. Otherwise they share one environment,
.nox/bench-shared (the project and torch, no test extras), built once and rebuilt only when
pyproject.toml or the torch choice changes: a dashboard rebuild then costs the report, not a
new 2 GB virtualenv. `tests` keeps its own (CI runs it; it adds the test extras).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = False

CPU_TORCH = "torch==2.13.0"  # asv.conf.json's matrix and the README's install pin the same (tests check)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 5.0  # how long the CPU index may take to answer before pip's configured index is used
SHARED_ENV = Path(".nox") / "bench-shared"
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


def has_nvidia_gpu() -> bool:
    """Return True where an NVIDIA driver is loaded (no torch, no CUDA context: the driver's files)."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def index_reachable(url: str = CPU_INDEX, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Return True when `url` answers within timeout_s (proxies from the environment apply, as for pip).

    The request runs in a thread joined with the timeout, so a resolver that hangs costs
    timeout_s too, never pip's minutes of retries.
    """
    answer: list[bool] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(url + "/torch/", timeout=timeout_s):  # headers only: the body is not read
                answer.append(True)
        except urllib.error.HTTPError:
            answer.append(True)  # it answered: reachable (pip will say what it thinks of the answer)
        except Exception:  # no route, no name, refused, timed out
            answer.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answer and answer[0])


def torch_install_args(has_gpu: bool, reachable: Callable[[], bool], forced: str | None = None) -> tuple[list[str], str]:
    """Return (pip install arguments for CPU_TORCH, why), choosing the build as the module docstring says.

    reachable() is asked only when the CPU index is a candidate (no GPU, nothing forced).
    """
    cpu = [CPU_TORCH, "--index-url", CPU_INDEX]
    if forced:
        if forced == "cpu":
            return cpu, "BENCH_TORCH_INDEX=cpu: the CPU build from PyTorch's CPU index"
        if forced == "default":
            return [CPU_TORCH], "BENCH_TORCH_INDEX=default: pip's configured index"
        return [CPU_TORCH, "--index-url", forced], f"BENCH_TORCH_INDEX: the index {forced}"
    if has_gpu:
        return [CPU_TORCH], "an NVIDIA GPU here: the default index's build (CUDA on Linux)"
    if reachable():
        return cpu, f"no NVIDIA GPU: the CPU build from {CPU_INDEX}"
    return [CPU_TORCH], (f"no NVIDIA GPU, and {CPU_INDEX} could not be reached (probe bounded to {PROBE_TIMEOUT_S:g} s): "
                         "pip's configured index (on PyPI itself that is the CUDA build on Linux)")


_TORCH_CHOICE: list = []  # one probe per nox invocation, whatever the number of sessions


def _torch_choice() -> tuple[list[str], str]:
    if not _TORCH_CHOICE:
        _TORCH_CHOICE.append(torch_install_args(has_nvidia_gpu(), index_reachable, os.environ.get("BENCH_TORCH_INDEX")))
    return _TORCH_CHOICE[0]


def _install(session: nox.Session, *extras: str) -> None:
    args, why = _torch_choice()
    session.log(f"torch: {' '.join(args)} ({why})")
    session.install(*args)  # first, so the project's `torch` is satisfied by this build
    target = ".[" + ",".join(extras) + "]" if extras else "."
    session.install("-e", target)


def shared_env_stamp(pyproject_text: str, torch_args: list[str]) -> str:
    """Return what the shared environment was built from: pyproject.toml and the torch choice (a digest)."""
    return hashlib.sha256((pyproject_text + "\n" + " ".join(torch_args)).encode()).hexdigest()[:16]


def _shared_python(session: nox.Session) -> str:
    """Return the Python of .nox/bench-shared, (re)building it when pyproject.toml or the torch choice changed.

    Two nox processes at once (bench-matrix and dashboard) take turns (a file lock): one building
    while the other clears the folder would leave a virtualenv without its pyvenv.cfg, whose
    python is then the base interpreter, and pip would install into that.
    """
    import fcntl

    args, why = _torch_choice()
    stamp = shared_env_stamp(Path("pyproject.toml").read_text(), args)
    python = str(SHARED_ENV / "bin" / "python")
    stamp_file = SHARED_ENV / "bench-stamp"
    SHARED_ENV.parent.mkdir(exist_ok=True)
    with open(SHARED_ENV.parent / "bench-shared.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp_file.is_file() and stamp_file.read_text() == stamp and os.path.exists(python):
            session.log(f"reusing {SHARED_ENV} (built for this pyproject.toml and torch choice)")
            return python
        session.log(f"building {SHARED_ENV}; torch: {' '.join(args)} ({why})")
        stamp_file.unlink(missing_ok=True)
        session.run(sys.executable, "-m", "venv", "--clear", str(SHARED_ENV), external=True)
        if not (SHARED_ENV / "pyvenv.cfg").is_file():  # never let pip install into the base interpreter
            session.error(f"{SHARED_ENV} is not a virtualenv after `python -m venv` (no pyvenv.cfg)")
        session.run(python, "-m", "pip", "install", *args, external=True)
        session.run(python, "-m", "pip", "install", "-e", ".", external=True)
        stamp_file.write_text(stamp)
    return python


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
    """Run the tests marked `gpu` (tests/test_gpu.py, tests/test_accuracy.py, tests/test_zygote.py) on this machine's
    GPU, in the existing environment.

    GPU machines come with torch (CUDA build) and transformers installed and may have no
    network, so this session installs nothing and runs the interpreter nox runs in (start it
    as `python3 -m nox -s gpu-tests` with the Python that has torch); it fails at once where
    torch sees no GPU (instead of reporting skipped tests as a pass). Same as:
    `python3 -m pytest -m gpu tests -v -rs`.
    """
    session.run(sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else "
                "'gpu-tests: torch sees no CUDA device here (run on the GPU machine)')", external=True)
    session.run(sys.executable, "-m", "pytest", "-m", "gpu", "tests", "-v", "-rs", "-p", "no:cacheprovider",
                *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "bench", "tests", "noxfile.py")


@nox.session(name="bench-matrix", venv_backend="none")
def bench_matrix(session: nox.Session) -> None:
    """Run a matrix (default: the CPU preset) and build its tables and dashboard.

    Arguments pass through: `nox -s bench-matrix -- --preset h200-qwen7b`.
    """
    python = sys.executable if REUSE else _shared_python(session)
    session.run(python, "-m", "bench", "run", *session.posargs, external=True)


@nox.session(venv_backend="none")
def dashboard(session: nox.Session) -> None:
    """Rebuild tables and dashboards from every store in results/."""
    python = sys.executable if REUSE else _shared_python(session)
    session.run(python, "-m", "bench", "report", *session.posargs, external=True)


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
        session.log(f"on a regression, where the time went: profile each side in a checkout of its commit and run "
                    f"`bench compare BASE.jsonl HEAD.jsonl --profiles BASE-profiles.jsonl HEAD-profiles.jsonl` "
                    f"({base} vs {head}; docs/guide/regressions.md, 'After asv continuous')")
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
