"""The noxfile's torch choice on a fresh machine (issue 34), tested without network and without nox:
the CPU build from PyTorch's CPU index where there is no GPU, pip's configured index where that index
cannot be reached (bounded to a few seconds), one torch version for the sessions and the README."""

import importlib.util
import re
import sys
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def noxfile(monkeypatch):
    """Return noxfile.py imported with a stand-in `nox` module (nox is not a test dependency)."""
    fake = types.ModuleType("nox")
    fake.options = types.SimpleNamespace()
    fake.Session = object

    def session(func=None, **kwargs):
        return func if func is not None else (lambda f: f)

    fake.session = session
    monkeypatch.setitem(sys.modules, "nox", fake)
    monkeypatch.setenv("BENCH_NOX_REUSE_ENV", "0")  # no probe of this Python's torch
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_gpu_takes_the_cpu_index_and_falls_back_when_it_is_unreachable(noxfile):
    asked = []

    def reachable():
        asked.append(1)
        return True

    args, why = noxfile.torch_install_args(False, reachable)
    assert args == ["torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"] and "CPU build" in why
    args, why = noxfile.torch_install_args(False, lambda: False)
    assert args == ["torch==2.13.0"] and "could not be reached" in why
    asked.clear()
    args, why = noxfile.torch_install_args(True, reachable)
    assert args == ["torch==2.13.0"] and "GPU" in why and not asked  # a GPU machine never probes
    assert noxfile.torch_install_args(True, reachable, "cpu")[0][-1] == noxfile.CPU_INDEX
    assert noxfile.torch_install_args(False, reachable, "default")[0] == ["torch==2.13.0"]
    assert noxfile.torch_install_args(False, reachable, "file:///idx")[0] == ["torch==2.13.0", "--index-url", "file:///idx"]


def test_the_probe_is_bounded(noxfile, monkeypatch):
    import urllib.request

    def hang(*a, **k):
        time.sleep(30)

    monkeypatch.setattr(urllib.request, "urlopen", hang)
    t0 = time.monotonic()
    assert noxfile.index_reachable(timeout_s=0.3) is False
    assert time.monotonic() - t0 < 2.0
    # no route to a name that cannot resolve: answered at once (a resolver's NXDOMAIN well within the second; where
    # no resolver answers, as in the offline CI VM, the second is what it costs)
    assert noxfile.index_reachable("http://bench-no-such-host.invalid", timeout_s=1.0) is False


def test_shared_env_rebuilds_only_when_its_inputs_change(noxfile):
    a = noxfile.shared_env_stamp("[project]\nname='bench'\n", ["torch==2.13.0"])
    assert a == noxfile.shared_env_stamp("[project]\nname='bench'\n", ["torch==2.13.0"])
    assert a != noxfile.shared_env_stamp("[project]\nname='bench'\ndeps=['x']\n", ["torch==2.13.0"])
    assert a != noxfile.shared_env_stamp("[project]\nname='bench'\n", ["torch==2.13.0", "--index-url", "u"])


def test_one_torch_version_for_the_sessions_and_the_readme(noxfile):
    version = noxfile.CPU_TORCH.split("==")[1]
    install = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    pins = set(re.findall(r"torch==([\d.]+)", install))
    assert pins == {version}, f"README's install section pins {pins}, the nox sessions {version}"
    assert noxfile.CPU_INDEX in install
