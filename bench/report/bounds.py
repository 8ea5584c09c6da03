"""Figures against their own bound: `% SOL` above 100 is impossible, and the reports say so.

The speed-of-light bound (bench/backends/speed_of_light.py) is the least time the bytes a decode
needs take at the measured copy bandwidth. A measured figure above 100 % of it is faster than
physics allows: a timing bug (an unsynchronised clock, a pass that did less work) or an
accounting bug (bytes counted that were not read, a wrong bandwidth). Published benchmark pages
show such figures; here they are flagged where they are shown, never printed plain: the speedup
table's `% SOL` cell and a warning under it, the kernel section's per-step bound.

Pure functions: rows and records in, text out.
"""

from __future__ import annotations

import math

from bench.errors import BenchInputError

IMPOSSIBLE_PCT = 100.0
FLAG = "✗ impossible"


def is_impossible(pct) -> bool:
    """Return True for a % SOL above 100 (a number; None and NaN are not)."""
    try:
        value = float(pct)
    except (TypeError, ValueError):
        return False
    return not math.isnan(value) and value > IMPOSSIBLE_PCT


def sol_text(pct, fmt: str = "{:.0f}") -> str:
    """Return a `% SOL` cell: the figure, with FLAG after it when it is above 100; "" when there is none."""
    try:
        value = float(pct)
    except (TypeError, ValueError):
        return ""
    if math.isnan(value):
        return ""
    return fmt.format(value) + (f" {FLAG}" if is_impossible(value) else "")


def impossible_warning(pct) -> str | None:
    """Return the warning a row with this % SOL gets under its table, or None when it is within its bound."""
    if not is_impossible(pct):
        return None
    return (f"% SOL {float(pct):.0f} is above 100 %: faster than its own speed-of-light bound "
            "(bench/backends/speed_of_light.py), which is impossible; a timing or accounting bug, not a result")


def step_bound_markdown(records: list) -> str:
    """Return the kernel section's lines on each profiled step against its bound ("" when no record has one).

    records: Profile records, one per cell and tool (bench.report.kernel_panel.latest_per_cell). Per record: the
    bytes a decode step must read, their time at the copy bandwidth, the unprofiled step time (`step_ms`:
    harness-loop and uncompiled generate windows) or ncu's kernel time, and the % SOL, flagged when impossible.
    """
    lines = []
    for rec in records:
        prof = rec.profile
        bound = prof.get("step_bound") or {}
        bound_us = bound.get("time_us")
        if not bound_us:
            continue
        roofline = prof.get("roofline_total") or {}
        try:
            step_ms = rec.step_ms
        except BenchInputError:  # the kernel panel leaves the record out and says why
            continue
        if step_ms:
            measured_us, what = step_ms * 1e3, "the unprofiled decode step"
        elif roofline.get("duration_us"):
            measured_us, what = roofline["duration_us"], "ncu's kernel time of the step"
        else:
            continue
        pct = 100.0 * bound_us / measured_us
        cell = rec.cell
        label = f"{cell.get('backend')}/{cell.get('precision')}/bs{cell.get('max_batch_size')} ({rec.tool})"
        lines.append(f"| {label} | {bound.get('bytes', 0) / 1e6:.1f} | {bound_us:.1f} | {measured_us:.1f} ({what}) | "
                     f"{sol_text(pct)} |")
    if not lines:
        return ""
    flagged = any(FLAG in line for line in lines)
    return ("\nEach step against its speed of light (the bytes a decode step must read: weights read whole, one "
            "embedding row per sequence, the KV cache at the step's context lengths; bench/backends/speed_of_light.py):\n\n"
            "| cell | MB a step must read | µs at the copy bandwidth | µs measured | % SOL |\n|---|---|---|---|---|\n"
            + "\n".join(lines) + "\n"
            + ("\n⚠ A step above 100 % of its bound is impossible: a timing or accounting bug, not a result.\n"
               if flagged else ""))
