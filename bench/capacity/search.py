"""Capacity under an SLO: which load to probe, whether a probe met the SLO, and the report.

Pure logic, no processes: `search_capacity(probe, axis, lower, upper, tolerance)` asks any
`probe(value) -> ProbeResult` (a worker-backed one is bench.capacity.probes; tests pass a fake)
and returns the largest value that met the SLO. The load lives on a grid of `tolerance`
steps (value = k x tolerance) so the integer bracketing and bisection of bench.oom.search
(`largest_passing`: double k until a probe misses, then bisect the last gap) decide it; the
answer is exact to one step: capacity passes, capacity + tolerance does not (or is above upper).

An SLO is a set of percentile bounds, e.g. `ttft_p99_ms=500,tpot_p99_ms=50`: latency ttft,
tpot or e2el, percentile p50, p90 or p99, in ms. A probe meets it when every one of its
measured passes (every trial of every run) has every chosen percentile within its bound: the
worst pass decides, so a capacity holds in each fresh process, not just on average. A probe
whose passes failed (error, timeout) does not meet it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from bench.checks import MAX_NUM_REQUESTS, check_number
from bench.errors import BenchInputError, choices
from bench.machine.failures import first_line

AXES = {
    "request_rate": "open loop: mean requests/s offered (openai backend's option request_rate)",
    "max_concurrency": "closed loop: requests in flight at most (openai backend's option max_concurrency)",
    "max_batch_size": "closed loop: the cell's max_batch_size (every backend; openai: the concurrency by default)",
}
SLO_LATENCIES = ("ttft", "tpot", "e2el")
# The highest request rate a search may probe: a million requests a second is beyond any one server.
MAX_REQUEST_RATE = 1e6
SLO_PERCENTILES = {"p50": "median", "p90": "p90", "p99": "p99"}


def parse_slo(text: str | None) -> dict[str, float]:
    """Return {'ttft_p99_ms': 500.0, ...} from 'ttft_p99_ms=500,tpot_p99_ms=50'; BenchInputError naming the fix."""
    example = "e.g. --slo ttft_p99_ms=500,tpot_p99_ms=50"
    if not text or not text.strip():
        raise BenchInputError(f"--slo is required: the latency bounds a load must meet, {example}")
    out: dict[str, float] = {}
    valid = [f"{m}_{p}_ms" for m in SLO_LATENCIES for p in SLO_PERCENTILES]
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        name = name.strip()
        if not sep:
            raise BenchInputError(f"--slo: {part.strip()!r} is not NAME=MS; {example}")
        if name not in valid:
            raise BenchInputError(f"--slo: unknown bound {name!r}: valid names are {choices(valid)} ({example})")
        try:
            bound = float(value)
        except ValueError:
            raise BenchInputError(f"--slo: {name}={value.strip()!r} is not a number of milliseconds; {example}") from None
        if not bound > 0 or math.isinf(bound):
            raise BenchInputError(f"--slo: {name}={value.strip()} must be a positive, finite number of milliseconds")
        if name in out:
            raise BenchInputError(f"--slo: {name} is given twice")
        out[name] = bound
    return out


def slo_metric(name: str) -> str:
    """Return the record metric an SLO bound reads: 'ttft_p99_ms' -> 'ttft_p99_ms', 'tpot_p50_ms' -> 'tpot_median_ms'."""
    latency, pct, _ = name.split("_")
    return f"{latency}_{SLO_PERCENTILES[pct]}_ms"


def slo_text(slo: dict[str, float]) -> str:
    return ", ".join(f"{k} <= {v:g}" for k, v in slo.items())


def check_grid(axis: str, lower: float, upper: float, tolerance: float | None) -> tuple[float, int, int]:
    """Return (step, k_lower, k_upper): the load grid value = k x step; BenchInputError if the bounds are bad."""
    if axis not in AXES:
        raise BenchInputError(f"unknown capacity axis {axis!r}: valid axes are {choices(AXES)}")
    integer = axis != "request_rate"
    for name, value in (("lower", lower), ("upper", upper), ("tolerance", tolerance)):
        if value is None:
            continue
        # A count of requests (in flight, in a batch) beyond what any workload holds answers nothing.
        check_number(value, f"capacity search: --{name} of axis {axis}", above=0,
                     maximum=MAX_NUM_REQUESTS if integer else MAX_REQUEST_RATE,
                     hint="a count of requests, at most a workload's" if integer else "requests per second")
        if integer and value != int(value):
            raise BenchInputError(f"capacity search: --{name} of axis {axis} must be an integer, got {value!r}")
    step = tolerance if tolerance is not None else (1 if integer else lower / 4)
    if lower > upper:
        raise BenchInputError(f"capacity search: the bounds are inverted (lower {lower:g} > upper {upper:g}); swap them")
    k_lower = max(1, round(lower / step))
    k_upper = math.floor(upper / step + 1e-9)
    if k_upper < k_lower:
        raise BenchInputError(f"capacity search: no step of {step:g} fits between {lower:g} and {upper:g}; "
                              "lower the --tolerance")
    return step, k_lower, k_upper


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found: whether it met the SLO, the worst pass's figures, and its goodput."""

    value: float
    meets: bool
    worst: dict  # SLO name -> the worst pass's value (ms); None where no pass had it
    passes: int = 0  # measured passes that ended ok
    failed: int = 0  # passes that did not (error, timeout)
    violated: tuple[str, ...] = ()
    request_goodput: float | None = None  # mean over passes: requests meeting every per-request bound per second
    request_throughput: float | None = None
    seconds: float | None = 0.0  # the probe's wall time (None: rebuilt from stored records, which keep only passes)
    error: str | None = None
    busy_passes: int = 0  # measured passes that ran on a busy machine (bench.machine.host_load's rule)
    busy: str | None = None  # why, for the busiest of them: the figures may be high (latency) and low (throughput)


def judge(value: float, pass_metrics: list[dict], failures: list[str], slo: dict[str, float],
          busy: list[tuple[str, ...]] = ()) -> ProbeResult:
    """Return the ProbeResult of the measured passes at one load: meets iff every pass meets every bound.

    busy: per measured pass, why its machine was busy (bench.machine.host_load.busy_reasons; empty when it was not).
    """
    worst: dict = {}
    violated = []
    for name, bound in slo.items():
        values = [m.get(slo_metric(name)) for m in pass_metrics]
        known = [v for v in values if v is not None]
        worst[name] = max(known) if known else None
        if not known or len(known) < len(values) or max(known) > bound:
            violated.append(name)
    goodputs = [m["request_goodput"] for m in pass_metrics if m.get("request_goodput") is not None]
    rates = [m["request_throughput"] for m in pass_metrics if m.get("request_throughput") is not None]
    meets = bool(pass_metrics) and not failures and not violated
    loaded = [tuple(b) for b in busy if b]
    return ProbeResult(value, meets, worst, len(pass_metrics), len(failures), tuple(violated),
                       sum(goodputs) / len(goodputs) if goodputs else None,
                       sum(rates) / len(rates) if rates else None,
                       error=failures[0] if failures else None, busy_passes=len(loaded),
                       busy="; ".join(max(loaded, key=len)) if loaded else None)


@dataclass
class Capacity:
    """The search's answer: the largest load that met the SLO, the smallest that did not, the evidence."""

    axis: str
    slo: dict
    lower: float
    upper: float
    tolerance: float | None  # None: not recorded (capacity-probe records from before it was)
    strategy: str | None
    capacity: float | None = None  # None: even `lower` missed the SLO
    first_miss: float | None = None  # None: everything up to `upper` met it
    probes: list[ProbeResult] = field(default_factory=list)

    @property
    def at_capacity(self) -> ProbeResult | None:
        hits = [p for p in self.probes if self.capacity is not None and p.value == self.capacity]
        return hits[-1] if hits else None

    def busy_text(self) -> str | None:
        """Return why the answer is not a result when a probe that decides it (the capacity, the first miss, or the
        lower bound of a search that found none) ran on a busy machine, else None."""
        deciding = {v for v in (self.capacity, self.first_miss) if v is not None} or {self.lower}
        busy = [p for p in self.probes if p.value in deciding and p.busy_passes]
        if not busy:
            return None
        said = "; ".join(f"{self.axis} {p.value:g}: {p.busy_passes} of {p.passes} pass(es) ({p.busy})" for p in busy)
        return (f"measured on a busy machine ({said}): latency under load from other processes is not the "
                "configuration's, so this answer may be too low; run the search again on an idle machine")


def search_capacity(probe: Callable[[float], ProbeResult], axis: str, lower: float, upper: float,
                    tolerance: float | None = None, strategy: str = "grow", slo: dict | None = None) -> Capacity:
    """Return the largest load in [lower, upper] (to one `tolerance` step) whose probe meets the SLO.

    grow: probe lower, double the load until a probe misses (or upper meets), then bisect;
    bisect: bisect between lower and upper at once. Latency is assumed to rise with load.
    """
    from bench.oom.search import check_bounds, largest_passing

    step, k_lo, k_hi = check_grid(axis, lower, upper, tolerance)
    check_bounds(k_lo, k_hi, strategy)
    result = Capacity(axis, dict(slo or {}), lower, upper, step, strategy)

    def value(k: int) -> float:
        v = k * step
        return int(round(v)) if axis != "request_rate" else round(v, 9)

    def passes(k: int) -> bool:
        outcome = probe(value(k))
        result.probes.append(outcome)
        return outcome.meets

    lo, hi = largest_passing(passes, k_lo, k_hi, strategy)
    result.capacity = None if lo is None else value(lo)
    result.first_miss = None if hi is None else value(hi)
    return result


def capacity_markdown(c: Capacity, label: str) -> str:
    """Return the capacity report of one configuration: the answer, its bracket, goodput there, every probe."""
    unit = {"request_rate": "req/s", "max_concurrency": "requests in flight", "max_batch_size": "batch size"}[c.axis]
    lines = [f"### {label}", "", f"SLO: {slo_text(c.slo)} (ms; every measured pass must meet every bound)", ""]
    busy = c.busy_text()
    if c.capacity is None:
        lines.append(f"**capacity: none**: even {c.axis} = {c.lower:g} misses the SLO")
    else:
        above = f"{c.first_miss:g} misses it" if c.first_miss is not None else f"the upper bound {c.upper:g} meets it too"
        how = "; ".join(x for x in (None if c.tolerance is None else f"resolution {c.tolerance:g}", c.strategy) if x)
        lines.append(f"**capacity: {c.axis} = {c.capacity:g} {unit}** (bracket: {c.capacity:g} meets the SLO, {above}"
                     + (f"; {how})" if how else ")"))
        at = c.at_capacity
        if at is not None and at.request_goodput is not None:
            lines.append(f"goodput at capacity: {at.request_goodput:.3f} req/s of {at.request_throughput or 0:.3f} req/s "
                         "completed (requests meeting every bound, taken per request)")
    if busy:  # the answer's own next line: a capacity measured under others' load is not the configuration's
        lines.append(f"⚠ not a result: {busy}")
    lines += ["", "| probe | " + c.axis + " | meets SLO | " + " | ".join(f"{k} (worst pass)" for k in c.slo)
              + " | passes ok / failed | busy machine | req/s | goodput (req/s) | seconds |",
              "|" + "---|" * (9 + len(c.slo) - 1)]
    for i, p in enumerate(c.probes):
        worst = [("—" if p.worst.get(k) is None else f"{p.worst[k]:.1f}") + (" ✗" if k in p.violated else "")
                 for k in c.slo]
        lines.append(f"| {i + 1} | {p.value:g} | {'yes' if p.meets else 'no'} | " + " | ".join(worst)
                     + f" | {p.passes} / {p.failed} | " + (f"⚠ {p.busy_passes} of {p.passes}" if p.busy_passes else "no")
                     + " | " + ("—" if p.request_throughput is None else f"{p.request_throughput:.3f}")
                     + " | " + ("—" if p.request_goodput is None else f"{p.request_goodput:.3f}")
                     + " | " + ("—" if p.seconds is None else f"{p.seconds:.1f}") + " |")
    errors = [p for p in c.probes if p.error]
    for p in errors[:3]:
        lines.append(f"\nprobe at {p.value:g} failed: {p.error[:300]}")
    return "\n".join(lines) + "\n"


def search_label(backend: str, model: str, precision: str, workload: str, max_batch_size, axis: str) -> str:
    """Return the heading of one configuration's search (the live report's and the stored one's)."""
    return f"{backend}/{model}/{precision} on {workload}" + (
        f", max_batch_size {max_batch_size}" if axis != "max_batch_size" else "")


def stored_capacities(records) -> list[tuple[str, str, str, Capacity]]:
    """Rebuild each search's answer from its capacity-probe records (`bench report` of a capacity store).

    One search per run context and configuration (the cell with the searched axis set aside), in the
    order stored; each probe judged again from its stored passes as `judge` judged it live, and the
    capacity the largest load that met the SLO below the smallest that missed it (the search's answer
    whenever latency rose with load). Probe seconds are not stored: the table shows "—" there.
    Returns (label, run id, configuration key, answer) per search, the key equal for the same cell.
    """
    groups: dict[tuple, list] = {}
    for r in records:
        target = r.target
        if not target.get("axis"):
            continue
        cell = dict(r.cell)
        options = dict(cell.get("options") or {})
        if target["axis"] == "max_batch_size":
            cell.pop("max_batch_size", None)
        else:
            options.pop(target["axis"], None)
        cell["options"] = options
        groups.setdefault((r.context.run_id, json.dumps(cell, sort_keys=True, default=str)), []).append(r)
    out = []
    for (run_id, config), recs in groups.items():
        target = recs[0].target
        axis, slo, search = target["axis"], dict(target.get("slo") or {}), target.get("search") or {}
        by_value: dict = {}
        for r in recs:
            by_value.setdefault(r.target["value"], []).append(r)
        probes = []
        for value, passes in by_value.items():
            oks = [r.metrics or {} for r in passes if r.status == "ok"]
            failures = [f"{r.status}: {first_line(r.error)}" for r in passes if r.status != "ok"]
            busy = [r.busy_reasons for r in passes if r.status == "ok"]
            probes.append(replace(judge(value, oks, failures, slo, busy), seconds=None))
        missed = [p.value for p in probes if not p.meets]
        met = [p.value for p in probes if p.meets and all(p.value < m for m in missed)]
        capacity = max(met) if met else None
        above = [m for m in missed if capacity is None or m > capacity]
        values = list(by_value)
        c = Capacity(axis, slo, search.get("lower", min(values)), search.get("upper", max(values)),
                     search.get("tolerance"), search.get("strategy"), capacity, min(above) if above else None, probes)
        cell = recs[0].cell
        label = search_label(cell["backend"], cell["model"], cell["precision"], (cell.get("workload") or {}).get("name"),
                             cell.get("max_batch_size"), axis)
        out.append((label, run_id, config, c))
    return out


def capacity_section(records) -> str:
    """Return the report's capacity section: every stored search, and whether repeated searches agree.

    Searches of one configuration (the same cell but for the searched axis: the same server, options and
    workload) under one SLO in separate invocations are its repeats: a capacity counts once two agree;
    where they differ, a ⚠ line names each answer and its run.
    """
    searches = stored_capacities(records)
    parts, repeats = [], {}
    for label, run_id, config, c in searches:
        parts.append(capacity_markdown(c, f"{label} (run {run_id})"))
        repeats.setdefault((config, label, c.axis, slo_text(c.slo)), []).append((run_id, c.capacity))
    notes = []
    for (_, label, axis, slo), answers in repeats.items():
        if len(answers) < 2:
            continue
        said = ", ".join(f"{'none' if v is None else f'{v:g}'} (run {run})" for run, v in answers)
        if len({v for _, v in answers}) > 1:
            notes.append(f"⚠ {label}: the {len(answers)} searches under {slo} disagree on {axis}: {said}; the "
                         "capacity did not reproduce (a server still warming up, or a load near the SLO's edge: "
                         "docs/guide/capacity.md)")
        else:
            notes.append(f"{label}: {len(answers)} searches under {slo} agree on {axis}: {said}")
    return "\n".join(notes + ([""] if notes else []) + parts)
