"""Failure classification: every out-of-memory marker is 'oom', anything else is 'error'."""

import signal

import pytest

from bench.machine.failures import classify_exception, classify_exit, classify_text


@pytest.mark.parametrize("text", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: CUDA error: out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
    "[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical] Error Code 2: OutOfMemory (Requested size was 1 bytes.)",
    "[TRT] [W] Requested amount of GPU memory (4294967296 bytes) could not be allocated.",
    "[TensorRT-LLM][ERROR] ... out of memory",
    "[TensorRT-LLM][ERROR] Can't allocate new blocks. No free blocks left.",
    "RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1",
])
def test_each_oom_marker_is_oom(text):
    assert classify_text(text) == "oom"
    assert classify_exception(RuntimeError(text)) == "oom"
    assert classify_exit(1, "traceback...\n" + text) == "oom"


@pytest.mark.parametrize("text", ["ValueError: shapes do not match", "CUDA error: an illegal memory access was encountered",
                                  "KeyError: 'model.layers.0'", ""])
def test_other_failures_are_errors(text):
    assert classify_text(text) == "error"
    assert classify_exit(1, text) == "error"


def test_exception_types():
    torch = pytest.importorskip("torch")
    assert classify_exception(torch.OutOfMemoryError("no message markers")) == "oom"
    assert classify_exception(MemoryError()) == "oom"
    assert classify_exception(ValueError("bad shape")) == "error"


def test_exit_statuses():
    assert classify_exit(-signal.SIGKILL) == "error"  # anyone can send a SIGKILL
    evidence = "the kernel's OOM killer: oom_kill in memory.events rose from 0 to 1 while it ran"
    assert classify_exit(-signal.SIGKILL, "", evidence) == "oom"
    assert classify_exit(137, "", evidence) == "oom"  # the same, as a shell reports it
    assert classify_exit(3, "", evidence) == "error"  # the OOM killer did not kill this one
    assert classify_exit(3, "") == "error"
    assert classify_exit(-signal.SIGSEGV, "Segmentation fault") == "error"
    assert classify_exit(None, "") == "error"
