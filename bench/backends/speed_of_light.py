"""Speed-of-light: the least time a decode can take when it only has to read its bytes once.

A decode step of a dense decoder must read every weight once (at its stored precision; the
input embedding table only a row per sequence, see `streamed_weight_bytes`) and,
for each sequence still generating, the KV cache of its current length. Dividing those bytes
by the device's memory bandwidth gives a lower bound on the step's time; the ratio of that
bound to the measured time is the cell's % of speed-of-light (`sol_pct`).

The bandwidth is measured, not taken from a datasheet: a large device-to-device copy, counting
the bytes read plus the bytes written, once per machine and GPU, cached as JSON.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from bench.files import write_atomic


def streamed_weight_bytes(weight_bytes: int, embedding_bytes: int, tied: bool) -> int:
    """Return the weight bytes a decode step reads: every weight but the input embedding table.

    A step looks up one embedding row per sequence, not the table (a tied table is still read
    whole, as the output projection); counting it would flatter every cell's % of speed-of-light.
    """
    return weight_bytes if tied else weight_bytes - embedding_bytes


def decode_step_bytes(weight_bytes: int, kv_per_token: int, context_lens: Sequence[int]) -> int:
    """Return the bytes one decode step must read: all weights plus each active row's KV cache."""
    return weight_bytes + kv_per_token * sum(context_lens)


def batch_lower_bound_s(
    lens: Sequence[tuple[int, int]], weight_bytes: int, kv_per_token: int, bandwidth_bytes_s: float
) -> float:
    """Return the memory-bound lower limit (s) on generating one static batch.

    `lens` holds (input_len, output_len) per request. The prefill makes each request's first
    token and must read the weights once (its compute bound is ignored: a lower bound). Decode
    step k (1 .. longest output - 1) makes token k+1 of every row with output_len > k; such a
    row attends over input_len + k positions. Padding is not counted: it is not necessary work.
    """
    if not lens:
        return 0.0
    total = weight_bytes  # prefill
    for k in range(1, max(out for _, out in lens)):
        total += decode_step_bytes(weight_bytes, kv_per_token, [inp + k for inp, out in lens if out > k])
    return total / bandwidth_bytes_s


def run_lower_bound_s(
    batches: Sequence[Sequence[tuple[int, int]]], weight_bytes: int, kv_per_token: int, bandwidth_bytes_s: float
) -> float:
    """Return the lower limit (s) on a run of static batches, one after the other."""
    return sum(batch_lower_bound_s(b, weight_bytes, kv_per_token, bandwidth_bytes_s) for b in batches)


def bandwidth_cache_dir(engines_dir) -> Path:
    """Return the folder that caches this machine's copy bandwidth: beside the engines, shared by all keys."""
    return Path(engines_dir) / "_machine"


def copy_bandwidth_file(cache_dir: Path, gpu_id: str) -> Path:
    """Return where the copy bandwidth of this host's GPU `gpu_id` is cached."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{socket.gethostname()}-{gpu_id}")
    return Path(cache_dir) / f"copy-bandwidth-{safe}.json"


def measure_copy_bandwidth(device, nbytes: int = 1 << 31, iters: int = 20) -> float:
    """Return the device-to-device copy rate in bytes/s, counting bytes read plus bytes written."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):  # first touches, clocks up
        dst.copy_(src)
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dst.copy_(src)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000.0
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes * iters / seconds


def copy_bandwidth(device, cache_dir: Path) -> dict:
    """Return {'bandwidth_bytes_s', 'gpu', 'measured_at', 'cached'} for a CUDA device, measuring once per GPU.

    The measurement allocates 2 x 2 GiB: the worker takes it before the memory cap
    (bench.machine.memory_cap) is applied, so a capped backend only reads the cached figure.
    """
    import torch

    props = torch.cuda.get_device_properties(device)
    gpu_id = str(getattr(props, "uuid", "") or props.name)
    path = copy_bandwidth_file(cache_dir, gpu_id)
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            return {**data, "cached": True}
        except (OSError, json.JSONDecodeError):
            pass  # a broken cache file is measured again
    data = {"bandwidth_bytes_s": measure_copy_bandwidth(device), "gpu": props.name, "measured_at": time.time()}
    write_atomic(path, json.dumps(data))
    return {**data, "cached": False}
