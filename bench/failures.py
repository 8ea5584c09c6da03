"""Failure classification: the one place that decides ok / oom / error / timeout.

An out-of-memory is a result (the batch did not fit), anything else that went wrong is an
error. Recognised: torch.OutOfMemoryError and CUDA's out-of-memory messages, host MemoryError,
a worker killed by the kernel's OOM killer (SIGKILL, exit status 137), and the out-of-memory
markers of TensorRT (build) and TensorRT-LLM (runtime).
"""

from __future__ import annotations

import signal
import sys

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
    if isinstance(exc, MemoryError):
        return "oom"
    # Only a process that imported torch can hold a torch OOM; importing torch here could itself
    # fail under an address-space cap (bench.memcap), so it is never imported just to check.
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(exc, oom_type):
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
