"""Memory cap: emulate a smaller device (`gpu_memory_gb`) so a big GPU reproduces a small one's OOMs.

The cap travels from the parent to the worker in the environment variable BENCH_GPU_MEMORY_GB
(set by bench.runner.matrix / bench oom from RunSettings.gpu_memory_gb), so every backend reads it
from one place: `cap_bytes()`. How each kind of cell honours it:

- torch on CUDA (hf): `torch.cuda.set_per_process_memory_fraction(cap / total)` before the
  model is loaded; PyTorch's caching allocator then raises torch.OutOfMemoryError past the cap.
  The CUDA context and driver memory are outside the allocator and not counted (docs/guide/oom.md).
- engines (trtllm): the KV cache memory budget is the cap minus the engine's own weights and
  activations (the backend reads `cap_bytes()`; see docs/guide/oom.md).
- CPU cells: an address-space limit (RLIMIT_AS) on the worker process. It counts virtual memory,
  not resident pages, so it is a coarse emulation; a cell past it gets MemoryError -> 'oom'.

1 GB = 1e9 bytes here (as GPU vendors quote memory), not GiB.
"""

from __future__ import annotations

import os
import resource
import sys

from bench.checks import check_number
from bench.errors import BenchInputError

ENV_VAR = "BENCH_GPU_MEMORY_GB"


def env_for(gpu_memory_gb: float | None) -> dict[str, str]:
    """Return the environment entries that carry the cap to a worker ({} without a cap)."""
    return {} if gpu_memory_gb is None else {ENV_VAR: repr(float(gpu_memory_gb))}


def cap_bytes() -> int | None:
    """Return the cap in bytes that this worker must respect, or None when uncapped."""
    text = os.environ.get(ENV_VAR)
    return None if not text else int(float(text) * 1e9)


def check_cap(gpu_memory_gb, devices, gpu_info=None) -> None:
    """Raise BenchInputError if the cap is not a positive number or exceeds a device it is meant for.

    Runs in the parent, through NVML only (no CUDA context is created here)."""
    if gpu_memory_gb is None:
        return
    check_number(gpu_memory_gb, "gpu_memory_gb (--gpu-memory-gb)", above=0,
                 hint="the memory cap in GB (1 GB = 1e9 bytes)")
    from bench.machine.environment import nvml_index

    if gpu_info is None:
        from bench.machine.environment import gpu_info
    for device in sorted(set(devices)):
        if not device.startswith("cuda"):
            continue  # CPU cells: an address-space limit, any positive size is meaningful
        info = gpu_info(nvml_index(device))
        total = info.get("gpu_memory_bytes")
        if info.get("nvml_error"):
            raise BenchInputError(
                f"gpu_memory_gb={gpu_memory_gb:g} asks to cap device {device!r}, but NVML failed: {info['nvml_error']}; "
                "fix the device index or the NVIDIA driver/NVML install (nvidia-smi shows the same error), "
                "or run without gpu_memory_gb"
            )
        if not info.get("gpu_count") or total is None:
            raise BenchInputError(
                f"gpu_memory_gb={gpu_memory_gb:g} asks to cap device {device!r}, but NVML sees no GPU on this machine: "
                "run on a GPU machine, or use device = 'cpu' (the cap is then an address-space limit)"
            )
        if gpu_memory_gb * 1e9 > total:
            raise BenchInputError(
                f"gpu_memory_gb={gpu_memory_gb:g} is larger than {device} ({info.get('gpu_name')}, "
                f"{total / 1e9:.1f} GB): a cap can only emulate a smaller device; give at most {total / 1e9:.1f}"
            )


def apply_cap(device: str) -> dict:
    """Apply the cap from the environment to this process; return what was applied (for the record)."""
    cap = cap_bytes()
    if cap is None:
        return {}
    if device.startswith("cuda"):
        import torch

        from bench.machine.devices import cuda_ordinal

        index = cuda_ordinal(device)
        total = torch.cuda.get_device_properties(index).total_memory
        fraction = min(1.0, cap / total)
        torch.cuda.set_per_process_memory_fraction(fraction, index)
        return {"gpu_memory_gb": cap / 1e9, "memory_fraction": fraction, "device_total_bytes": int(total)}
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return {"gpu_memory_gb": cap / 1e9, "address_space_limit_bytes": cap}


def device_peak_bytes() -> int | None:
    """Return torch's peak allocated device memory in this process, or None if CUDA was never used."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        return int(torch.cuda.max_memory_allocated())
    except Exception:  # a broken context after a failure: the peak is simply unknown
        return None
