"""Append-only JSON Lines result store: one line per typed record, never rewritten.

Each record is written as one complete line (short writes continued) and fsync'd, under an
exclusive lock, so Ctrl-C or a killed process can lose at most the record being written and
never corrupts earlier ones. A write that fails (disk full, I/O error) is cut back to the size
before it and raises StoreWriteError naming the record: no fragment counts as stored. A torn
last line (power loss, SIGKILL mid-write) is skipped when loading and fenced off with a newline
before the next append. One invocation writes a store
at a time (`ResultStore.writer`): a second `bench run` on the same store is refused. When it
ends, a store large enough to be read as columns has its columnar companion brought up to date
(bench.results.columnar: this invocation's new lines parsed), so its next report starts warm.
Readers go through bench.results.query, which types what `records()` yields.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from bench import SCHEMA_VERSION
from bench.errors import BenchInputError, StoreWriteError

try:  # optional: parses a large store 2-3x faster than json; json decides whenever orjson refuses a line
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - depends on the environment
    _orjson_loads = None


class ResultStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record) -> None:
        """Append one typed record (bench.results.records.Record) as a single line, durably."""
        from bench.results.records import Record

        if not isinstance(record, Record):
            raise TypeError(f"append takes a bench.results.records.Record (made by new_record), got {type(record).__name__}")
        line = (json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreWriteError(self._not_stored(record, exc)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as fh:  # fence off a torn last line
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        line = b"\n" + line
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except OSError as exc:
                # Leave no fragment that a reader would skip (or count): back to the size before this record.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                raise StoreWriteError(self._not_stored(record, exc)) from exc
        finally:
            os.close(fd)

    def _not_stored(self, record, exc: OSError) -> str:
        """Return the message of a record that could not be stored: which, where, why, and what stays."""
        from bench.files import describe_os_error

        return (f"{record.label} (trial {record.trial}, {record.status}) was NOT stored in {str(self.path)!r}: "
                f"{describe_os_error(exc, self.path)}. The run stopped here; every record stored before it stays, "
                "and re-running the same command resumes after them")

    def records(self) -> Iterator[dict]:
        """Yield every complete record; torn or invalid lines are skipped with one warning."""
        if not self.path.exists():
            return
        bad = good = 0
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
                good += 1
                yield rec
        if bad and not good:
            raise BenchInputError(
                f"{self.path} is not a bench result store: none of its {bad} line(s) is a result record (binary data, "
                "another program's JSON, or lines without a cell_id); give the .jsonl file `bench run --store` wrote"
            )
        if bad:
            warnings.warn(f"{self.path}: skipped {bad} torn or invalid line(s)", stacklevel=2)

    @contextlib.contextmanager
    def writer(self):
        """Hold the store for one invocation; BenchInputError if another process holds it.

        The lock is a `<store>.lock` file beside it (flock: released when the holder dies, so a
        killed run never leaves the store locked).
        """
        from bench.errors import BenchInputError

        if self.path.is_dir():
            raise BenchInputError(f"result store {str(self.path)!r} is a folder: give a .jsonl file with --store")
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            from bench.files import describe_os_error

            raise BenchInputError(f"cannot write result store {str(self.path)!r}: "
                                  + describe_os_error(exc, exc.filename or lock_path, "--store")) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                raise BenchInputError(
                    f"result store {str(self.path)!r} is being written by {holder}: wait for it to finish, "
                    "or write this run to another store with --store"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"bench process {os.getpid()}".encode(), 0)
            yield self
            self._update_columns()  # reached only when the invocation ended without an exception
        finally:
            os.close(fd)  # releases the lock

    def _update_columns(self) -> None:
        """Bring the columnar companion of a store that readers read as columns (bench.results.query.prefer_table)
        up to date: only this invocation's new lines are parsed, so the next report of the store starts warm.

        The JSON lines are already durable; the companion is a cache that readers check and extend or rebuild
        themselves, so a failure here warns and never fails the invocation.
        """
        from bench.results import columnar, query

        if not self.path.exists() or not query.prefer_table([self.path]):
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torn lines: the readers say so
                columnar.open_store(self.path)
        except (OSError, BenchInputError, ValueError) as exc:
            warnings.warn(f"{self.path}: its columnar companion was not brought up to date ({exc}); the next report "
                          "of the store builds it", stacklevel=3)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to fd, going on after short writes; OSError(ENOSPC) if the device takes no more."""
    import errno

    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, "no space left on device (a write stored 0 bytes)")
        view = view[n:]


def _loads(raw: bytes):
    """Return the JSON value of one line, exactly as json.loads would (raises what json.loads raises)."""
    if _orjson_loads is not None:
        try:
            return _orjson_loads(raw)
        except ValueError:
            pass  # orjson is stricter (NaN, integers beyond 64 bits, lone surrogates): json.loads decides
    return json.loads(raw)


