"""Arrival times for online replay: when each request is sent, as seconds from the pass's start.

The one generator every pacing backend uses (the openai backend's `request_rate` option and a
workload's `request_rate` both come here). Semantics are current vLLM's (`get_request` in
vllm/benchmarks/serve.py): each request, the first included, waits a gap drawn from a gamma
distribution with shape = burstiness and scale = 1 / (rate * burstiness) (burstiness 1 is a
Poisson process; < 1 burstier, > 1 more even; infinite burstiness: constant 1 / rate gaps);
the cumulative times are then rescaled so the last request lands at exactly n / rate, so the
offered rate is the label for every seed. The gaps come from numpy's legacy RandomState seeded
with `seed`, the generator behind vLLM's `np.random.gamma`, so the same seed gives vLLM's
schedule. A rate of None (or inf) sends everything at t = 0.

Times are rounded to whole microseconds: the gamma sampler calls libm (log, exp), whose last
bit may differ between machines, and a frozen workload file must be byte-identical everywhere.
"""

from __future__ import annotations

import math

import numpy as np

DECIMALS = 6  # microseconds


def arrival_times(n: int, rate: float | None, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Return n non-decreasing arrival times in seconds (the last at n / rate); all 0.0 when rate is None or inf."""
    if n <= 0:
        return []
    if rate is None or math.isinf(rate):
        return [0.0] * n
    if not rate > 0 or not burstiness > 0:
        raise ValueError(f"rate and burstiness must be positive, got {rate!r} and {burstiness!r}")
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = np.random.RandomState(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    times = np.cumsum(gaps)
    times *= (n / rate) / times[-1]
    return [round(float(x), DECIMALS) for x in times]


def offered_rate(times: list[float]) -> float | None:
    """Return the rate a schedule offers: requests / time of the last arrival (None when all are due at once)."""
    if not times or max(times) <= 0:
        return None
    return len(times) / max(times)
