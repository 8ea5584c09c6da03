"""A store's JSON lines, read: the one reader of stored records, plain (`.jsonl`) or gzip-compressed (`.jsonl.gz`).

Every reader of a store's lines goes through `read_lines`: ResultStore.records, bench.results.query's
load and load_cells, and the columnar companion (bench.results.columnar parses new lines through it;
bench.results.table reads single stored lines back through it). So a torn or invalid line is skipped,
a line of a newer schema refused and a file of another program refused, the same way everywhere.

A compressed store (gzip's magic bytes, whatever its name) is read as it is, decompressed as it is
read. It is read only: nothing appends to it (`refuse_compressed`), and no columnar companion is
built for it (offsets into its bytes would mean nothing); bench.results.query reads it as typed records.
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bench import SCHEMA_VERSION
from bench.errors import BenchInputError

try:  # optional: parses a large store 2-3x faster than json; json decides whenever orjson refuses a line
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - depends on the environment
    _orjson_loads = None

GZIP_MAGIC = b"\x1f\x8b"


class StoredLine(NamedTuple):
    """One record line of a store, where it is and what it holds."""

    offset: int   # where the line starts in the store's bytes (the decompressed bytes of a .gz store)
    nbytes: int   # its length, the newline included
    number: int   # its line number, from 1 (blank and skipped lines counted)
    record: dict  # the line's JSON object: a result record of schema_version <= SCHEMA_VERSION


@dataclass
class LineCounts:
    """What a read went through: lines (blank ones included), records yielded, torn or invalid lines skipped."""

    lines: int = 0
    records: int = 0
    bad: int = 0


def is_compressed(path: str | Path) -> bool:
    """Return True for a gzip-compressed store: a name ending in .gz, or gzip's magic bytes at its start."""
    p = Path(path)
    if p.name.endswith(".gz"):
        return True
    try:
        with open(p, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


def store_name(path: str | Path) -> str:
    """Return a store's name as its records carry it (`record.store`): the file name less .jsonl(.gz)."""
    return Path(Path(path).name.removesuffix(".gz")).stem


def search_report_dir(store: str | Path, matrix_name: str, kind: str) -> Path:
    """Return the default folder of a search's table (`bench oom`: kind "oom", `bench capacity`: "capacity").

    The matrix's own store (results/<matrix>-<kind>.jsonl) writes into dashboards/<matrix>, beside its run's report;
    any other store into dashboards/<store name>, so a second store never overwrites the first one's table (the rule
    `bench run` follows for its tables)."""
    if Path(store) == Path(f"results/{matrix_name}-{kind}.jsonl"):
        return Path("dashboards") / matrix_name
    return Path("dashboards") / store_name(store)


def refuse_compressed(path: str | Path) -> None:
    """Raise BenchInputError when a store to append to is compressed: it is read as it is, never written."""
    if is_compressed(path):
        p = Path(path)
        plain = p.with_name(p.name[:-3]) if p.name.endswith(".gz") else p.with_suffix(".jsonl")
        raise BenchInputError(
            f"result store {str(p)!r} is gzip-compressed: bench reads it as it is but never appends to it. Write "
            f"this run to another store with --store (e.g. {str(plain)!r}), or decompress it first (`gunzip -k {p}`) "
            "and write to the .jsonl")


def read_lines(path: str | Path, start: int = 0, end: int | None = None, *, fh=None, first_line: int = 1,
               counts: LineCounts | None = None) -> Iterator[StoredLine]:
    """Yield the store's record lines in [start, end) (bytes; end None: to the end), in file order.

    Blank lines are passed over; torn or invalid lines (not JSON, not an object with a cell_id, or fields of the
    wrong type: `is_record`) are skipped and counted; a line of a newer schema than this harness writes raises BenchInputError
    (`path:line`). fh: the store opened in binary mode, read from `start` on wherever it stood (when
    None, the store is opened here, a .gz store decompressing); first_line: the number of the line at `start`.

    counts: where to tally what was read, the caller then judging it (the columnar companion sums
    its parts'). Without it the read judges itself once done: no record among lines that are not
    blank -> BenchInputError (not a bench store); skipped lines -> one warning naming how many.
    """
    if fh is None:
        with (gzip.open(path, "rb") if is_compressed(path) else open(path, "rb")) as opened:
            yield from read_lines(path, start, end, fh=opened, first_line=first_line, counts=counts)
        return
    tally = LineCounts() if counts is None else counts
    fh.seek(start)
    offset, number = start, first_line - 1
    try:
        for raw in (fh if end is None else _until(fh, start, end)):
            nbytes = len(raw)
            line_offset = offset
            offset += nbytes
            number += 1
            tally.lines += 1
            if not raw.strip():
                continue
            try:
                rec = loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                tally.bad += 1
                continue
            if not is_record(rec):
                tally.bad += 1
                continue
            version = rec.get("schema_version")
            if not isinstance(version, int) or version > SCHEMA_VERSION:
                raise BenchInputError(
                    f"{path}:{number} has result schema version {version!r}, newer than this harness's "
                    f"{SCHEMA_VERSION}: upgrade bench to read it"
                )
            tally.records += 1
            yield StoredLine(line_offset, nbytes, number, rec)
    except (EOFError, gzip.BadGzipFile) as exc:  # a compressed store cut short, or not gzip after all
        raise BenchInputError(f"result store {str(path)!r} cannot be decompressed ({exc}): a .gz store must be "
                              "a complete gzip file (`gzip -t` checks one)") from exc
    if counts is None:
        judge(path, tally, stacklevel=3)


def judge(path, tally: LineCounts, stacklevel: int = 2) -> None:
    """Judge a whole read of a store's lines: no record among lines that are not blank -> BenchInputError (not a
    bench store); skipped lines -> one warning naming how many. Every reader of a whole store judges so."""
    if tally.bad and not tally.records:
        raise BenchInputError(
            f"{path} is not a bench result store: none of its {tally.bad} line(s) is a result record (binary data, "
            "another program's JSON, or lines without a cell_id); give the .jsonl file `bench run --store` wrote"
        )
    if tally.bad:
        warnings.warn(f"{path}: skipped {tally.bad} torn or invalid line(s)", stacklevel=stacklevel + 1)


_NUMBER = (int, float)
# The types of a record's fields, as the harness writes them (None or absent: always allowed). A line whose object
# holds another type (a list where a status goes, text where the context goes) is not a record this harness wrote:
# it is skipped as invalid, as a line that is not JSON is. Nested: the fields the typed record and its report row read.
_FIELDS = {"cell_id": str, "kind": str, "status": str, "context": dict, "cell": dict, "metrics": dict, "extra": dict,
           "environment": dict, "workload": dict, "build": dict, "samples": list, "run": int, "trial": int, "error": str,
           "started_at": _NUMBER, "ended_at": _NUMBER, "settings": dict}
_NESTED = {
    "context": {"run_id": str, "command": str, "matrix": str, "baseline": dict, "commit": str, "dirty": bool,
                "env_digest": str, "gpu_memory_gb": _NUMBER, "workload_hash": str, "runs": int, "trials": int,
                "warmup": int, "tuning_builds": int, "started_at": _NUMBER},
    "cell": {"workload": dict, "options": dict},
    "extra": {"inductor": dict, "tuned": dict, "host_load": dict, "kernels": dict, "notes": list, "telemetry": (dict, list)},
    "settings": {"gpu_memory_gb": _NUMBER, "trials": int, "warmup": int},
}


def is_record(rec) -> bool:
    """Return True for a JSON value shaped as a result record: an object with a `cell_id`, each known field of its
    type (_FIELDS, _NESTED), samples and telemetry samples objects."""
    if not isinstance(rec, dict) or not isinstance(rec.get("cell_id"), str):
        return False
    if not _typed(rec, _FIELDS):
        return False
    for key, kinds in _NESTED.items():
        inner = rec.get(key)
        if inner is not None and not _typed(inner, kinds):
            return False
    extra = rec.get("extra") or {}
    if not isinstance((extra.get("inductor") or {}).get("tuned") or {}, dict):  # the tuned-kernel digest's place
        return False
    if not isinstance((extra.get("host_load") or {}).get("busy") or [], list):
        return False
    if not isinstance((extra.get("kernels") or {}).get("made_on") or {}, dict):
        return False
    telemetry = extra.get("telemetry")
    if isinstance(telemetry, list) and not all(isinstance(t, dict) for t in telemetry):
        return False
    return all(isinstance(s, dict) for s in rec.get("samples") or ())


def _typed(obj: dict, kinds: dict) -> bool:
    for key, kind in kinds.items():
        v = obj.get(key)
        if v is not None and (not isinstance(v, kind) or (isinstance(v, bool) and kind in (int, _NUMBER))):
            return False
    return True


def _until(fh, offset: int, end: int) -> Iterator[bytes]:
    """Yield the lines of fh from `offset` up to byte `end` (a line crossing `end` is cut there)."""
    while offset < end:
        raw = fh.readline(end - offset)
        if not raw:
            return
        offset += len(raw)
        yield raw


def loads(raw: bytes):
    """Return the JSON value of one line, exactly as json.loads would (raises what json.loads raises)."""
    if _orjson_loads is not None:
        try:
            return _orjson_loads(raw)
        except ValueError:
            pass  # orjson is stricter (NaN, integers beyond 64 bits, lone surrogates): json.loads decides
    return json.loads(raw)
