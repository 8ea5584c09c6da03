"""Failure classification: the one place that decides ok / oom / error / timeout.

An out-of-memory is a result (the batch did not fit), anything else that went wrong is an
error. Recognised: torch.OutOfMemoryError and CUDA's out-of-memory messages, host MemoryError,
a worker killed by the kernel's OOM killer (SIGKILL, exit status 137), and the out-of-memory
markers of TensorRT (build) and TensorRT-LLM (runtime).
"""

from __future__ import annotations

import signal

OOM_MARKERS = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "out of memory",  # CUDA runtime / cuBLAS / TensorRT-LLM runtime
    "CUBLAS_STATUS_ALLOC_FAILED",
    "OutOfMemory",  # TensorRT builder
    "Requested amount of GPU memory",  # TensorRT builder
    "Can't allocate new blocks",  # TensorRT-LLM KV cache manager
    "DefaultCPUAllocator: can't allocate memory",  # torch on the host
)


def classify_exception(exc: BaseException) -> str:
    """Return 'oom' if exc is an out-of-memory of the device or the host, else 'error'."""
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return "oom"
    except ImportError:  # pragma: no cover - torch is a dependency, but keep this importable
        pass
    if isinstance(exc, MemoryError):
        return "oom"
    return classify_text(f"{type(exc).__name__}: {exc}")


def classify_text(text: str) -> str:
    """Return 'oom' if a message or log contains an out-of-memory marker, else 'error'."""
    return "oom" if any(marker in text for marker in OOM_MARKERS) else "error"


def classify_exit(returncode: int | None, stderr_tail: str = "") -> str:
    """Return the status of a worker that died: 'oom' for the OOM killer or an OOM log, else 'error'."""
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
        return "oom"
    return classify_text(stderr_tail)
