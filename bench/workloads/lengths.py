"""Length statistics of a workload: the summary figures `bench workload show` prints (pure functions).

The dashboard draws its length histograms from the stored samples (bench.report.figures).
Percentiles are numpy.percentile's (linear interpolation between ranks), as everywhere in the harness.
"""

from __future__ import annotations

import numpy as np

STAT_KEYS = ("min", "mean", "p50", "p90", "max")


def describe(values: list[int]) -> dict[str, float]:
    """Return min, mean, p50, p90 and max of values."""
    p50, p90 = np.percentile(values, [50, 90])
    return {"min": min(values), "mean": sum(values) / len(values), "p50": float(p50), "p90": float(p90), "max": max(values)}


def _lengths(workload_or_requests) -> tuple[list[int], list[int]]:
    reqs = getattr(workload_or_requests, "requests", workload_or_requests)
    return [r.input_len for r in reqs], [r.output_len for r in reqs]


def length_stats(workload_or_requests) -> dict:
    """Return {"num_requests", "input": describe(...), "output": describe(...)}."""
    ins, outs = _lengths(workload_or_requests)
    if not ins:
        raise ValueError("a workload without requests has no length statistics")
    return {"num_requests": len(ins), "input": describe(ins), "output": describe(outs)}


def format_stats(workload) -> str:
    """Return the text `bench workload show` prints: counts, drops by rule, length figures."""
    stats = length_stats(workload)
    lines = [
        f"workload {workload.name}: {stats['num_requests']} requests, content hash {workload.content_hash}",
        f"tokenizer: {workload.tokenizer}",
        f"source: {workload.source.get('name')}"
        + (f" (sha256 {workload.source['sha256'][:16]})" if workload.source.get("sha256") else ""),
    ]
    parse = workload.source.get("parse") or {}
    if parse:
        skipped = {"invalid_json": parse.get("skipped_invalid_json", 0), "non_utf8": parse.get("skipped_non_utf8", 0)}
        skipped.update(parse.get("skipped_by_reason") or {})
        stop = f"; truncated, parsing stopped at byte {parse.get('stopped_at_byte')}" if parse.get("truncated") else ""
        lines.append(
            f"records: {parse.get('records')} complete; skipped while parsing: "
            + (", ".join(f"{k}={v}" for k, v in sorted(skipped.items()) if v) or "none")
            + stop
        )
    if workload.dropped:
        lines.append("dropped by rule: " + ", ".join(f"{k}={v}" for k, v in workload.dropped.items()))
    if workload.source.get("oversampled"):
        lines.append(f"oversampled (drawn again with replacement): {workload.source['oversampled']}")
    spec = workload.spec
    if spec.get("request_rate") is not None:
        lines.append(f"arrivals: rate {spec['request_rate']} req/s, burstiness {spec.get('burstiness', 1.0)}, "
                     f"last at {workload.requests[-1].arrival_s:.3f} s")
    if spec.get("max_concurrency") is not None:
        lines.append(f"max_concurrency: {spec['max_concurrency']}")
    lines.append(f"{'tokens':<8}" + "".join(f"{k:>10}" for k in STAT_KEYS))
    for side in ("input", "output"):
        lines.append(f"{side:<8}" + "".join(f"{stats[side][k]:>10.1f}" if k == "mean" else f"{stats[side][k]:>10g}" for k in STAT_KEYS))
    return "\n".join(lines)
