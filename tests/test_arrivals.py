import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.workloads.arrivals import arrival_times, offered_rate


def inter_arrival_cv(times: list[float]) -> float:
    """Return the coefficient of variation of the gaps between arrivals (1 for Poisson)."""
    gaps = [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]
    mean = sum(gaps) / len(gaps)
    if mean == 0:
        return 0.0
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    return math.sqrt(var) / mean


def test_infinite_rate_sends_all_at_once():
    assert arrival_times(4, None) == [0.0] * 4
    assert arrival_times(3, math.inf, seed=9) == [0.0] * 3
    assert arrival_times(0, 2.0) == []


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.floats(0.01, 1000), st.floats(0.05, 20), st.integers(0, 10**6))
def test_times_are_sorted_and_end_at_n_over_rate(n, rate, burstiness, seed):
    times = arrival_times(n, rate, burstiness, seed)
    assert len(times) == n and times == sorted(times) and times[0] >= 0
    assert times[-1] == pytest.approx(n / rate, abs=1e-6)
    assert times == arrival_times(n, rate, burstiness, seed)  # seeded


def test_seed_changes_times():
    assert arrival_times(20, 4.0, seed=1) != arrival_times(20, 4.0, seed=2)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_burstiness_sets_the_spread_of_gaps(burstiness):
    # Gamma gaps with shape k have coefficient of variation 1/sqrt(k): Poisson (k=1) gives 1.
    cv = inter_arrival_cv(arrival_times(20000, 10.0, burstiness, seed=0))
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_bad_rate_is_rejected():
    with pytest.raises(ValueError):
        arrival_times(3, -1.0)


def vllm_delays(n: int, request_rate: float, burstiness: float, seed: int) -> list[float]:
    """Transcription of the delay schedule of vLLM's `get_request` (vllm/benchmarks/serve.py), constant rate, no ramp-up.

    `vllm bench serve` seeds numpy's global generator with --seed before it samples; the loop,
    the cumulative sum and the rescaling to n / rate below are vLLM's lines.
    """
    np.random.seed(seed)
    delay_ts = []
    for _ in range(n):
        current_request_rate = request_rate
        if current_request_rate == float("inf"):
            delay_ts.append(0)
        elif burstiness == float("inf"):
            delay_ts.append(1.0 / current_request_rate)
        else:
            theta = 1.0 / (current_request_rate * burstiness)
            delay_ts.append(np.random.gamma(shape=burstiness, scale=theta))
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    if delay_ts[-1] != 0:
        target_total_delay_s = n / request_rate
        normalize_factor = target_total_delay_s / delay_ts[-1]
        delay_ts = [delay * normalize_factor for delay in delay_ts]
    return delay_ts


@pytest.mark.parametrize(("n", "rate", "burstiness", "seed"), [
    (100, 4.0, 1.0, 0), (100, 1.0, 1.0, 0), (37, 16.0, 0.25, 7), (500, 2.5, 4.0, 123), (1, 3.0, 1.0, 0),
    (10, 8.0, math.inf, 0), (5, math.inf, 1.0, 0),
])
def test_same_schedule_as_vllm_get_request(n, rate, burstiness, seed):
    ours = arrival_times(n, rate, burstiness, seed)
    theirs = vllm_delays(n, rate, burstiness, seed)
    assert ours == pytest.approx(theirs, abs=1e-6)


def test_offered_rate_is_the_label():
    # The issue this generator fixes: without the rescaling, seed 0 offered 3.37 req/s for a label of 4.
    times = arrival_times(100, 4.0, 1.0, 0)
    assert offered_rate(times) == pytest.approx(4.0, rel=1e-6)
    assert offered_rate([0.0, 0.0]) is None and offered_rate([]) is None
    assert times[0] > 0  # the first request waits its gap too, as in vLLM
