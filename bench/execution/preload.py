"""What the zygote imports before it forks (bench.execution.zygote), and the checks that keep it free of CUDA.

`preload` imports a request's modules (a backend's runtime module and the modules its `PRELOAD`
lists) once per zygote; `cuda_state` says why the zygote must not fork after them (a CUDA context,
the CUDA driver initialised, a second Python thread). Imports that ask the GPU what it can do get
their answer from NVML while the zygote imports (`_device_properties_from_nvml`). Only
standard-library imports at module level: the launcher imports the zygote, which imports this.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

ALWAYS_PRELOAD = ("bench.execution.worker",)
CUDA_ERROR_NOT_INITIALIZED = 3

_imported: set[str] = set()
_failed: dict[str, str] = {}


def preload(names: list[str]) -> float:
    """Import every module the request names and the modules their PRELOAD lists; return the seconds it took."""
    import importlib

    t0 = time.perf_counter()
    for name in (*ALWAYS_PRELOAD, *names):
        if name in _imported:
            continue
        if name in _failed:
            raise ImportError(_failed[name])
        try:
            with _device_properties_from_nvml():
                module = importlib.import_module(name)
            for dep in getattr(module, "PRELOAD", ()):
                with _device_properties_from_nvml():  # from the import after torch's on (hf: "torch" comes first)
                    importlib.import_module(dep)
        except BaseException as exc:  # noqa: BLE001 - any import failure: a fresh process reports it as a worker would
            _failed[name] = f"importing {name} in the zygote failed: {type(exc).__name__}: {exc}"
            raise ImportError(_failed[name]) from exc
        _imported.add(name)
    return time.perf_counter() - t0


class _NvmlProperties:
    """What an import-time check reads of a CUDA device's properties, from NVML: its compute capability."""

    def __init__(self, major: int, minor: int):
        self.major, self.minor = major, minor


@functools.lru_cache(maxsize=1)
def _nvml_capability() -> tuple[int, int] | None:
    """Return the compute capability every GPU NVML sees shares (no CUDA context made; read once per zygote); None
    without NVML, without GPUs, or where they differ (a worker's CUDA_VISIBLE_DEVICES may pick any of them: no one
    answer is true)."""
    from bench.machine.environment import gpu_info

    caps = {gpu_info(i).get("compute_capability") for i in range(gpu_info(0)["gpu_count"])}
    if len(caps) != 1 or None in caps:
        return None
    major, minor = caps.pop().split(".")
    return int(major), int(minor)


class _device_properties_from_nvml:
    """During an import in the zygote, torch answers "which device, what compute capability" from NVML.

    Importing transformers imports torchao where it is installed, and torchao asks at import what the GPU can do:
    whether Triton can run (torch.utils._triton.has_triton, through torch._dynamo's device interface) and whether it
    is sm_100 (torchao.utils.is_sm_at_least_100, torch.cuda.get_device_capability). Both initialise CUDA: measured on
    the H100 (torch 2.11, torchao 0.17, transformers 5.17, 2026-12-06), every zygote then refused to fork ("torch
    initialised CUDA during an import") and each 7B worker paid its imports again (11-17 s). NVML gives the same
    capability without a CUDA context, where every GPU shares one (see _nvml_capability). The functions are put back
    after the import; what the import computed from them is what a fresh worker computes on these GPUs. An import
    that reads any other property raises AttributeError: the zygote then refuses, and the worker starts fresh.
    Run on the H100 since (2026-12-06): the zygote's GPU test passed and all 30 worker processes of the h200-study
    preset forked (docs/measurements/2026-12-06-h100-study-forked-workers.md); CUDA workers now fork by default."""

    def __enter__(self):
        self.saved: list[tuple[object, str, object]] = []
        torch = sys.modules.get("torch")
        if torch is None or torch.cuda.is_initialized():
            return self
        cap = _nvml_capability()
        if cap is None:
            return self
        from torch._dynamo.device_interface import CudaInterface

        def answer(original, value):
            # Forwards to the original once this import is over: a module that kept a reference (`from torch.cuda
            # import get_device_capability`) gets torch's own function in the worker.
            return lambda *args, **kwargs: value if self.active else original(*args, **kwargs)

        self.active = True
        worker, cuda = CudaInterface.Worker, torch.cuda
        for owner, name, value, static in ((worker, "get_device_properties", _NvmlProperties(*cap), True),
                                           (worker, "current_device", 0, True),
                                           (cuda, "get_device_properties", _NvmlProperties(*cap), False),
                                           (cuda, "get_device_capability", cap, False),
                                           (cuda, "current_device", 0, False)):
            saved = owner.__dict__[name]
            original = saved.__func__ if static else saved
            self.saved.append((owner, name, saved))
            replacement = answer(original, value)
            setattr(owner, name, staticmethod(replacement) if static else replacement)
        return self

    def __exit__(self, *exc):
        self.active = False
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)
        return False


def cuda_state() -> str | None:
    """Return why this process must not fork workers (a CUDA context or a second Python thread), or None."""
    if threading.active_count() > 1:
        return f"{threading.active_count()} Python threads after the imports (fork copies only the calling one)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch initialised CUDA during an import"
    try:
        with open("/proc/self/maps") as fh:
            mapped = "libcuda.so" in fh.read()
    except OSError:
        mapped = False
    if mapped:  # the driver is loaded: its device count fails with NOT_INITIALIZED until someone called cuInit
        import ctypes

        count = ctypes.c_int()
        status = ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count))
        if status != CUDA_ERROR_NOT_INITIALIZED:
            return f"the CUDA driver was initialised during an import (cuDeviceGetCount returned {status})"
    return None
