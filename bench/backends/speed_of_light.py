"""Speed-of-light: the least time a decode can take when it only has to read its bytes once.

A decode step of a dense decoder reads each weight once at its stored width (a quantized weight
as its packed integers plus its scales and zero points), but of the input embedding table only
one row per sequence; the LM head is read whole (a tied head is the table itself). It also reads,
for each sequence still generating, the KV cache of its current length. `decode_step_bytes` is
the one place those bytes are counted: the run's bound (`run_lower_bound_s`, the `% SOL` column),
the profiling session's step bound (`step_bound`) and the ncu roofline's all come from it.
Dividing by the device's memory bandwidth gives a lower bound on the step's time; the ratio of
that bound to the measured time is the % of speed-of-light (`sol_pct`). Above 100 % it is
impossible: a timing or accounting bug, which the reports flag, never print plain.

The bandwidth is measured, not taken from a datasheet: a large device-to-device copy, counting
the bytes read plus the bytes written, once per machine and GPU, cached as JSON.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.files import write_atomic


@dataclass(frozen=True)
class WeightBytes:
    """A model's weights as a decode step reads them: every stored byte, and the input embedding table apart."""

    stored: int  # every weight at its stored width (quantized: data + scales + zero points), the embedding table too
    embedding_table: int  # the input embedding table's bytes
    embedding_row: int  # one row of it: what a step looks up per sequence
    tied: bool  # the LM head is the embedding table (read whole as the head)

    @property
    def streamed(self) -> int:
        """Return the weight bytes a step reads whole: every weight but an untied input embedding table."""
        return self.stored if self.tied else self.stored - self.embedding_table

    def to_dict(self) -> dict:
        return {**asdict(self), "streamed": self.streamed}


def model_weight_bytes(model) -> WeightBytes:
    """Return the WeightBytes of a loaded torch model (its parameters at their stored width, the embedding apart)."""
    from bench.backends.hf.quantize import stored_bytes

    stored = sum(stored_bytes(p) for p in model.parameters())
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head is not None and getattr(head, "weight", None) is emb.weight  # gemlite's modules have no .weight
    table = stored_bytes(emb.weight)
    return WeightBytes(stored, table, table // max(1, emb.weight.shape[0]), tied)


def decode_step_bytes(weights: WeightBytes, kv_per_token: int, context_lens: Sequence[int]) -> int:
    """Return the bytes one decode step must read: the weights read whole, one embedding row per active sequence,
    and each active sequence's KV cache at its context length (the one place these bytes are counted)."""
    return weights.streamed + weights.embedding_row * len(context_lens) + kv_per_token * sum(context_lens)


def prefill_bytes(weights: WeightBytes, input_lens: Sequence[int]) -> int:
    """Return the bytes a prefill must read: the weights once and one embedding row per prompt token (no KV to read)."""
    return weights.streamed + weights.embedding_row * sum(input_lens)


def step_bound(weights: WeightBytes, kv_per_token: int, context_lens: Sequence[int],
               bandwidth_bytes_s: float | None) -> dict:
    """Return one decode step's bound: its bytes (decode_step_bytes) and their parts, and the time they take at the
    bandwidth (None without one)."""
    total = decode_step_bytes(weights, kv_per_token, context_lens)
    return {"bytes": total, "weight_bytes": weights.streamed, "embedding_row_bytes": weights.embedding_row * len(context_lens),
            "kv_bytes": kv_per_token * sum(context_lens), "context_lens": list(context_lens),
            "time_us": total / bandwidth_bytes_s * 1e6 if bandwidth_bytes_s else None,
            "bandwidth_bytes_s": bandwidth_bytes_s}


def sol_pct(bound_s: float | None, measured_s: float | None) -> float | None:
    """Return 100 x bound / measured: the % of speed-of-light (None when either is missing or not positive)."""
    if not bound_s or not measured_s or measured_s <= 0:
        return None
    return 100.0 * bound_s / measured_s


def batch_lower_bound_s(
    lens: Sequence[tuple[int, int]], weights: WeightBytes, kv_per_token: int, bandwidth_bytes_s: float
) -> float:
    """Return the memory-bound lower limit (s) on generating one static batch.

    `lens` holds (input_len, output_len) per request. The prefill makes each request's first
    token and must read the weights once (its compute bound is ignored: a lower bound). Decode
    step k (1 .. longest output - 1) makes token k+1 of every row with output_len > k; such a
    row attends over input_len + k positions. Padding is not counted: it is not necessary work.
    """
    if not lens:
        return 0.0
    total = prefill_bytes(weights, [inp for inp, _ in lens])
    for k in range(1, max(out for _, out in lens)):
        total += decode_step_bytes(weights, kv_per_token, [inp + k for inp, out in lens if out > k])
    return total / bandwidth_bytes_s


def run_lower_bound_s(
    batches: Sequence[Sequence[tuple[int, int]]], weights: WeightBytes, kv_per_token: int, bandwidth_bytes_s: float
) -> float:
    """Return the lower limit (s) on a run of static batches, one after the other."""
    return sum(batch_lower_bound_s(b, weights, kv_per_token, bandwidth_bytes_s) for b in batches)


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
