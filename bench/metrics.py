"""Per-request timings -> the metrics of one measured run. The one place each metric is defined.

Names and definitions follow vLLM's benchmark results: request_throughput (req/s),
output_throughput (tok/s), total_token_throughput, and mean/median/std/p90/p99 in ms of TTFT,
TPOT = (E2E - TTFT) / (output_len - 1), ITL (every gap between consecutive tokens) and E2E
latency. Duration is the wall time of the measured window (first request handed in to last
token out).

Two speeds: `output_throughput` is end-to-end (every output token over the whole window,
prefills included); `decode_throughput` is the generation speed, the decode phase's rate:
the tokens after each request's first, over the time during which some request was past its
first token (the union of the requests' [first token, last token] intervals). They differ
where prefill differs (long prompts, chunked or slow prefills); the speedup tables' generation
speedup is the ratio of decode_throughput (docs/guide/results.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

PERCENTILES = (90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
# Direction of each headline metric: +1 higher is better, -1 lower is better (used by compare).
DIRECTION = {
    "request_throughput": +1,
    "output_throughput": +1,
    "decode_throughput": +1,
    "total_token_throughput": +1,
    "tokens_per_joule": +1,
    **{f"{m}_{s}_ms": -1 for m in LATENCIES for s in ("mean", "median", "p90", "p99")},
    "peak_memory_gb": -1,
    "request_goodput": +1,
    "energy_j": -1,
    "sol_pct": +1,
    "output_throughput_per_user": +1,
    "output_throughput_per_gpu": +1,
}
# The client fell behind its schedule (tables warn): send lag p99 above this, or achieved < this share of offered.
LAG_P99_BOUND_MS = 10.0
ACHIEVED_RATE_SHARE = 0.95
# Over-saturation (a constant-rate pass): both the mean requests in flight and the median TTFT of the last
# third of the requests (by send time) exceed the first third's by this factor.
SATURATION_RISE = 1.5


class _Unset:
    """A field not measured by this pass (a CPU pass has no telemetry, an offline pass no send lag)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class PassMetrics:
    """The figures of one measured pass, one named field each (vLLM's names, units in the names).

    Built once per pass by bench.execution.worker.pass_result from the parts below, so a misspelt
    or unknown figure fails where it is made (TypeError naming it), not in a report. Stored as
    `to_dict()`: the fields this pass measured (UNSET ones left out), the same JSON object as
    before the type existed, so stores of every schema read alike.
    """

    # The timings (pass_metrics)
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    expected_output_tokens: int
    output_len_mismatches: int
    duration_s: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    decode_throughput: float | None
    ttft_mean_ms: float | None
    ttft_median_ms: float | None
    ttft_std_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tpot_mean_ms: float | None
    tpot_median_ms: float | None
    tpot_std_ms: float | None
    tpot_p90_ms: float | None
    tpot_p99_ms: float | None
    itl_mean_ms: float | None
    itl_median_ms: float | None
    itl_std_ms: float | None
    itl_p90_ms: float | None
    itl_p99_ms: float | None
    e2el_mean_ms: float | None
    e2el_median_ms: float | None
    e2el_std_ms: float | None
    e2el_p90_ms: float | None
    e2el_p99_ms: float | None
    # Interactivity (interactivity_metrics)
    output_throughput_per_user: float | None = UNSET
    output_throughput_per_gpu: float | None = UNSET
    gpus: int | None = UNSET
    # Efficiency (efficiency_metrics)
    tokens_per_joule: float | None = UNSET
    sol_pct: float | None = UNSET
    # Memory
    peak_memory_gb: float | None = UNSET
    peak_host_rss_gb: float | None = UNSET
    # GPU telemetry over the window (bench.machine.telemetry: None figures without NVML)
    energy_j: float | None = UNSET
    energy_valid: bool | None = UNSET
    avg_power_w: float | None = UNSET
    peak_nvml_memory_gb: float | None = UNSET
    sm_clock_mhz_median: float | None = UNSET
    sm_clock_mhz_min: float | None = UNSET
    mem_clock_mhz_median: float | None = UNSET
    temperature_c_max: float | None = UNSET
    gpu_busy_pct: float | None = UNSET
    throttle_power_pct: float | None = UNSET
    throttle_thermal_pct: float | None = UNSET
    telemetry_hz: float | None = UNSET
    telemetry_max_gap_ms: float | None = UNSET
    telemetry_samples: int | None = UNSET
    # Serving (the openai backend): the schedule, goodput, the client's lag, over-saturation
    offered_request_rate: float | None = UNSET
    achieved_request_rate: float | None = UNSET
    max_concurrency: int | str | None = UNSET
    request_goodput: float | None = UNSET
    failed_by_kind: dict | None = UNSET
    output_len_longer: int | None = UNSET
    output_len_shorter: int | None = UNSET
    send_lag_p50_ms: float | None = UNSET
    send_lag_p99_ms: float | None = UNSET
    send_lag_max_ms: float | None = UNSET
    client_behind: bool | None = UNSET
    in_flight_first: float | None = UNSET
    in_flight_last: float | None = UNSET
    ttft_first_ms: float | None = UNSET
    ttft_last_ms: float | None = UNSET
    oversaturated: bool | None = UNSET
    client_cpu_ms_per_request: float | None = UNSET
    server_input_tokens: int | None = UNSET

    def to_dict(self) -> dict:
        """Return the stored form: {name: value} of every field this pass measured."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not UNSET}


def _stats(name: str, values_s: Sequence[float]) -> dict[str, float | None]:
    if len(values_s) == 0:
        return {f"{name}_{k}_ms": None for k in ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))}
    ms = np.asarray(values_s, dtype=float) * 1000.0
    out = {
        f"{name}_mean_ms": float(ms.mean()),
        f"{name}_median_ms": float(np.median(ms)),
        f"{name}_std_ms": float(ms.std()),
    }
    for p in PERCENTILES:
        out[f"{name}_p{p}_ms"] = float(np.percentile(ms, p))
    return out


def time_per_output_token(e2el, ttft, output_len):
    """Return TPOT = (E2E - TTFT) / (output_len - 1), in e2el's unit; elementwise for numpy arrays.

    Defined for outputs of more than one token: each caller says what a one-token output gets.
    """
    return (e2el - ttft) / (output_len - 1)


def pass_metrics(timings, started: float, ended: float) -> dict:
    """Return the metrics dict of one run from its RequestTimings and its window (seconds)."""
    ok = [t for t in timings if t.error is None]
    duration = ended - started
    if duration <= 0:
        raise ValueError(f"measured window must be positive, got {duration} s")
    ttft, tpot, itl, e2el = [], [], [], []
    for t in ok:
        if t.token_times:
            ttft.append(t.token_times[0] - t.start)
            itl.extend(np.diff(t.token_times).tolist())
        e2e = t.end - t.start
        e2el.append(e2e)
        if t.output_len > 1 and t.token_times:
            tpot.append(time_per_output_token(e2e, t.token_times[0] - t.start, t.output_len))
    total_input = sum(t.input_len for t in ok)
    total_output = sum(t.output_len for t in ok)
    metrics = {
        "completed": len(ok),
        "failed": len(timings) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "expected_output_tokens": sum(t.expected_output_len for t in timings),
        "output_len_mismatches": sum(1 for t in ok if t.output_len != t.expected_output_len),
        "duration_s": duration,
        "request_throughput": len(ok) / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "decode_throughput": decode_throughput(ok),
    }
    for name, values in zip(LATENCIES, (ttft, tpot, itl, e2el), strict=True):
        metrics.update(_stats(name, values))
    return metrics


def decode_throughput(timings) -> float | None:
    """Return the generation speed in tok/s: tokens after each request's first over the decode time.

    Decode time is the length of the union of the requests' [first token, end] intervals, so
    concurrent requests (a batch, a server) are not counted twice and the prefills before each
    first token are left out. None when no request produced two tokens or more.
    """
    spans = sorted((t.token_times[0], t.end) for t in timings
                   if t.error is None and t.output_len > 1 and t.token_times and t.end > t.token_times[0])
    tokens = sum(t.output_len - 1 for t in timings
                 if t.error is None and t.output_len > 1 and t.token_times and t.end > t.token_times[0])
    covered, reach = 0.0, float("-inf")
    for a, b in spans:
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return tokens / covered if covered > 0 else None


def interactivity_metrics(timings, output_throughput: float, gpus: int) -> dict:
    """Return output tok/s per user and per GPU, and the GPUs counted.

    trtllm-bench's definitions (tensorrt_llm/bench/dataclasses/statistics.py and reporting.py):
    `output_throughput_per_user` is the mean over completed requests of each request's own
    output speed, output_len / E2E latency (the first token and its wait included);
    `output_throughput_per_gpu` is the pass's output_throughput over the GPUs the cell used
    (tensor-parallel size; a cell on the CPU counts one; an openai client counts its `server_gpus` option, default one).
    """
    if gpus < 1:
        raise ValueError(f"a cell uses at least one device, got gpus={gpus}")
    speeds = [t.output_len / (t.end - t.start) for t in timings if t.error is None and t.end > t.start]
    return {
        "output_throughput_per_user": float(np.mean(speeds)) if speeds else None,
        "output_throughput_per_gpu": output_throughput / gpus,
        "gpus": gpus,
    }


def send_lag_metrics(send_lag_s: Sequence[float], offered_rate: float | None, achieved_rate: float | None) -> dict:
    """Return the client's lag against its schedule: p50/p99/max send lag in ms and whether it fell behind.

    send_lag_s: per request, actual send time - scheduled send time (s). `client_behind` is True
    when lag p99 > LAG_P99_BOUND_MS or achieved < ACHIEVED_RATE_SHARE x offered (None: no schedule).
    """
    if len(send_lag_s) == 0:
        return {"send_lag_p50_ms": None, "send_lag_p99_ms": None, "send_lag_max_ms": None, "client_behind": None}
    ms = np.asarray(send_lag_s, dtype=float) * 1000.0
    p99 = float(np.percentile(ms, 99))
    behind = p99 > LAG_P99_BOUND_MS
    if offered_rate and achieved_rate is not None:
        behind = behind or achieved_rate < ACHIEVED_RATE_SHARE * offered_rate
    return {"send_lag_p50_ms": float(np.median(ms)), "send_lag_p99_ms": p99, "send_lag_max_ms": float(ms.max()),
            "client_behind": bool(behind)}


def saturation_metrics(timings) -> dict:
    """Return requests in flight and median TTFT of the first and last thirds of a pass, and the over-saturation flag.

    Requests are ordered by send time and cut in thirds; a third's in-flight figure is the mean,
    over its requests, of how many requests were in flight when each was sent. `oversaturated`
    is True when both figures of the last third exceed the first third's by SATURATION_RISE
    (GuideLLM's sign: load and TTFT rising together), None with fewer than 6 completed requests.
    """
    ok = sorted((t for t in timings if t.error is None and t.token_times), key=lambda t: t.start)
    out = {"in_flight_first": None, "in_flight_last": None, "ttft_first_ms": None, "ttft_last_ms": None,
           "oversaturated": None}
    if len(ok) < 6:
        return out
    starts = np.array([t.start for t in ok])
    ends = np.sort(np.array([t.end for t in ok]))
    # in flight at each send: sent before (inclusive) minus ended before
    in_flight = np.arange(1, len(ok) + 1) - np.searchsorted(ends, starts, side="right")
    ttft = np.array([(t.token_times[0] - t.start) * 1000.0 for t in ok])
    k = len(ok) // 3
    first, last = slice(0, k), slice(len(ok) - k, len(ok))
    out.update(in_flight_first=float(in_flight[first].mean()), in_flight_last=float(in_flight[last].mean()),
               ttft_first_ms=float(np.median(ttft[first])), ttft_last_ms=float(np.median(ttft[last])))
    out["oversaturated"] = bool(out["in_flight_last"] > SATURATION_RISE * out["in_flight_first"]
                                and out["ttft_last_ms"] > SATURATION_RISE * out["ttft_first_ms"])
    return out


def goodput(timings, duration_s: float, slo_ms: dict[str, float]) -> float | None:
    """Return request goodput: completed requests meeting every SLO per second (vLLM's), None without SLOs.

    slo_ms maps "ttft", "tpot" and/or "e2el" to a bound in ms; TPOT is 0 for a one-token output.
    """
    slo = {k: v / 1000.0 for k, v in slo_ms.items() if v}
    if not slo:
        return None
    unknown = set(slo) - {"ttft", "tpot", "e2el"}
    if unknown:
        raise ValueError(f"unknown SLO {sorted(unknown)[0]!r}: valid SLOs are 'e2el', 'tpot', 'ttft'")
    good = 0
    for t in timings:
        if t.error is not None or not t.token_times:
            continue
        ttft = t.token_times[0] - t.start
        e2el = t.end - t.start
        values = {"ttft": ttft, "e2el": e2el,
                  "tpot": time_per_output_token(e2el, ttft, t.output_len) if t.output_len > 1 else 0.0}
        good += all(values[k] <= bound for k, bound in slo.items())
    return good / duration_s


def efficiency_metrics(output_tokens: int, duration_s: float, energy_j: float | None,
                       sol_time_s: float | None) -> dict:
    """Return tokens_per_joule (output tokens / energy) and sol_pct (100 x lower-bound time / duration).

    Either is None when its input is missing (no NVML energy counter, no speed-of-light bound).
    """
    return {
        "tokens_per_joule": output_tokens / energy_j if energy_j else None,
        "sol_pct": 100.0 * sol_time_s / duration_s if sol_time_s and duration_s > 0 else None,
    }


# How many of a request's generated ids a stored sample keeps beside the digest of all of them: enough to
# say where two runs' outputs part (the first divergence), small enough for every pass of every matrix.
SAMPLE_IDS = 64


def common_prefix(a, b) -> int:
    """Return how many leading tokens two outputs share: where they first part (the first divergence)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def output_digest(ids) -> str:
    """Return the digest of a request's generated token ids (16 hex digits): equal digests, identical outputs."""
    import hashlib

    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def request_samples(timings) -> list[dict]:
    """Return compact per-request records (ms) stored with a result for latency distributions.

    Where the backend read the generated ids (RequestTiming.output_ids): `ids`, the first SAMPLE_IDS of
    them, and `digest`, of all of them (the timed pass's own outputs, compared across rows by the report).
    """
    out = []
    for t in timings:
        ttft = (t.token_times[0] - t.start) * 1000 if t.token_times else None
        sample = {
            "id": t.request_id,
            "in": t.input_len,
            "out": t.output_len,
            "ttft_ms": ttft,
            "e2el_ms": (t.end - t.start) * 1000,
            "error": t.error,
        }
        if t.output_ids is not None:
            sample["ids"] = list(t.output_ids[:SAMPLE_IDS])
            sample["digest"] = output_digest(t.output_ids)
        out.append(sample)
    return out
