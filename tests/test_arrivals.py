import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.workloads.arrivals import arrival_times, inter_arrival_cv


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
