"""Arrival times for online replay: when each request is sent, as seconds from the run's start.

Follows vLLM's benchmark_serving: inter-arrival gaps are gamma-distributed with shape =
burstiness and mean 1 / rate (burstiness 1 is a Poisson process; < 1 burstier, > 1 more
even), the first request waits one gap too, and the cumulative times are rescaled so the last
request arrives at exactly n / rate, which keeps throughput comparable across seeds. A rate of
None (or inf) sends everything at t = 0.

Times are rounded to whole microseconds: the gamma sampler calls libm (log, exp), whose last
bit may differ between machines, and a frozen workload file must be byte-identical everywhere.
"""

from __future__ import annotations

import math
import random

DECIMALS = 6  # microseconds


def arrival_times(n: int, rate: float | None, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Return n non-decreasing arrival times in seconds; all 0.0 when rate is None or inf."""
    if n <= 0:
        return []
    if rate is None or math.isinf(rate):
        return [0.0] * n
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"rate and burstiness must be positive, got {rate!r} and {burstiness!r}")
    # A generator of its own (string seeds hash with SHA-512, the same on every platform), so
    # adding arrivals never changes which records the shuffle picked.
    rng = random.Random(f"arrivals:{seed}")
    theta = 1.0 / (rate * burstiness)
    t = 0.0
    times = []
    for _ in range(n):
        t += rng.gammavariate(burstiness, theta)
        times.append(t)
    scale = (n / rate) / times[-1]
    return [round(x * scale, DECIMALS) for x in times]


def inter_arrival_cv(times: list[float]) -> float:
    """Return the coefficient of variation of the gaps between arrivals (1 for Poisson)."""
    gaps = [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]
    mean = sum(gaps) / len(gaps)
    if mean == 0:
        return 0.0
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    return math.sqrt(var) / mean
