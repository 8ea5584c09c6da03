"""One record, one count: the key that names a stored record, and what a reader does when a key repeats.

A store is append-only and the harness writes each (run, trial) of a cell once, so two lines holding the
same key are one record read twice: a store given twice, two stores that hold the same records (a copy, a
merge), a line appended twice. Both readers (bench.results.query.load, and bench.results.table over the
columnar companion) count such a record once, keep the first (stores in the order given, lines in file
order), and say so in one warning naming each repeat's store and line. A repeat whose figures differ from
the first's (status, error or a metric: the numeric columns of its report row, bench.results.rows.record_row)
is a *conflicting duplicate*: the first is kept all the same, and the warning says they differ.

The key (`record_key`): kind, run id, cell id, memory cap, run (worker process), trial, and the host the
worker ran on (bench.results.rows.record_host); for the kinds other than measurements (probes, profiles,
accuracy), which may repeat a (cell, trial) inside one invocation, also the pass's start and end times.

A store named twice (the same file: device and inode, whatever the path) is read once (`distinct_stores`).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from bench.results.records import Record
from bench.results.rows import ROW_FIELDS, record_host

SHOWN = 5  # repeats named in the warning (the rest counted)


def record_key(rec: Record) -> int:
    """Return the record's key as a signed 64-bit integer (a digest of its identifying fields; see the module)."""
    ctx = rec.context
    parts = [rec.kind, ctx.run_id, rec.cell_id, ctx.gpu_memory_gb, rec.run, rec.trial, record_host(rec)]
    if rec.kind != "measurement":
        parts += [rec.started_at, rec.ended_at]
    text = json.dumps(parts, default=str, sort_keys=True)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def figures(row: dict) -> dict:
    """Return what a repeat must share with the first to be a plain one: status, error and every numeric metric of
    a report row (record_row's columns less its fields), missing values left out."""
    out = {k: _plain(v) for k, v in row.items() if k not in ROW_FIELDS and _present(v)}
    out.update(status=row.get("status"), error=row.get("error") if _present(row.get("error")) else None)
    return out


def _present(v) -> bool:
    return v is not None and v == v  # NaN: missing (a column another record lacks)


def _plain(v):
    """Return a numpy scalar as Python's (a column read back), anything else as it is."""
    return v.item() if hasattr(v, "item") and not isinstance(v, (list, dict, str)) else v


def _show(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else repr(v)


class Repeat(NamedTuple):
    """A record whose key an earlier record holds: not counted."""

    store: str          # where the repeat is
    line: int
    first_store: str    # where the record counted is
    first_line: int
    run_id: str
    cell_id: str
    run: int
    trial: int
    differs: tuple[str, ...]  # conflicting: the figures that differ, as 'name: this vs first'; () for a plain repeat


def differences(repeat: dict, first: dict) -> tuple[str, ...]:
    """Return the figures (figures()) in which a repeat differs from the record counted, as 'name this vs first'."""
    a, b = figures(repeat), figures(first)
    return tuple(f"{k} {_show(a.get(k))} vs {_show(b.get(k))}" for k in sorted(set(a) | set(b), key=str)
                 if a.get(k) != b.get(k))


def repeats_warning(repeats: list[Repeat]) -> str | None:
    """Return the one warning of a read's repeated records (None without any): how many, conflicting ones first."""
    if not repeats:
        return None
    conflicting = [r for r in repeats if r.differs]
    shown = (conflicting + [r for r in repeats if not r.differs])[:SHOWN]
    items = [_describe(r) for r in shown]
    if len(repeats) > len(shown):
        items.append(f"and {len(repeats) - len(shown)} more")
    if len(repeats) == 1:
        return items[0]
    head = f"{len(repeats)} stored records repeat the key of an earlier record (run, cell, run index, trial, host)"
    if conflicting:
        head += f", {len(conflicting)} of them conflicting duplicates (figures differ)"
    return head + "; each is counted once, the first kept: " + "; ".join(items)


def _describe(r: Repeat) -> str:
    where = f"line {r.first_line}" if r.first_store == r.store else f"store {r.first_store} line {r.first_line}"
    what = f"store {r.store} line {r.line} repeats the record of {where} (run {r.run_id}, cell {r.cell_id}, run {r.run}, trial {r.trial})"
    if r.differs:
        shown = ", ".join(r.differs[:3]) + (f", and {len(r.differs) - 3} more" if len(r.differs) > 3 else "")
        return f"{what}: a conflicting duplicate (its figures differ: {shown}); the first is counted, this one is not"
    return f"{what}: counted once"


def distinct_stores(paths: Iterable[Path]) -> list[Path]:
    """Return the stores less those named again (the same file, by device and inode; else by resolved path),
    warning once about them: a store given twice is read once."""
    out, seen, again = [], {}, []
    for p in paths:
        try:
            st = os.stat(p)
            ident = (st.st_dev, st.st_ino)
        except OSError:
            ident = str(Path(p).resolve())
        if ident in seen:
            again.append((p, seen[ident]))
            continue
        seen[ident] = p
        out.append(p)
    if again:
        warnings.warn("; ".join(f"store {p} was given twice" + ("" if str(p) == str(q) else f" (as {q})")
                                for p, q in again) + ": read once", stacklevel=3)
    return out
