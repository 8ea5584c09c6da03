"""Does the first call of PyTorch's SDPA at a new shape cost more than a repeat, and is cuDNN attention the cause?

A diagnostic for the hf warm-up (docs/guide/hf-backend.md, "Warm-up covers the shapes"): the stored GPU studies ran
a prompt length or cache length the process had not seen at about twice the time of one it had. This times
`F.scaled_dot_product_attention` at the Qwen-7B shape (32 heads of 128, bf16, batch 1) over N new lengths, then the
same N lengths again, for a decode step (one query over L keys) and a prefill (L queries, causal), first with
PyTorch's own choice of kernel and then with cuDNN attention excluded (`sdpa_kernel` over flash, efficient, math).
It prints one table; its figures are a diagnosis, not a published benchmark (the product's own records carry the
warm-up's cost: `extra.warmup.cold_batches_s`).

Usage (on a GPU): python scripts/sdpa_new_shapes.py [N] [FIRST_LENGTH]   (each 1-4096)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(q, k, v, causal: bool) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def series(lengths, kind: str) -> list[float]:
    out = []
    for n in lengths:
        q_len = 1 if kind == "decode" else n
        q = torch.randn(1, 32, q_len, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 32, n, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        out.append(timed(q, k, v, kind == "prefill"))
    return out


def count(text: str) -> int:
    value = int(text)  # argparse says "invalid count value" for a ValueError
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"{value} is outside 1-4096 (the series' lengths reach FIRST + 4 x N)")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description="SDPA at the Qwen-7B shape over new lengths, then the same again.")
    parser.add_argument("n", nargs="?", type=count, default=100, help="lengths per series (default 100)")
    parser.add_argument("first", nargs="?", type=count, default=301, help="the first length (default 301)")
    args = parser.parse_args()
    n, first = args.n, args.first
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (it times cuDNN attention against the other SDPA kernels)")
    print(torch.__version__, torch.cuda.get_device_name(0), "cudnn", torch.backends.cudnn.version(),
          "cudnn_sdp_enabled", torch.backends.cuda.cudnn_sdp_enabled())
    series([64], "decode")  # the CUDA context and the first kernels, outside every figure
    choices = [("default", None),
               ("no cuDNN", [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])]
    print(f"{'kernels':10} {'step':8} {'new lengths':>12} {'p50 first':>10} {'p50 again':>10} {'sum first':>10} "
          f"{'sum again':>10}")
    for i, (name, backends) in enumerate(choices):
        for kind in ("decode", "prefill"):
            # each choice and step gets lengths no earlier series used, so "first" is a first call in this process
            base = first + (2 * i + (kind == "prefill")) * n
            lengths = list(range(base, base + n))
            ctx = sdpa_kernel(backends) if backends else contextlib.nullcontext()
            with ctx:
                a = series(lengths, kind)
                b = series(lengths, kind)
            print(f"{name:10} {kind:8} {f'{lengths[0]}-{lengths[-1]}':>12} {statistics.median(a):10.3f} "
                  f"{statistics.median(b):10.3f} {sum(a):10.1f} {sum(b):10.1f}  (ms)")


if __name__ == "__main__":
    main()
