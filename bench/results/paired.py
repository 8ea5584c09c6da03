"""Two cells measured in turns, compared run by run: `bench compare STORE STORE --base-only K=V --head-only K=V`.

Why: a host-bound step (an eager 7B decode step at batch 1 on a GPU) drifts between processes of one machine start,
by 11-28 % over a few minutes on the device tool's H100 hosts (docs/measurements/2026-12-07-h100-planted-timed-windows.md),
which hides a +20 % change from a test that compares the two sides' runs as two independent samples. `bench run`
already measures a matrix in rounds: round k runs process k of every cell (bench.execution.executors.run_chains), so
a matrix holding both the baseline and the changed cell measures them in turns, each round's two processes one after
the other. Their ratio, round by round, cancels the drift both share; the paired t-test on those log ratios (df =
rounds - 1) judges the change from the ratios' own spread. Where the two cells share a build key (options that are
not built, as hf's `plant`), each round's two cells run in one process, one after the other (with the run setting
order = "interleaved", one trial of each in turn), and so share that process's host speed too.

The rule (`paired_runs`): the two sides are paired only where each is one invocation's runs, the same invocation
(run_id), the same run indices, and each round's two processes next to each other in time (no other process of either
side started between them). Anything else is compared as two independent samples, as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bench.checks import is_finite_number
from bench.errors import BenchInputError
from bench.results import stats
from bench.spec.narrow import coerce_cli_value

AXES = ("backend", "model", "precision", "max_batch_size", "device")
PAIRED = "paired"  # the `test` name a paired row reports


def cell_matches(cell: dict, rule: dict) -> bool:
    """Return whether a stored cell matches `rule` ({key: 'v1|v2'}, `bench run --only`'s syntax): an axis (backend,
    model, precision, max_batch_size, device, workload: its name) or an option; a value matches as typed or as
    written. A key the cell does not have matches nothing."""
    options = cell.get("options") if isinstance(cell.get("options"), dict) else {}
    for key, want in rule.items():
        if key == "workload":
            have = (cell.get("workload") or {}).get("name") if isinstance(cell.get("workload"), dict) else None
        elif key in AXES:
            have = cell.get(key)
        elif key in options:
            have = options[key]
        else:
            return False
        wanted = [y for x in str(want).split("|") for y in (coerce_cli_value(x), x)]
        if have not in wanted and str(have) not in wanted:
            return False
    return True


def select_rows(rows: list, rule: dict | None, flag: str, name: str) -> list:
    """Return the rows whose cell matches `rule` (all rows without one); BenchInputError naming the flag when none
    does, with the values the store holds for the rule's keys."""
    if not rule:
        return rows
    kept = [r for r in rows if cell_matches(r.cell, rule)]
    if not kept:
        held = {}
        for r in rows:
            options = r.cell.get("options") if isinstance(r.cell.get("options"), dict) else {}
            for key in rule:
                v = (r.cell.get("workload") or {}).get("name") if key == "workload" else r.cell.get(key, options.get(key))
                held.setdefault(key, set()).add(str(v))
        said = "; ".join(f"{k}: {', '.join(sorted(v)[:6])}" for k, v in held.items())
        raise BenchInputError(f"{flag} {','.join(f'{k}={v}' for k, v in rule.items())} matches none of the "
                              f"{len(rows)} cell(s) of {name} (it holds {said})")
    return kept


def _runs(row) -> dict[tuple, tuple[float, list]]:
    """Return {process_key: (its first pass's start, its ok records)} of a row."""
    out: dict[tuple, tuple[float, list]] = {}
    for r in row.ok_records:
        start = r.started_at if is_finite_number(r.started_at) else math.nan
        first, recs = out.get(r.process_key, (math.inf, []))
        out[r.process_key] = (min(first, start) if not math.isnan(start) else math.nan, recs + [r])
    return out


def paired_runs(base, head) -> tuple[list[tuple], str | None]:
    """Return (the process keys of the rounds, base's and head's, in time order; why not paired) for two rows: rounds
    only where the two sides were measured in turns (module docstring), else ([], the reason, or None where the two
    sides are simply separate invocations)."""
    if len(base.contexts) != 1 or len(head.contexts) != 1 or base.context.run_id != head.context.run_id:
        return [], None
    b, h = _runs(base), _runs(head)
    if {k[1] for k in b} != {k[1] for k in h}:
        return [], "the two cells' runs of this invocation are not the same run indices"
    if len(b) < 2:
        return [], None
    starts = [(b[k][0], k, "b") for k in b] + [(h[k][0], k, "h") for k in h]
    if any(math.isnan(s) for s, _, _ in starts):
        return [], "a run's start time is not stored"
    order = sorted(starts, key=lambda x: x[0])
    for i in range(0, len(order), 2):  # each round's two processes next to each other: ranks 2j and 2j+1
        (_, k1, s1), (_, k2, s2) = order[i], order[i + 1]
        if s1 == s2 or k1[1] != k2[1]:
            return [], "the two cells' runs did not take turns (another run started between a round's two)"
    by_run = {k[1]: k for k in b}
    return [(by_run[run], next(k for k in h if k[1] == run)) for run in sorted(by_run, key=lambda r: b[by_run[r]][0])], None


def process_mean(row, key: tuple, metric: str) -> float | None:
    """Return the mean of a metric over one process's ok records of a row (its trials), or None: none has it as a
    finite number."""
    v = [r.metric(metric) for r in row.ok_records if r.process_key == key]
    v = [x for x in v if is_finite_number(x)]
    return sum(v) / len(v) if v else None


def paired_values(base, head, rounds: list[tuple], metric: str) -> tuple[list[float], list[float]]:
    """Return the metric's per-round values of each side (the mean of each process's trials), rounds where both
    sides have it."""
    pairs = [(process_mean(base, kb, metric), process_mean(head, kh, metric)) for kb, kh in rounds]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def paired_ratio_test(base: Sequence[float], head: Sequence[float], confidence: float = 0.99) -> stats.RatioTest:
    """Return the head/base RatioTest of paired values (round k of each side): Student t on the per-round log ratios,
    df = rounds - 1. ValueError with fewer than 2 rounds or a value that is not positive."""
    b, h = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    if b.size != h.size:
        raise ValueError(f"paired values need as many on each side, got {b.size} and {h.size}")
    if b.size < 2:
        raise ValueError(f"need at least 2 rounds for a paired interval, got {b.size}")
    if not (np.isfinite(b).all() and np.isfinite(h).all()) or (b <= 0).any() or (h <= 0).any():
        raise ValueError("ratio test needs positive values (times, throughputs, memory)")
    d = np.log(h) - np.log(b)
    n, mean = int(d.size), float(d.mean())
    sd = float(d.std(ddof=1))
    method = f"paired t on the rounds' log ratios (df={n - 1})"
    if sd == 0.0 or np.ptp(h / b) == 0:  # the raw ratios: logs of equal ratios can differ by rounding
        mean = math.log(float(h[0] / b[0]))
        p = 1.0 if mean == 0.0 else 0.0
        return stats.RatioTest(math.exp(mean), math.exp(mean), math.exp(mean), p, confidence, method + "; zero spread",
                               n, n)
    se = sd / math.sqrt(n)
    half = stats.t_ppf(0.5 + confidence / 2.0, n - 1) * se
    p = min(1.0, 2.0 * stats.t_sf(abs(mean / se), n - 1))
    return stats.RatioTest(math.exp(mean), math.exp(mean - half), math.exp(mean + half), p, confidence, method, n, n)


def paired_power_note(base: Sequence[float], head: Sequence[float], factor: float, confidence: float
                      ) -> tuple[list[str], float | None]:
    """Return (a note, the smallest change detected) where these rounds, at their ratios' spread, cannot detect a
    change of `factor` (80 % power); ([], None) where they can."""
    d = np.log(np.asarray(head, dtype=float)) - np.log(np.asarray(base, dtype=float))
    n = int(d.size)
    if n < 2 or not np.isfinite(d).all():
        return [], None
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return [], None

    def detectable(rounds: int) -> float:
        return math.exp((stats.t_ppf(0.5 + confidence / 2.0, rounds - 1) + stats.t_ppf(stats.POWER, rounds - 1))
                        * sd / math.sqrt(rounds))

    if detectable(n) - 1.0 <= factor:
        return [], None
    need = next((k for k in range(2, 1001) if math.log(detectable(k)) <= math.log1p(factor)), 1000)
    return [f"too few rounds to detect a {factor:.0%} change: at this spread of the rounds' ratios ({sd:.1%}) "
            f"{n} rounds detect only changes above {detectable(n) - 1:.0%} ({stats.POWER:.0%} power); about {need} "
            f"rounds would detect {factor:.0%}."], detectable(n) - 1.0


def paired_host_note(base, head, rounds: list[tuple], metric: str, direction: int) -> str:
    """Return why paired rounds spread, from their host probes (the same Python loop in each pass's process,
    bench.machine.host_load): where the loop's speed moved between a round's two cells by more than the runs' limit
    (bench.machine.telemetry.HOST_PROBE_SPREAD), the spread of those probe ratios, and whether the rounds' ratios of
    `metric` went with them beyond chance (HOST_PROBE_P); '' where the probes did not move or are not stored. Pairing
    cancels a host speed both cells of a round share, not one that changes between them: on an H100 of 2026-12-07
    the loop ran 0.61-1.68x as long in a plant's passes as in its baseline's of the same process, and each round's
    TPOT ratio followed it. `direction`: +1 where a higher figure is better (bench.metrics.DIRECTION)."""
    from bench.machine.telemetry import HOST_PROBE_P, HOST_PROBE_SPREAD
    from bench.results.records import HOST_PROBE

    probes, slowness = [], []
    for kb, kh in rounds:
        pb, ph = process_mean(base, kb, HOST_PROBE), process_mean(head, kh, HOST_PROBE)
        fb, fh = process_mean(base, kb, metric), process_mean(head, kh, metric)
        if all(is_finite_number(x) and x > 0 for x in (pb, ph, fb, fh)):  # a hostile round is left out
            probes.append(ph / pb)
            slowness.append((fh / fb) ** (-1 if direction > 0 else 1))  # larger: the head slower in that round
    if len(probes) < 2 or max(probes) <= (1 + HOST_PROBE_SPREAD) * min(probes):
        return ""
    said = (f"host speed inside the rounds: the same Python loop took {min(probes):.2f}-{max(probes):.2f}x as long in "
            f"the head's passes as in the base's of the same round (the host changed speed between a round's two "
            "cells, which pairing does not cancel)")
    order = stats.rank_correlation(probes, slowness)
    if order is None:
        return said + "."
    how = f"rank correlation {order.rho:.2f} over {order.n} rounds, p {order.p:.2g}"
    return said + (f", and the rounds' ratios went with it ({how})." if order.p <= HOST_PROBE_P else
                   f", but the rounds' ratios did not follow it beyond chance ({how}).")
