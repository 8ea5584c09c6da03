"""The report's failures section: the accuracy, profile and capacity records that failed, each with the first
line of its error.

A speed cell that failed is a row of the speedup table with its status (bench.report.tables). The
other kinds make tables that draw from ok records only (a verdict, a kernel table, a capacity
answer), so without this section a failed `bench accuracy` or `bench profile` record would leave
the report without a word. A failure is listed when it belongs to the latest run context of its
cell (and tool, for profiles): a failure that a later invocation measured again is history.
"""

from __future__ import annotations

from bench.machine.failures import first_line
from bench.results.records import Accuracy, CapacityProbe, Profile

HEADING = "Failures (bench accuracy, profile, capacity)"
_COMMAND = {Accuracy: "accuracy", Profile: "profile", CapacityProbe: "capacity probe"}


def latest_failures(records) -> list:
    """Return the failed accuracy, profile and capacity-probe records of each cell's (and tool's) latest run context,
    in store order."""
    chosen = [r for r in records if type(r) in _COMMAND]
    latest: dict[tuple, tuple] = {}
    for r in chosen:
        key, when = _key(r), (r.context.started_at or 0.0, r.context.run_id)
        if key not in latest or when > latest[key]:
            latest[key] = when
    return [r for r in chosen if not r.ok and (r.context.started_at or 0.0, r.context.run_id) == latest[_key(r)]]


def _key(r) -> tuple:
    return (type(r).__name__, r.cell_id, r.tool if isinstance(r, Profile) else None)


def failures_markdown(records) -> str:
    """Return the failures section's Markdown table (one row per failed cell, tool and run; its records counted and the
    first line of the first one's error), or "" when nothing failed."""
    rows: dict[tuple, list] = {}
    for r in latest_failures(records):
        rows.setdefault((_key(r), r.context.run_id, r.status), []).append(r)
    if not rows:
        return ""
    lines = ["| record | cell | run | status | records | first line of the error |", "|---|---|---|---|---|---|"]
    for (_, run_id, status), recs in rows.items():
        r = recs[0]
        what = _COMMAND[type(r)] + (f" ({r.tool})" if isinstance(r, Profile) and r.tool else "")
        cell = r.label + (_target(r) if isinstance(r, CapacityProbe) else "")
        cells = [what, cell, run_id, status.upper(), str(len(recs)), first_line(r.error) or "(no error text stored)"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return ("\n".join(lines) + "\n\nEach record holds the whole error text (`error`) and, for a session, the log it "
            "names; a later run of the same cell that ends ok takes its place here.\n")


def _target(r) -> str:
    """Return ' at max_concurrency 8' for a capacity probe: the load it probed."""
    target = r.target if isinstance(r.target, dict) else {}
    return f" at {target['axis']} {target['value']}" if target.get("axis") and target.get("value") is not None else ""
