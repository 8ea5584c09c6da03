"""Append-only JSON Lines result store: one line per typed record, never rewritten.

Each record is written as one complete line (short writes continued) and fsync'd, under an
exclusive lock, so Ctrl-C or a killed process can lose at most the record being written and
never corrupts earlier ones. A write that fails (disk full, I/O error) is cut back to the size
before it and raises StoreWriteError naming the record: no fragment counts as stored. A torn
last line (power loss, SIGKILL mid-write) is skipped when loading and fenced off with a newline
before the next append. One invocation writes a store
at a time (`ResultStore.writer`): a second `bench run` on the same store is refused. When it
ends, a store large enough to be read as columns has its columnar companion brought up to date
(this invocation's new lines parsed), so its next report starts warm. A gzip-compressed store
(`.jsonl.gz`) is read as it is and never written (bench.results.jsonl.refuse_compressed).

The writer sits above the read model: its lines are read by bench.results.jsonl.read_lines (the
one reader; `records()` yields what it reads), and the companion it keeps current is reached
through bench.results.query and bench.results.columnar, neither of which imports this module.
Readers go through bench.results.query, which types what `read_lines` yields.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from bench.errors import BenchInputError, StoreWriteError
from bench.results.jsonl import read_lines, refuse_compressed


class ResultStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record) -> None:
        """Append one typed record (bench.results.records.Record) as a single line, durably."""
        from bench.results.records import Record

        if not isinstance(record, Record):
            raise TypeError(f"append takes a bench.results.records.Record (made by new_record), got {type(record).__name__}")
        refuse_compressed(self.path)
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
        """Yield every complete record (bench.results.jsonl.read_lines: torn or invalid lines skipped with one warning)."""
        if not self.path.exists():
            return
        for line in read_lines(self.path):
            yield line.record

    @contextlib.contextmanager
    def writer(self):
        """Hold the store for one invocation; BenchInputError if another process holds it.

        The lock is a `<store>.lock` file beside it (flock: released when the holder dies, so a
        killed run never leaves the store locked).
        """
        if self.path.is_dir():
            raise BenchInputError(f"result store {str(self.path)!r} is a folder: give a .jsonl file with --store")
        refuse_compressed(self.path)
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

