"""Files: the one helper every writer uses, so a reader never sees half a file, and the one reading of a path the
user names (`user_path`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def user_path(path: str | Path, what: str = "path") -> Path:
    """Return a path the user named with a leading ~ or ~name expanded; BenchInputError naming it where that home is
    not known (`~0`, a user this machine does not have: pathlib raises RuntimeError, which a command would otherwise
    show as a traceback)."""
    try:
        return Path(path).expanduser()
    except RuntimeError as exc:
        from bench.errors import BenchInputError

        raise BenchInputError(f"{what} {str(path)!r}: {str(exc).rstrip('.')}: a leading '~name' means that user's home "
                              f"directory; give the path without it (e.g. './{path}')") from None


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Return `path` after replacing its content with `text` (UTF-8; bytes as they are) in one step.

    The text goes to a temporary file beside it (this process's own name, so two writers do not
    share one), then os.replace: an interrupted write leaves the old file or none, never a torn one.
    A file-system error (read-only folder, full disk, a name too long, a folder in the way)
    becomes a BenchInputError that names the path and the fix.
    """
    from bench.errors import BenchInputError

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise BenchInputError(f"cannot write {str(path)!r}: " + describe_os_error(exc, exc.filename or path)) from exc
        raise
    return path


# Free space an output folder must have before a command starts writing into it: a few records and
# tables (a stored record is ~4 KB, a dashboard a few MB).
MIN_FREE_BYTES = 16 * 1024 * 1024


def describe_os_error(exc: OSError, path: str | Path | None = None, flag: str = "") -> str:
    """Return a file-system error as one sentence: which path, what is wrong, and how to fix it."""
    import errno

    where = str(path if path is not None else exc.filename or "the file")
    other = f" (choose another with {flag})" if flag else ""
    fixes = {
        errno.EROFS: f"{where!r} is on a read-only file system: write to a writable folder{other}",
        errno.EACCES: f"{where!r} is not writable (permissions): fix them, or write elsewhere{other}",
        errno.EPERM: f"{where!r} is not writable (permissions): fix them, or write elsewhere{other}",
        errno.ENOSPC: f"no space left on the device holding {where!r}: free some space, or write elsewhere{other}",
        errno.EDQUOT: f"disk quota exceeded writing {where!r}: free some space, or write elsewhere{other}",
        errno.ENAMETOOLONG: f"a name in {where!r} is longer than the file system allows: use a shorter name{other}",
        errno.ENOTDIR: f"a part of {where!r} is a file, not a folder: give a folder path{other}",
        errno.EEXIST: f"{where!r} exists and is not a folder: give a folder path{other}",
        errno.EISDIR: f"{where!r} is a folder: give a file name{other}",
        errno.EIO: f"I/O error on {where!r}: the device failed (see dmesg); write elsewhere{other}",
        errno.ENOENT: f"{where!r} does not exist (or a folder on its path does not): check the path{other}",
    }
    return fixes.get(exc.errno, f"{where!r}: {exc.strerror or exc}{other}")


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_name_length(path: Path, flag: str = "") -> None:
    """Raise BenchInputError if a name on the path is longer than the file system allows (stat() would fail)."""
    from bench.errors import BenchInputError

    base = _nearest_existing(path.parent if path.parent != path else path)
    try:
        limit = os.pathconf(base if base.is_dir() else base.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise BenchInputError(f"{flag or 'path'} {str(path)!r}: the name {part[:40]!r}... is {len(os.fsencode(part))} "
                                  f"bytes, longer than the file system's limit of {limit}: use a shorter name")


def check_output_dir(path: str | Path, flag: str = "") -> Path:
    """Return `path` if a command can write files into it (made if missing); BenchInputError saying what to fix.

    Checked before expensive work: not an existing file, names within the file system's limit,
    the nearest existing folder writable, and at least MIN_FREE_BYTES free there.
    """
    from bench.errors import BenchInputError

    path = Path(path)
    name = f"{flag} {str(path)!r}" if flag else repr(str(path))
    check_name_length(path, flag)  # first: stat() of an over-long name fails
    if path.exists() and not path.is_dir():
        raise BenchInputError(f"{name} is an existing file, not a folder: give a folder (it is made if missing)")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise BenchInputError(f"{name}: {str(base)!r} is a file, not a folder: give a folder path")
    if not os.access(base, os.W_OK | os.X_OK):
        what = "is on a read-only file system" if _read_only(base) else "is not writable (permissions)"
        raise BenchInputError(f"{name}: {str(base)!r} {what}: write to a writable folder"
                              + (f" with {flag}" if flag else ""))
    _check_free(base, name, flag)
    return path


def check_output_file(path: str | Path, flag: str = "") -> Path:
    """Return `path` if a command can write (or append to) this file; BenchInputError saying what to fix."""
    from bench.errors import BenchInputError

    path = Path(path)
    name = f"{flag} {str(path)!r}" if flag else repr(str(path))
    check_name_length(path, flag)  # first: stat() of an over-long name fails
    if path.is_dir():
        raise BenchInputError(f"{name} is a folder: give a file name")
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise BenchInputError(f"{name}: {str(base)!r} is a file, not a folder: give a path inside a folder")
    if path.exists() and not os.access(path, os.W_OK):
        what = "is on a read-only file system" if _read_only(path) else "is not writable (permissions)"
        raise BenchInputError(f"{name} {what}: fix it, or write elsewhere" + (f" with {flag}" if flag else ""))
    check_output_dir(path.parent, flag)
    return path


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _check_free(base: Path, name: str, flag: str) -> None:
    import shutil

    from bench.errors import BenchInputError

    try:
        free = shutil.disk_usage(base).free
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise BenchInputError(f"{name}: only {free // 1024} KiB free on the device holding {str(base)!r} (at least "
                              f"{MIN_FREE_BYTES // 2**20} MiB needed): free some space, or write elsewhere"
                              + (f" with {flag}" if flag else ""))


def file_sha256(path: str | Path) -> str:
    """Return the hex SHA-256 of a file's bytes, read a MiB at a time."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
