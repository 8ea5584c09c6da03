"""Arrival times of a request stream: Poisson (burstiness 1) or gamma-distributed gaps.

Follows vLLM's `bench serve`: the gap before each next request is drawn from a gamma
distribution with shape = burstiness and scale = 1 / (request_rate * burstiness), so the mean
rate is request_rate for any burstiness; burstiness 1 is a Poisson process, < 1 is burstier,
> 1 more uniform. The first request is due at 0. An infinite rate sends everything at 0.

Self-contained on purpose (bench/workloads/arrivals.py may later generate the same arrivals into the
workload; the openai backend replays workload arrivals when they are present).
"""

from __future__ import annotations

import math

import numpy as np


def arrival_times(n: int, request_rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Return n arrival offsets in seconds (non-decreasing, first 0) for the given mean rate."""
    if n <= 0:
        return []
    if math.isinf(request_rate):
        return [0.0] * n
    if not request_rate > 0 or not burstiness > 0:
        raise ValueError(f"request_rate and burstiness must be positive, got {request_rate}, {burstiness}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]
