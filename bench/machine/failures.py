"""Failure classification: the one place that decides ok / oom / error / timeout.

An out-of-memory is a result (the batch did not fit), anything else that went wrong is an
error. Recognised: torch.OutOfMemoryError and CUDA's out-of-memory messages, host MemoryError,
a worker killed by the kernel's OOM killer (SIGKILL with evidence that the OOM killer acted),
and the out-of-memory markers of TensorRT (build) and TensorRT-LLM (runtime). `first_line` is how a
failure is named in one line (the console, a report).
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
    # fail under an address-space cap (bench.machine.memory_cap), so it is never imported just to check.
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(exc, oom_type):
        return "oom"
    return classify_text(f"{type(exc).__name__}: {exc}")


def classify_text(text: str) -> str:
    """Return 'oom' if a message or log contains an out-of-memory marker, else 'error'."""
    return "oom" if any(marker in text for marker in OOM_MARKERS) else "error"


def killed_by_sigkill(returncode: int | None) -> bool:
    """Return whether a process's exit status says SIGKILL (as Popen or as a shell reports it)."""
    return returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)


def classify_exit(returncode: int | None, own_output: str = "", oom_kill_evidence: str | None = None) -> str:
    """Return the status of a worker that died: 'oom' only on evidence of an out-of-memory, else 'error'.

    Evidence: the process's own output holds an out-of-memory marker, or it was killed by
    SIGKILL while the kernel's OOM killer acted (oom_kill_evidence, e.g. its cgroup's oom_kill
    counter rose). A SIGKILL alone is not evidence: anyone can send one.
    """
    if killed_by_sigkill(returncode) and oom_kill_evidence:
        return "oom"
    return classify_text(own_output)


# A failure's line on the console and in a report is cut here: a message can hold a whole prompt.
FIRST_LINE_CHARS = 300


def first_line(error: str | None) -> str:
    """Return the first non-blank line of a failure's text (its message; the traceback follows it), cut to
    FIRST_LINE_CHARS; "" for none. The one way a console or a report names a failure in a line."""
    for line in (error or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= FIRST_LINE_CHARS else line[:FIRST_LINE_CHARS - 1] + "…"
    return ""
