"""Statistics over repeated trials: summaries, stability warnings, ratio tests. Pure, numpy only.

Three questions are answered here and nowhere else:

- *Is one cell's set of trials trustworthy?* `summarize` gives median, MAD, IQR and pyperf's
  stability warnings (spread over 10% of the mean, an extreme trial, too few trials).
- *What is a cell's figure, and how far does it move between processes?* `run_spread` takes a
  metric's values grouped by worker process (pyperf's runs, each with its trials) and returns
  the mean of the runs' means, the spread between runs and the spread within them, and a
  warning when the spread between processes is large (the one that matters for a verdict).
- *Did a metric change between two sets of trials?* `ratio_test` works on log values: the
  ratio head/base is exp(mean difference of logs) and its confidence interval comes from
  Student's t with pooled variance (noise on timings is multiplicative, so logs make the two
  sides' spreads comparable). `mann_whitney_u` is the exact rank test, offered for larger
  samples; with 3 vs 3 trials its smallest two-sided p-value is 0.1, so it can never reach
  significance there (see docs/guide/regressions.md for why the t-test on logs is the default).

The t distribution is computed from the regularized incomplete beta function so that scipy
is not a dependency; tests check it against known quantiles (and scipy where installed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

# pyperf's rules: a spread above 10% of the mean, or a trial 50% away from the mean, means the
# figure should not be trusted; fewer than 3 trials give no usable spread.
MAX_CV = 0.10
MAX_OUTLIER = 0.50
MIN_TRIALS = 3
# Between fresh processes: warn above 3 % (coefficient of variation of the run means), or when
# it exceeds 1 % and is several times the spread inside a process (trials then understate it).
MAX_RUN_CV = 0.03
RUN_CV_FLOOR = 0.01
RUN_TO_TRIAL = 4.0
ONE_RUN = "1 run"


@dataclass(frozen=True)
class RunSpread:
    """One metric over runs (fresh worker processes) and the trials inside each run."""

    value: float  # mean of the runs' means: every process weighs the same
    runs: int
    trials: int  # values in all runs
    run_means: tuple[float, ...]
    run_std: float | None  # sample std of the run means; None with one run
    trial_std: float | None  # pooled within-run sample std; None when no run has two trials
    warnings: tuple[str, ...] = ()

    @property
    def run_cv(self) -> float | None:
        return None if self.run_std is None or not self.value else self.run_std / abs(self.value)

    @property
    def trial_cv(self) -> float | None:
        return None if self.trial_std is None or not self.value else self.trial_std / abs(self.value)

    @property
    def std(self) -> float | None:
        """Return the spread a table prints after ±: between runs when there are two or more, else within the run."""
        return self.run_std if self.runs > 1 else self.trial_std


def run_spread(values_by_run: Sequence[Sequence[float]], name: str = "value") -> RunSpread:
    """Return the RunSpread of a metric's values grouped by run (ValueError if there are none)."""
    runs = [_clean(v) for v in values_by_run]
    runs = [r for r in runs if r.size]
    if not runs:
        raise ValueError(f"{name}: no values")
    means = np.array([r.mean() for r in runs])
    n = int(sum(r.size for r in runs))
    dof = n - len(runs)
    trial_std = math.sqrt(sum(float(((r - r.mean()) ** 2).sum()) for r in runs) / dof) if dof > 0 else None
    run_std = float(means.std(ddof=1)) if len(runs) > 1 else None
    spread = RunSpread(float(means.mean()), len(runs), n, tuple(float(m) for m in means), run_std, trial_std)
    return RunSpread(**{**spread.__dict__, "warnings": tuple(run_warnings(spread, name))})


def run_warnings(s: RunSpread, name: str = "value", groups: tuple[str, str, str] = (
        "runs (fresh processes)", "run", "trials in one process")) -> list[str]:
    """Return why a RunSpread's figure may not reproduce in another process (empty: no reason seen).

    groups: what the spread's groups are called (plural, singular) and what the spread inside one
    understates; tuning_warnings applies the same rule to cold builds."""
    plural, single, inside = groups
    short = plural.split(" (")[0]
    out = []
    run_cv, trial_cv = s.run_cv or 0.0, s.trial_cv
    if s.runs < 2:
        out.append(f"{name}: {ONE_RUN}: the spread between processes is not measured (use --runs 2 or more)")
    elif run_cv > MAX_RUN_CV:
        out.append(f"{name}: the {plural} differ by {run_cv:.1%} (standard deviation of the {single} means "
                   f"{_means(s)} over their mean; limit {MAX_RUN_CV:.0%}): the figure may not reproduce")
    elif trial_cv is not None and run_cv > RUN_CV_FLOOR and run_cv > RUN_TO_TRIAL * trial_cv:
        out.append(f"{name}: the {short} differ by {run_cv:.1%} (means {_means(s)}), {run_cv / trial_cv:.0f}x the spread "
                   f"inside a {single} ({trial_cv:.2%}): {inside} understate the uncertainty")
    # pyperf's 10 % rule (docs/guide/regressions.md) on the trials, whatever the number of runs.
    if trial_cv is not None and trial_cv > MAX_CV:
        out.append(f"{name}: the trials inside a {single} differ by {trial_cv:.1%} (standard deviation over the mean; "
                   f"limit {MAX_CV:.0%}): unstable, was the machine busy?")
    return out


def concerns(warnings: Sequence[str]) -> list[str]:
    """Return the warnings of run_warnings that say a figure is unstable (not the note that one run says nothing)."""
    return [w for w in warnings if f": {ONE_RUN}:" not in w]


def tuning_warnings(s: RunSpread, name: str = "value") -> list[str]:
    """Return why a figure belongs to one tuning: the run spread's rule applied to the means of cold builds.

    s: the run_spread of a metric's values grouped by tuning build (each a cold build with its own
    tuned kernels); empty with fewer than two builds."""
    if s.runs < 2:
        return []
    return concerns(run_warnings(s, name, ("tuning builds (cold builds, each its own tuned kernels)", "build",
                                           "the processes of one build")))


def _means(s: RunSpread) -> str:
    return ", ".join(f"{m:.4g}" for m in s.run_means)


@dataclass(frozen=True)
class Summary:
    """Median and spread of one metric over a cell's trials, with stability warnings."""

    n: int
    median: float
    mean: float
    std: float  # sample standard deviation (ddof=1); 0 for one trial
    mad: float  # median absolute deviation (unscaled)
    iqr: float  # 75th - 25th percentile
    minimum: float
    maximum: float
    warnings: tuple[str, ...] = field(default=())

    @property
    def cv(self) -> float:
        """Return std / |mean| (the coefficient of variation; inf when the mean is 0)."""
        return self.std / abs(self.mean) if self.mean else (0.0 if self.std == 0 else math.inf)


def summarize(values: Sequence[float], name: str = "value") -> Summary:
    """Return the Summary of one metric's trial values (NaN/None dropped; ValueError if none)."""
    small = [float(v) for v in values if v is not None]
    if len(small) < 8 and all(math.isfinite(v) for v in small):
        summary = _summary_small(small, name)  # a comparison summarizes thousands of 2-5 run means
    else:
        x = _clean(values)
        if x.size == 0:
            raise ValueError(f"{name}: no values to summarize")
        med = float(np.median(x))
        q75, q25 = np.percentile(x, [75, 25])
        std = float(x.std(ddof=1)) if x.size > 1 else 0.0
        summary = Summary(
            n=int(x.size), median=med, mean=float(x.mean()), std=std,
            mad=float(np.median(np.abs(x - med))), iqr=float(q75 - q25),
            minimum=float(x.min()), maximum=float(x.max()),
        )
    return Summary(**{**summary.__dict__, "warnings": tuple(stability_warnings(summary, name))})


def _summary_small(x: list[float], name: str) -> Summary:
    """Return summarize's figures of fewer than 8 finite values without numpy's per-call cost, to the bit:
    below 8 values numpy sums in order, and its median and linear percentile are computed as here."""
    if not x:
        raise ValueError(f"{name}: no values to summarize")
    n = len(x)
    s = sorted(x)
    mean = sum(x) / n
    med = _median_sorted(s)
    std = math.sqrt(sum((v - mean) * (v - mean) for v in x) / (n - 1)) if n > 1 else 0.0
    return Summary(n=n, median=med, mean=mean, std=std, mad=_median_sorted(sorted(abs(v - med) for v in x)),
                   iqr=_percentile_sorted(s, 0.75) - _percentile_sorted(s, 0.25), minimum=s[0], maximum=s[-1])


def _median_sorted(s: list[float]) -> float:
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _percentile_sorted(s: list[float], q: float) -> float:
    """Return numpy's linear percentile (q in [0, 1]) of sorted values, with its interpolation formula."""
    index = (len(s) - 1) * q
    lo = math.floor(index)
    t = index - lo
    if lo + 1 >= len(s):
        return s[-1]
    a, b = s[lo], s[lo + 1]
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def stability_warnings(s: Summary, name: str = "value") -> list[str]:
    """Return pyperf-style reasons not to trust a summary (empty list: looks stable)."""
    out = []
    if s.n < MIN_TRIALS:
        out.append(f"{name}: only {s.n} trial(s); at least {MIN_TRIALS} are needed to judge the spread")
    if s.n > 1 and s.cv > MAX_CV:
        out.append(f"{name}: the standard deviation is {s.cv:.0%} of the mean (over {MAX_CV:.0%}): unstable")
    if s.mean and s.n > 1:
        hi = (s.maximum - s.mean) / abs(s.mean)
        lo = (s.mean - s.minimum) / abs(s.mean)
        if hi > MAX_OUTLIER:
            out.append(f"{name}: the maximum is {hi:.0%} above the mean: an outlier trial")
        if lo > MAX_OUTLIER:
            out.append(f"{name}: the minimum is {lo:.0%} below the mean: an outlier trial")
    return out


def _clean(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]


# ---- Student's t distribution without scipy -------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Return the continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Return the regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """Return P(T > t) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=1024)
def t_ppf(q: float, df: float) -> float:
    """Return the q-quantile of Student's t (bisection on t_sf; 1e-12 absolute accuracy)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf(mid, df) > 1.0 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


# ---- comparing two samples ------------------------------------------------------------------


@dataclass(frozen=True)
class RatioTest:
    """head/base ratio of one metric, its confidence interval and two-sided p-value."""

    ratio: float  # exp(mean(log head) - mean(log base)); the geometric-mean ratio
    low: float  # confidence interval of the ratio
    high: float
    p_value: float  # two-sided, H0: ratio == 1
    confidence: float
    method: str
    n_base: int
    n_head: int

    @property
    def significant(self) -> bool:
        """Return True when the confidence interval excludes 1 (equivalently p < 1 - confidence)."""
        return self.low > 1.0 or self.high < 1.0


def ratio_test(base: Sequence[float], head: Sequence[float], confidence: float = 0.99) -> RatioTest:
    """Return the head/base RatioTest by Student's pooled t-test on log values.

    Needs at least 2 positive values on each side (ValueError otherwise). When both sides have
    zero spread (a deterministic metric such as a virtual-clock time or a memory figure) any
    difference is exact, so it is significant with p = 0.
    """
    b, h = _clean(base), _clean(head)
    if b.size < 2 or h.size < 2:
        raise ValueError(f"need at least 2 trials on each side for a confidence interval, got {b.size} and {h.size}")
    if (b <= 0).any() or (h <= 0).any():
        raise ValueError("ratio test needs positive values (times, throughputs, memory)")
    lb, lh = np.log(b), np.log(h)
    diff = float(lh.mean() - lb.mean())
    df = b.size + h.size - 2
    pooled_var = (((lb - lb.mean()) ** 2).sum() + ((lh - lh.mean()) ** 2).sum()) / df
    se = math.sqrt(pooled_var * (1.0 / b.size + 1.0 / h.size))
    method = f"Student t on log values (pooled, df={df})"
    # compare raw values: the mean of equal logs can differ from each log by rounding
    if se == 0.0 or (np.ptp(b) == 0 and np.ptp(h) == 0):
        diff = math.log(h[0] / b[0]) if np.ptp(b) == 0 and np.ptp(h) == 0 else diff
        p = 1.0 if diff == 0.0 else 0.0
        r = math.exp(diff)
        return RatioTest(r, r, r, p, confidence, method + "; zero spread", int(b.size), int(h.size))
    t = diff / se
    half = t_ppf(0.5 + confidence / 2.0, df) * se
    p = min(1.0, 2.0 * t_sf(abs(t), df))
    return RatioTest(math.exp(diff), math.exp(diff - half), math.exp(diff + half), p, confidence, method,
                     int(b.size), int(h.size))


# The confidence of the interval a speedup table prints beside each speedup (ratio_interval).
SPEEDUP_CONFIDENCE = 0.95


def ratio_interval(head_mean: float, head_sd: float | None, head_runs: int, base_mean: float, base_sd: float | None,
                   base_runs: int, confidence: float = SPEEDUP_CONFIDENCE) -> tuple[float, float] | None:
    """Return the (low, high) confidence interval of head_mean / base_mean, or None when it cannot be had.

    Each side is the mean of its runs' means, with sd the standard deviation of those run means
    (the spread between processes) over `runs` processes. The delta method on the log of the
    ratio: var(log ratio) ~ (sd_h / mean_h)^2 / runs_h + (sd_b / mean_b)^2 / runs_b, with
    Student's t at the Welch-Satterthwaite degrees of freedom; the interval is exp(log ratio
    +- t * se), so it is centred (on a log scale) on the ratio a table prints. None with fewer
    than 2 runs on a side (no spread between processes: one run says nothing about the next),
    a missing sd or a mean that is not positive.
    """
    if head_runs < 2 or base_runs < 2 or head_sd is None or base_sd is None:
        return None
    values = (head_mean, head_sd, base_mean, base_sd)
    if any(v is None or not math.isfinite(v) for v in values) or head_mean <= 0 or base_mean <= 0:
        return None
    ratio = head_mean / base_mean
    a = (head_sd / head_mean) ** 2 / head_runs
    b = (base_sd / base_mean) ** 2 / base_runs
    if a + b == 0.0:
        return ratio, ratio
    df = (a + b) ** 2 / (a * a / (head_runs - 1) + b * b / (base_runs - 1))
    half = t_ppf(0.5 + confidence / 2.0, df) * math.sqrt(a + b)
    return ratio * math.exp(-half), ratio * math.exp(half)


# The power a comparison should have to call a change of the size it looks for: 80 %, the
# usual convention (a real change of that size is missed one time in five).
POWER = 0.80


def detectable_ratio(log_sd: float, n_base: int, n_head: int, confidence: float = 0.99, power: float = POWER) -> float:
    """Return the smallest ratio (>1) the pooled t-test on logs detects with `power`, given the spread of the logs.

    The usual approximation (t quantiles in place of the noncentral t): the change must exceed
    (t_{1-a/2} + t_{power}) standard errors, the standard error being log_sd * sqrt(1/n_base + 1/n_head).
    """
    df = n_base + n_head - 2
    if df < 1:
        return math.inf
    if log_sd == 0:
        return 1.0
    se = log_sd * math.sqrt(1.0 / n_base + 1.0 / n_head)
    return math.exp((t_ppf(0.5 + confidence / 2.0, df) + t_ppf(power, df)) * se)


def runs_needed(log_sd: float, factor: float, confidence: float = 0.99, power: float = POWER, limit: int = 1000) -> int:
    """Return the runs a side (equal on both sides) the t-test needs to detect a change of `factor` with `power`."""
    target = math.log1p(factor)
    for n in range(2, limit + 1):
        if math.log(detectable_ratio(log_sd, n, n, confidence, power)) <= target:
            return n
    return limit


def power_note(base: Sequence[float], head: Sequence[float], factor: float, confidence: float
               ) -> tuple[list[str], float | None]:
    """Return (a note, the smallest change detected) where these runs, at their observed spread, cannot detect a change
    of `factor` with POWER (the pooled t-test on logs); ([], None) where they can."""
    if min(base) <= 0 or min(head) <= 0:
        return [], None
    sd = log_sd(base, head)
    if sd is None or sd == 0:
        return [], None
    detectable = detectable_ratio(sd, len(base), len(head), confidence)
    if detectable - 1.0 <= factor:
        return [], None
    return [f"too few runs to detect a {factor:.0%} change: at this spread ({sd:.1%} between runs) "
            f"{len(base)} vs {len(head)} runs detect only changes above {detectable - 1:.0%} ({POWER:.0%} power); "
            f"about {runs_needed(sd, factor, confidence)} runs a side would detect {factor:.0%}."], detectable - 1.0


def log_sd(base: Sequence[float], head: Sequence[float]) -> float | None:
    """Return the pooled sample standard deviation of the log values of both sides (None with fewer than 3 in all)."""
    b, h = np.log(_clean(base)), np.log(_clean(head))
    df = b.size + h.size - 2
    if b.size < 1 or h.size < 1 or df < 1:
        return None
    return math.sqrt((((b - b.mean()) ** 2).sum() + ((h - h.mean()) ** 2).sum()) / df)


@lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Return the number of rank arrangements giving U = 0 .. n1*n2 (no ties)."""
    # f(m, n) as a polynomial in u: f(m, n) = u^n f(m-1, n) + f(m, n-1)  (who holds the top rank)
    if n1 == 0 or n2 == 0:
        return (1,)
    a = _u_counts(n1 - 1, n2)
    b = _u_counts(n1, n2 - 1)
    out = [0] * (n1 * n2 + 1)
    for u, c in enumerate(a):
        out[u + n2] += c
    for u, c in enumerate(b):
        out[u] += c
    return tuple(out)


def mann_whitney_min_p(n1: int, n2: int) -> float:
    """Return the smallest two-sided p-value the exact Mann-Whitney test can give for n1 vs n2."""
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


@dataclass(frozen=True)
class MannWhitney:
    u: float  # U statistic of the first sample (count of pairs where x > y, ties 1/2)
    p_value: float  # two-sided
    exact: bool


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> MannWhitney:
    """Return the two-sided Mann-Whitney U test of x vs y: exact without ties when n1*n2 <= 2500.

    With ties or larger samples it uses the normal approximation with tie correction and
    continuity correction (as scipy's method='asymptotic').
    """
    a, b = _clean(x), _clean(y)
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney needs at least one value on each side")
    both = np.concatenate([a, b])
    ranks = _rankdata(both)
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    ties = len(np.unique(both)) < both.size
    if not ties and n1 * n2 <= 2500:
        counts = _u_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        k = int(round(u))
        lower = sum(counts[: k + 1]) / total
        upper = sum(counts[k:]) / total
        return MannWhitney(u, min(1.0, 2.0 * min(lower, upper)), True)
    mu = n1 * n2 / 2.0
    _, tie_counts = np.unique(both, return_counts=True)
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - float((tie_counts**3 - tie_counts).sum()) / (n * (n - 1))))
    if sigma == 0:
        return MannWhitney(u, 1.0, False)
    z = (abs(u - mu) - 0.5) / sigma
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return MannWhitney(u, min(1.0, p), False)


def _rankdata(x: np.ndarray) -> np.ndarray:
    """Return 1-based ranks with ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=float)
    sorted_x = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


@dataclass(frozen=True)
class RankCorrelation:
    rho: float  # Spearman's: the correlation of the two sides' ranks (ties: their mean rank)
    p: float  # one-sided: the chance of a correlation at least this high when the orders are unrelated
    n: int


EXACT_RANK_N = 7  # up to this many pairs the p-value counts every ordering (7! = 5040), beyond it Student's t


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> RankCorrelation | None:
    """Return Spearman's rank correlation of paired values and its one-sided p-value, or None with fewer than 3 pairs
    or a side whose values are all equal (it ranks nothing)."""
    a, b = _rankdata(np.asarray(x, dtype=float)), _rankdata(np.asarray(y, dtype=float))
    n = a.size
    if n < 3 or a.size != b.size or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    a, b = a - a.mean(), b - b.mean()
    dot = float(a @ b)
    rho = dot / math.sqrt(float(a @ a) * float(b @ b))
    if n <= EXACT_RANK_N:
        import itertools

        ranks_a = a.tolist()
        hits = total = 0
        for order in itertools.permutations(b.tolist()):
            total += 1
            hits += sum(u * v for u, v in zip(ranks_a, order, strict=True)) >= dot - 1e-9
        p = hits / total
    else:
        p = 0.0 if rho >= 1.0 - 1e-12 else t_sf(rho * math.sqrt((n - 2) / (1.0 - rho * rho)), n - 2)
    return RankCorrelation(min(max(rho, -1.0), 1.0), p, n)


# ---- verdicts --------------------------------------------------------------------------------

REGRESSED, IMPROVED, UNCHANGED, NOT_SIGNIFICANT, INCONCLUSIVE = (
    "regressed", "improved", "unchanged", "not significant", "inconclusive",
)


def worse_factor(ratio: float, direction: int) -> float:
    """Return how many times worse head is than base (>1 worse, <1 better) for a metric direction.

    direction +1: higher is better (tokens/s), so worse = base/head; -1: lower is better.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction}")
    return 1.0 / ratio if direction == 1 else ratio


def verdict(significant: bool, ratio: float, direction: int, factor: float) -> str:
    """Return regressed / improved only when the change is significant AND at least `factor`.

    factor 0.05 means a 5% change: regressed when head is >= 1.05 times worse.
    """
    worse = worse_factor(ratio, direction)
    if not significant:
        return NOT_SIGNIFICANT
    if worse >= 1.0 + factor:
        return REGRESSED
    if worse <= 1.0 / (1.0 + factor):
        return IMPROVED
    return UNCHANGED
