"""Device strings: the one parser of 'cpu', 'cuda', 'cuda:N' and of a matrix's GPU pool (`devices`)."""

from __future__ import annotations

import re
from typing import Any

from bench.errors import BenchInputError

DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def cuda_ordinal(device: str) -> int | None:
    """Return the CUDA ordinal a device string names: N for 'cuda:N', 0 for 'cuda', None for a CPU.

    The one parser of device indices. The ordinal counts the GPUs this process sees (after
    CUDA_VISIBLE_DEVICES); bench.machine.environment.nvml_device maps it to NVML's GPU.
    """
    if not device.startswith("cuda"):
        return None
    _, _, n = device.partition(":")
    return int(n) if n else 0


POOL_DEVICE_RE = re.compile(r"^cuda:\d+$")


def device_pool(value: Any) -> tuple[str, ...]:
    """Return the local executor's GPUs from a matrix's `devices` (or --devices): ('cuda:0', ...) or ('all',)."""
    if value == "all" or value == ["all"]:
        return ("all",)
    values = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not values:
        raise BenchInputError(f"devices must be 'all' or a list of GPUs such as ['cuda:0', 'cuda:1'], got {value!r}")
    for v in values:
        if not isinstance(v, str) or not POOL_DEVICE_RE.match(v):
            raise BenchInputError(
                f"devices lists the GPUs a matrix is spread over, each 'cuda:N' (or devices = 'all'), got {v!r}; "
                "to measure every cell on several kinds of device, make device an axis: device = ['cpu', 'cuda']"
            )
    if len(set(values)) != len(values):
        raise BenchInputError(f"devices names a GPU twice: {list(values)}")
    return tuple(values)
