"""OOM boundary search: the largest max_batch_size that fits, found with few, cheap probes.

Pure logic, no processes: `search_boundary(probe, lower, upper)` decides which batch sizes to
probe, given any `probe(batch_size) -> ProbeOutcome` (a worker-backed one lives in
bench.oom.probes; tests pass a fake). Also here: the probe's worst-case shape (`probe_lengths`,
`probe_cell`) and the frontier table built from stored probe records (`frontier_rows`,
`frontier_markdown`). Why a probe's peak bounds the full run's peak: docs/guide/oom.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bench.errors import BenchInputError, choices

STRATEGIES = ("grow", "bisect")


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe found: status 'ok' or 'oom' (anything else stops the search)."""

    batch_size: int
    status: str
    peak_memory_gb: float | None = None  # ok: the pass's peak; oom: the peak seen before failing
    seconds: float = 0.0  # wall time of the probe (worker start, load, pass)
    reused: bool = False  # taken from the store, not run again
    error: str | None = None


@dataclass
class Boundary:
    """The search's answer: largest size that fits, smallest that does not, and the evidence."""

    lower: int
    upper: int
    strategy: str
    largest_fit: int | None = None  # None: even `lower` did not fit
    smallest_oom: int | None = None  # None: everything up to `upper` fit
    probes: list[ProbeOutcome] = field(default_factory=list)
    flaky_sizes: list[int] = field(default_factory=list)  # sizes seen both fitting and not fitting

    def outcome(self, batch_size: int) -> ProbeOutcome | None:
        """Return the last probe of batch_size, or None if it was not probed."""
        hits = [p for p in self.probes if p.batch_size == batch_size]
        return hits[-1] if hits else None


class ProbeFailed(RuntimeError):
    """A probe ended neither ok nor oom (error, timeout): the boundary cannot be decided."""

    def __init__(self, outcome: ProbeOutcome, boundary: Boundary):
        super().__init__(f"probe at batch size {outcome.batch_size} ended with status {outcome.status!r}: {outcome.error}")
        self.outcome = outcome
        self.boundary = boundary


def check_bounds(lower, upper, strategy: str = "grow") -> None:
    """Raise BenchInputError unless 1 <= lower <= upper are integers and the strategy is known."""
    for name, value in (("lower", lower), ("upper", upper)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BenchInputError(f"the {name} batch-size bound must be a positive integer, got {value!r}")
    if lower > upper:
        raise BenchInputError(f"the batch-size bounds are inverted: lower {lower} > upper {upper}; swap them")
    if strategy not in STRATEGIES:
        raise BenchInputError(f"unknown search strategy {strategy!r}: valid strategies are {choices(STRATEGIES)}")


def probe_budget(lower: int, upper: int, strategy: str = "bisect") -> int:
    """Return the most probes a noise-free search may use (including the confirmation probe).

    bisect: the first probe at `lower`, ceil(log2(upper - lower + 1)) bisection steps over the
    remaining sizes, one confirmation. With lower = 1 this is the bound
    ceil(log2(upper / lower)) + 2 exactly. (For lower > 1 no search can meet that target at
    integer resolution: there are upper - lower + 2 possible answers.)
    grow: lower, at most ceil(log2(upper / lower)) doublings, then a bisection of the last
    doubling's gap (at most ceil(log2(gap)) probes), one confirmation.
    """
    if strategy == "bisect":
        return 1 + math.ceil(math.log2(upper - lower + 1)) + 1
    doublings = math.ceil(math.log2(upper / lower)) if upper > lower else 0
    gap = max(1, min(upper - lower, upper // 2))
    return 1 + doublings + math.ceil(math.log2(gap)) + 1


def search_boundary(
    probe: Callable[[int], ProbeOutcome],
    lower: int,
    upper: int,
    strategy: str = "grow",
    confirm: bool = True,
) -> Boundary:
    """Return the OOM boundary in [lower, upper], probing as few batch sizes as it can.

    grow: probe lower, double until a size does not fit (or upper fits), then bisect the last
    gap; cheapest when the boundary is far below upper (probes of small batches are also the
    cheapest). bisect: probe lower, then bisect (lower, upper]; the fewest probes in the worst
    case. Then `confirm` probes the largest fitting size again: a size that fits once and
    fails once is reported in `flaky_sizes` (never hidden), the boundary moves below it and the
    search goes on below. Any other mixed evidence (a size fitting above one that did not) is
    reported the same way.
    """
    check_bounds(lower, upper, strategy)
    result = Boundary(lower=lower, upper=upper, strategy=strategy)

    def fits(batch_size: int) -> bool:
        outcome = probe(batch_size)
        result.probes.append(outcome)
        if outcome.status not in ("ok", "oom"):
            raise ProbeFailed(outcome, result)
        return outcome.status == "ok"

    lo, hi = largest_passing(fits, lower, upper, strategy)
    if lo is None:
        result.smallest_oom = lower
        _note_inconsistencies(result)
        return result
    if confirm and not fits(lo):
        # Fitted once, failed once: report it and continue below it (no second confirmation,
        # so noise cannot make the search loop).
        hi = lo
        below = [p.batch_size for p in result.probes if p.status == "ok" and p.batch_size < lo]
        if below:
            lo, hi = _bisect(fits, max(below), hi, upper)
        else:
            lo = None
    result.largest_fit, result.smallest_oom = lo, hi
    _note_inconsistencies(result)
    return result


def largest_passing(passes: Callable[[int], bool], lower: int, upper: int, strategy: str = "grow"
                    ) -> tuple[int | None, int | None]:
    """Return (largest integer in [lower, upper] that passes, smallest that fails above it; None: none seen).

    The bracketing and bisection both `bench oom` and `bench capacity` use: probe lower; grow
    doubles it until a value fails (or upper passes), then bisects the last gap; bisect bisects
    (lower, upper] at once. A pass is assumed monotone (everything below a passing value passes).
    """
    if not passes(lower):
        return None, lower
    lo, hi = lower, None  # lo passes; hi does not (None: nothing failed yet)
    if strategy == "grow":
        while hi is None and lo < upper:
            size = min(2 * lo, upper)
            if passes(size):
                lo = size
            else:
                hi = size
    return _bisect(passes, lo, hi, upper)


def _bisect(fits: Callable[[int], bool], lo: int, hi: int | None, upper: int) -> tuple[int, int | None]:
    """Return (largest fit, smallest oom) between lo (fits) and hi (oom; None = above upper)."""
    top = upper + 1 if hi is None else hi  # a virtual OOM just above the upper bound
    while top - lo > 1:
        mid = (lo + top) // 2
        if fits(mid):
            lo = mid
        else:
            top = hi = mid
    return lo, hi


def _note_inconsistencies(result: Boundary) -> None:
    oks = {p.batch_size for p in result.probes if p.status == "ok"}
    ooms = {p.batch_size for p in result.probes if p.status == "oom"}
    flaky = oks & ooms
    if ooms:
        flaky |= {s for s in oks if s > min(ooms)}  # fitted although a smaller size did not
    result.flaky_sizes = sorted(flaky)


# --- the probe's shape -----------------------------------------------------------------------


def probe_lengths(max_input_len: int, max_output_len: int, decode_steps: int = 4) -> tuple[int, int]:
    """Return (prompt length, output length) of a probe request for the given worst case.

    The prompt covers input + output - k tokens and k tokens are decoded, so the KV cache
    reaches the full input + output length (dynamic caches grow per token; static caches and
    engines size it from prompt + new tokens), and the last k decode steps run at the final
    length. The prefill is then longer than the real one: the probe's peak is >= the full
    run's (docs/guide/oom.md).
    """
    for name, value in (("max_input_len", max_input_len), ("max_output_len", max_output_len),
                        ("decode_steps", decode_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BenchInputError(f"OOM probe: {name} must be a positive integer, got {value!r}")
    steps = min(decode_steps, max_output_len)
    return max_input_len + max_output_len - steps, steps


# A backend option that lets a probe prefill the real prompt length and feed the rest in chunks
# (hf declares it); set by probe_cell, left out of the frontier's options (it is not a setting).
PROBE_OPTION = "prefill_len"


def probe_cell(cell, batch_size: int, max_input_len: int, max_output_len: int, decode_steps: int = 4):
    """Return the probe Cell: `cell` at batch_size, replaying one full batch of worst-case requests."""
    from dataclasses import replace

    from bench.backends.registry import backend_config
    from bench.spec.narrow import with_workload

    prompt_len, new_tokens = probe_lengths(max_input_len, max_output_len, decode_steps)
    probe = with_workload(
        cell,
        name=f"oom-probe-{max_input_len}x{max_output_len}",
        source="synthetic",
        path=None,
        num_requests=batch_size,
        input_len=prompt_len,
        output_len=new_tokens,
        max_output_len=None,
        # The probe's prompt is longer than the real max_input_len (it reaches the final KV length
        # with a few decode steps), so the workload's own filter must admit it. Engines that bake
        # max_input_len into the build (trtllm) therefore build a probe engine of their own.
        max_input_len=prompt_len,
        max_total_len=max_input_len + max_output_len,
    )
    options = probe.options_dict
    if PROBE_OPTION in backend_config(cell.backend).options:
        # The backend can prefill the real prompt length at once and feed the rest in small
        # chunks: the probe then peaks where the full run does, not above it (docs/guide/oom.md).
        options[PROBE_OPTION] = max_input_len
    return replace(probe, max_batch_size=batch_size, options=tuple(sorted(options.items())))


# --- the frontier table ----------------------------------------------------------------------


def frontier_rows(records: Iterable) -> list[dict]:
    """Return one row per (backend, model, precision, options, device, lengths, cap, environment) searched:
    largest batch that fit, smallest that did not, the peak at the largest fit, flaky sizes.

    records: typed records (bench.results.query.load); only OomProbe records count. Probes of
    one configuration from several `bench oom` runs are evidence of one boundary (a re-run reuses
    stored probes) as long as they ran in the same environment; other environments get own rows.
    """
    from bench.results.records import OomProbe

    groups: dict[tuple, list] = {}
    for rec in records:
        if not isinstance(rec, OomProbe) or rec.status not in ("ok", "oom"):
            continue
        cell, target = rec.cell, rec.target
        options = {k: v for k, v in cell.get("options", {}).items() if k != PROBE_OPTION}
        key = (cell["backend"], cell["model"], cell["precision"], json.dumps(options, sort_keys=True),
               cell["device"], target["max_input_len"], target["max_output_len"], rec.gpu_memory_gb,
               rec.context.env_digest)
        groups.setdefault(key, []).append(rec)
    rows = []
    for key, recs in groups.items():
        backend, model, precision, options, device, in_len, out_len, cap, _ = key
        oks = [r for r in recs if r.status == "ok"]
        ooms = [r for r in recs if r.status == "oom"]
        ok_sizes = {r.cell["max_batch_size"] for r in oks}
        oom_sizes = {r.cell["max_batch_size"] for r in ooms}
        smallest_oom = min(oom_sizes) if oom_sizes else None
        # The frontier is what always fitted below the first failure; flaky sizes are listed.
        fit_below = [s for s in ok_sizes - oom_sizes if smallest_oom is None or s < smallest_oom]
        largest_fit = max(fit_below) if fit_below else None
        flaky = sorted((ok_sizes & oom_sizes) | {s for s in ok_sizes if smallest_oom is not None and s > smallest_oom})
        peak = None
        if largest_fit is not None:
            peaks = [r.metric("peak_memory_gb") for r in oks if r.cell["max_batch_size"] == largest_fit]
            peaks = [p for p in peaks if p is not None]
            peak = max(peaks) if peaks else None
        env = next((r.environment for r in recs if r.environment), {})
        rows.append({
            "backend": backend, "model": model, "precision": precision, "options": json.loads(options),
            "device": device, "max_input_len": in_len, "max_output_len": out_len, "gpu_memory_gb": cap,
            "largest_fit": largest_fit, "smallest_oom": smallest_oom, "peak_memory_gb_at_fit": peak,
            "probes": len(recs), "flaky_sizes": flaky, "runs": len({r.context.run_id for r in recs}),
            "environment": " ".join(str(env.get(k)) for k in ("gpu_name", "torch") if env.get(k)),
        })
    rows.sort(key=lambda r: (r["backend"], r["precision"], json.dumps(r["options"], sort_keys=True),
                             r["gpu_memory_gb"] or 0, r["max_input_len"], r["max_output_len"], r["environment"]))
    return rows


def frontier_markdown(rows: list[dict]) -> str:
    """Return the frontier as a Markdown table: backend x precision x lengths -> largest fitting batch."""
    if not rows:
        return "_no OOM probes stored_\n"
    show_env = len({r["environment"] for r in rows}) > 1
    headers = ["backend", "precision", "options", "input/output", "memory cap (GB)", "largest batch that fits",
               "smallest OOM", "peak at fit (GB)", "probes (runs)", "flaky sizes"] + (["environment"] if show_env else [])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        opts = ",".join(f"{k}={v}" for k, v in sorted(_non_default(r["backend"], r["options"]).items())) or "-"
        cells = [
            r["backend"], r["precision"], opts, f"{r['max_input_len']}/{r['max_output_len']}",
            "device" if r["gpu_memory_gb"] is None else f"{r['gpu_memory_gb']:g}",
            "none" if r["largest_fit"] is None else str(r["largest_fit"]),
            "none found" if r["smallest_oom"] is None else f"{r['smallest_oom']} (OOM)",
            "-" if r["peak_memory_gb_at_fit"] is None else f"{r['peak_memory_gb_at_fit']:.2f}",
            f"{r['probes']} ({r['runs']})", ", ".join(map(str, r["flaky_sizes"])) or "-",
        ] + ([r["environment"] or "-"] if show_env else [])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _non_default(backend: str, options: dict) -> dict:
    """Return the options that differ from the backend's defaults (all of them if it is unknown)."""
    from bench.backends.registry import backend_config

    try:
        declared = backend_config(backend).options
    except BenchInputError:  # a stored record of a backend this install does not have
        return options
    return {k: v for k, v in options.items() if k not in declared or declared[k].default != v}
