"""Files a record names: opened only under a store's folder, and only when they are of the kind expected.

A record is data, not a path to anywhere. A profile record's `kernel_table`, `roofline_md`, `sqlite`
and `trace` name files, and a store carried from another machine (or crafted) can name any path:
`/etc/hostname`, `../../../home/u/.ssh/id_rsa`. The report embeds what it reads in report.md and
dashboard.html, files people publish. So `record_file` is the one way a report opens such a file:

- only under the folder of a store the report reads (run stores and profile stores): a relative
  name joined to that folder, an absolute name that lies under it, or, for a store copied from
  the machine that profiled it, the name's last three parts (<matrix>/<cell>-<tool>/<file>) under
  it. An absolute name elsewhere (/etc/hostname) is not opened; a name with `..` or a NUL is
  refused; a link that leads out of the folder is refused;
- only a regular file of its kind (KINDS): its suffix, at most its size, and what it must hold
  (a roofline: UTF-8 text; an nsys export: an SQLite database; a kernel table is then parsed as a
  KernelTable by its reader, bench.execution.kernels).
A file refused or missing is left out with a warning that the report shows (report.md's "Files the
records name" section, the dashboard, the console), naming the record, the name and the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Kind:
    what: str  # how a warning names it
    suffixes: tuple[str, ...]
    max_bytes: int
    header: bytes = b""  # what the file must start with
    text: bool = False  # UTF-8 text without NUL


KINDS = {
    "kernel_table": Kind("kernel table", (".json",), 64 << 20),
    "roofline_md": Kind("ncu roofline", (".md",), 1 << 20, text=True),
    "sqlite": Kind("nsys export", (".sqlite",), 16 << 30, header=b"SQLite format 3\x00"),
    "trace": Kind("profiler trace", (".nsys-rep", ".qdrep", ".ncu-rep", ".json", ".json.gz", ".csv", ".csv.gz"),
                  16 << 30),
}
TAIL_PARTS = 3  # <matrix>/<cell>-<tool>/<file>: where `bench profile` puts a file under its store's folder


class RecordFileRefused(ValueError):
    """A file a record names that is not read (the message says why, as a phrase after the file's name)."""


def record_file(name, kind: str, base_dirs) -> Path:
    """Return the file a record names, found under one of base_dirs and of its kind; RecordFileRefused saying why not."""
    spec = KINDS[kind]
    if not isinstance(name, str) or not name:
        raise RecordFileRefused(f"is not a file name ({name!r})")
    if "\x00" in name:
        raise RecordFileRefused("holds a NUL byte: refused")
    given = Path(name)
    if ".." in given.parts:
        raise RecordFileRefused("climbs out of its store's folder (..): refused; a record's files are read only under "
                                "the folders of the stores the report reads")
    bases = [Path(b) for b in base_dirs]
    relative = [p for p in given.parts if p != given.anchor]
    # An absolute name is opened only where it lies under a store's folder (`bench profile --out /abs/profiles`).
    candidates = [given] if given.is_absolute() else [b / given for b in bases]
    if len(relative) >= TAIL_PARTS or given.is_absolute():
        candidates += [b / Path(*relative[-TAIL_PARTS:]) for b in bases if relative]
    for base, candidate in ((b, c) for c in candidates for b in bases if _lexically_under(c, b)):
        if not os.path.lexists(candidate):
            continue
        if not candidate.resolve().is_relative_to(base.resolve()):
            raise RecordFileRefused(f"leads outside its store's folder {str(base)!r} (a link): refused")
        _check_kind(candidate, spec)
        return candidate
    if given.is_absolute() and not any(_lexically_under(given, b) for b in bases):
        raise RecordFileRefused(f"is an absolute path outside the stores' folders ({', '.join(map(str, bases))}): "
                                "refused; a record's files are read only under the folders of the stores the report "
                                "reads")
    raise RecordFileRefused("is missing")


def read_text(path: Path, kind: str) -> str:
    """Return a text file found by record_file (its kind's size bound and encoding checked again as it is read)."""
    spec = KINDS[kind]
    with open(path, "rb") as fh:
        data = fh.read(spec.max_bytes + 1)
    return _text(data, spec)


def _lexically_under(path: Path, base: Path) -> bool:
    """Return whether `path` lies under `base` as written (both absolute, or both relative to the working folder)."""
    path, base = Path(os.path.abspath(path)), Path(os.path.abspath(base))
    return path != base and path.is_relative_to(base)


def _check_kind(path: Path, spec: Kind) -> None:
    if not path.name.endswith(spec.suffixes):
        raise RecordFileRefused(f"is not a {spec.what} ({' or '.join(spec.suffixes)} file): refused")
    if not path.is_file():
        raise RecordFileRefused("is not a regular file: refused")
    size = path.stat().st_size
    if size > spec.max_bytes:
        raise RecordFileRefused(f"is {size} bytes, over the {spec.max_bytes} a {spec.what} may be: refused")
    if spec.header or spec.text:
        with open(path, "rb") as fh:
            head = fh.read(spec.max_bytes if spec.text else len(spec.header))
        if spec.header and not head.startswith(spec.header):
            raise RecordFileRefused(f"is not a {spec.what} (it does not start as one): refused")
        if spec.text:
            _text(head, spec)


def _text(data: bytes, spec: Kind) -> str:
    if len(data) > spec.max_bytes:
        raise RecordFileRefused(f"is over the {spec.max_bytes} bytes a {spec.what} may be: refused")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordFileRefused(f"is not UTF-8 text ({exc.reason} at byte {exc.start}): refused") from exc
    if "\x00" in text:
        raise RecordFileRefused("holds a NUL byte, not text: refused")
    return text
