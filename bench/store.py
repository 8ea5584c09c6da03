"""Append-only JSON Lines result store: one record per cell and trial, never rewritten.

Each record is written with one write() of a complete line and fsync'd, under an exclusive
lock, so Ctrl-C or a killed process can lose at most the record being written and never
corrupts earlier ones. A torn last line (power loss, SIGKILL mid-write) is skipped when
loading and fenced off with a newline before the next append.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from bench import SCHEMA_VERSION
from bench.errors import BenchInputError

try:  # optional: parses a large store 2-3x faster than json; json decides whenever orjson refuses a line
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - depends on the environment
    _orjson_loads = None

# A stored cell with one of these statuses is a finished measurement; error/timeout are retried.
FINAL_STATUSES = ("ok", "oom", "unsupported")
STATUSES = ("ok", "oom", "error", "timeout", "unsupported")


class ResultStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict) -> None:
        """Append one record as a single line, durably."""
        if record.get("status") not in STATUSES:
            raise ValueError(f"record status must be one of {STATUSES}, got {record.get('status')!r}")
        line = (json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as fh:  # fence off a torn last line
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        os.write(fd, b"\n")
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> Iterator[dict]:
        """Yield every complete record; torn or invalid lines are skipped with one warning."""
        if not self.path.exists():
            return
        bad = 0
        with open(self.path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    rec = _loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    bad += 1
                    continue
                if not isinstance(rec, dict) or "cell_id" not in rec:
                    bad += 1
                    continue
                version = rec.get("schema_version")
                if not isinstance(version, int) or version > SCHEMA_VERSION:
                    raise BenchInputError(
                        f"{self.path}:{lineno} has result schema version {version!r}, newer than this harness's "
                        f"{SCHEMA_VERSION}: upgrade bench to read it"
                    )
                yield rec
        if bad:
            warnings.warn(f"{self.path}: skipped {bad} torn or invalid line(s)", stacklevel=2)

    def finished(self) -> set[tuple[str, int]]:
        """Return {(cell_id, trial)} already measured (status ok, oom or unsupported)."""
        return {(r["cell_id"], r.get("trial", 0)) for r in self.records() if r.get("status") in FINAL_STATUSES}


def _loads(raw: bytes):
    """Return the JSON value of one line, exactly as json.loads would (raises what json.loads raises)."""
    if _orjson_loads is not None:
        try:
            return _orjson_loads(raw)
        except ValueError:
            pass  # orjson is stricter (NaN, integers beyond 64 bits, lone surrogates): json.loads decides
    return json.loads(raw)


def load_records(paths: Iterable[str | Path]) -> list[dict]:
    """Return all records of the given stores, each tagged with the store it came from."""
    out = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise BenchInputError(f"result store {str(p)!r} does not exist")
        for rec in ResultStore(p).records():
            rec["store"] = p.stem
            out.append(rec)
    return out

