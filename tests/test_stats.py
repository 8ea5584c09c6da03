"""bench.results.stats: hand-computed summaries, t quantiles, exact Mann-Whitney, verdicts, and the
false-alarm / detection targets on the fake backend's timing model."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.results import stats


def test_summary_median_mad_iqr_and_warnings():
    s = stats.summarize([1, 2, 3, 4, 100], "tok/s")
    assert (s.n, s.median, s.mad, s.iqr, s.minimum, s.maximum) == (5, 3.0, 1.0, 2.0, 1.0, 100.0)
    assert s.mean == 22.0 and s.warnings
    assert any("standard deviation" in w for w in s.warnings)
    assert any("maximum is" in w and "outlier" in w for w in s.warnings)
    steady = stats.summarize([100.0, 101.0, 99.0, None, float("nan")])
    assert steady.n == 3 and not steady.warnings and steady.cv == pytest.approx(0.01)
    few = stats.summarize([5.0, 5.1])
    assert any("only 2 trial(s)" in w for w in few.warnings)
    with pytest.raises(ValueError, match="no values"):
        stats.summarize([None])


@pytest.mark.parametrize("q,df,expected", [
    (0.975, 4, 2.7764451051977987), (0.995, 2, 9.924843200918), (0.95, 1, 6.313751514675043),
    (0.995, 4, 4.604094871415897), (0.975, 30, 2.042272456301238),
])
def test_t_quantiles_match_tables(q, df, expected):
    assert stats.t_ppf(q, df) == pytest.approx(expected, abs=1e-8)
    assert stats.t_sf(expected, df) == pytest.approx(1 - q, abs=1e-10)
    assert stats.t_ppf(1 - q, df) == pytest.approx(-expected, abs=1e-8)


def test_t_against_scipy_where_installed():
    sp = pytest.importorskip("scipy.stats")
    for df in (1, 3, 7, 50):
        for t in (-4.0, -0.3, 0.0, 1.7, 12.0):
            assert stats.t_sf(t, df) == pytest.approx(sp.t.sf(t, df), abs=1e-12)


def test_mann_whitney_exact_hand_values():
    # 3 vs 3 fully separated: 1 arrangement of C(6,3)=20 at each extreme -> two-sided p = 2/20.
    r = stats.mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert r.exact and r.u == 0 and r.p_value == pytest.approx(0.1)
    assert stats.mann_whitney_min_p(3, 3) == pytest.approx(0.1)
    assert stats.mann_whitney_u([1, 2, 3, 4], [5, 6, 7, 8]).p_value == pytest.approx(2 / 70)
    assert stats.mann_whitney_u([1, 4, 5], [2, 3, 6]).p_value == pytest.approx(1.0)
    assert not stats.mann_whitney_u([1, 2, 2, 3], [2, 3, 4, 4, 5]).exact  # ties: normal approximation


def test_mann_whitney_against_scipy_where_installed():
    sp = pytest.importorskip("scipy.stats")
    x, y = [3.1, 4.7, 1.2, 9.9, 5.5, 2.2], [6.1, 7.7, 8.2, 0.9, 10.5, 7.1, 6.6]
    assert stats.mann_whitney_u(x, y).p_value == pytest.approx(sp.mannwhitneyu(x, y, method="exact").pvalue)
    x2, y2 = [1, 2, 2, 3, 3, 3], [2, 3, 4, 4, 5]
    assert stats.mann_whitney_u(x2, y2).p_value == pytest.approx(
        sp.mannwhitneyu(x2, y2, method="asymptotic").pvalue)


def test_ratio_test_hand_computed():
    base = [100 * math.exp(d) for d in (-0.01, 0.0, 0.01)]
    head = [110 * math.exp(d) for d in (-0.01, 0.0, 0.01)]
    r = stats.ratio_test(base, head, confidence=0.99)
    # logs differ by ln 1.1; pooled variance 1e-4 (df 4); se = 0.01*sqrt(2/3); t_{0.995,4} = 4.6041
    se = 0.01 * math.sqrt(2 / 3)
    assert r.ratio == pytest.approx(1.1)
    assert r.low == pytest.approx(1.1 * math.exp(-4.604094871415897 * se))
    assert r.high == pytest.approx(1.1 * math.exp(4.604094871415897 * se))
    assert r.significant and r.p_value == pytest.approx(2 * stats.t_sf(math.log(1.1) / se, 4))
    same = stats.ratio_test([5, 5, 5], [5, 5, 5])
    assert same.ratio == 1 and not same.significant and same.p_value == 1
    exact = stats.ratio_test([5, 5, 5], [6, 6, 6])  # zero spread (virtual clock): exact difference
    assert exact.significant and exact.p_value == 0
    with pytest.raises(ValueError, match="at least 2 trials"):
        stats.ratio_test([1.0], [1.0, 2.0])


def test_verdict_needs_significance_and_factor_and_knows_direction():
    assert stats.verdict(True, 0.90, +1, 0.05) == stats.REGRESSED  # tokens/s fell 10%
    assert stats.verdict(True, 1.10, -1, 0.05) == stats.REGRESSED  # latency rose 10%
    assert stats.verdict(True, 0.90, -1, 0.05) == stats.IMPROVED
    assert stats.verdict(True, 1.03, -1, 0.05) == stats.UNCHANGED  # significant but under the factor
    assert stats.verdict(False, 1.50, -1, 0.05) == stats.NOT_SIGNIFICANT  # large but noise
    with pytest.raises(ValueError):
        stats.worse_factor(1.0, 0)


def _power():
    from scripts import regression_power as power

    return power


def test_false_alarm_and_detection_targets_on_fake_timing_model():
    """Seeded comparisons drawn from the fake backend's virtual clock (3 vs 3 trials).

    Realistic noise: 5% per decode step plus 1% run-to-run drift (an H200's usual spread).
    Targets (issue #9): under 1% false alarms on identical runs, at least 95% of 10% slowdowns
    detected. Noisier machines (3% drift) must still not raise false alarms.
    """
    power = _power()
    r = power.rates(comparisons=400, trials=3, trial_cv=0.01, step_noise=0.05, seed=1)
    assert r["false_alarm"] < 0.01
    assert r["detection"] >= 0.95
    noisy = power.rates(comparisons=300, trials=3, trial_cv=0.03, step_noise=0.05, seed=2)
    assert noisy["false_alarm"] < 0.01


@given(st.lists(st.one_of(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
                          st.sampled_from([0.1, 0.2, 0.3, 7.0, 1e-300])), min_size=1, max_size=7))
def test_small_summaries_agree_with_numpy_to_the_bit(values):
    """summarize's pure-Python path (fewer than 8 values: a comparison's run means) is numpy's figures exactly."""
    import numpy as np

    from bench.results.stats import _summary_small

    x = np.asarray(values, dtype=float)
    med = float(np.median(x))
    q75, q25 = np.percentile(x, [75, 25])
    with np.errstate(over="ignore", invalid="ignore"):
        want = (x.size, med, float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0,
                float(np.median(np.abs(x - med))), float(q75 - q25), float(x.min()), float(x.max()))
    s = _summary_small([float(v) for v in values], "v")
    assert (s.n, s.median, s.mean, s.std, s.mad, s.iqr, s.minimum, s.maximum) == want


def test_ratio_interval_hand_computed_and_one_run_gives_none():
    # both sides with the same spread of run means (cv 0.0673, 2 runs): Welch's df is exactly 2, t_{0.975,2} = 4.302653
    head, base = (100.0, 110.0), (50.0, 55.0)
    sd_h, sd_b = stats.run_spread([[v] for v in head]).run_std, stats.run_spread([[v] for v in base]).run_std
    low, high = stats.ratio_interval(105.0, sd_h, 2, 52.5, sd_b, 2)
    se = math.sqrt(2 * (sd_h / 105.0) ** 2 / 2)
    assert low == pytest.approx(2.0 * math.exp(-4.302652729 * se)) and high == pytest.approx(2.0 * math.exp(4.302652729 * se))
    assert low < 2.0 < high and math.log(2.0 / low) == pytest.approx(math.log(high / 2.0))  # centred on a log scale
    assert stats.ratio_interval(105.0, sd_h, 1, 52.5, sd_b, 2) is None  # one process: no spread between processes
    assert stats.ratio_interval(105.0, None, 3, 52.5, sd_b, 2) is None
    assert stats.ratio_interval(10.0, 0.0, 3, 5.0, 0.0, 3) == (2.0, 2.0)  # a virtual clock: exact


def test_ratio_interval_covers_the_true_ratio_about_as_often_as_it_says():
    import numpy as np

    rng = np.random.default_rng(0)
    covered, n = 0, 800
    for _ in range(n):
        h = 200.0 * (1 + 0.05 * rng.standard_normal(4))  # 4 processes a side, 5 % spread between them
        b = 100.0 * (1 + 0.03 * rng.standard_normal(3))
        low, high = stats.ratio_interval(h.mean(), h.std(ddof=1), 4, b.mean(), b.std(ddof=1), 3)
        covered += low <= 2.0 <= high
    assert 0.915 <= covered / n <= 0.985
