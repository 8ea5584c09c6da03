"""Server-sent events: bytes as they arrive -> the `data` payload of each complete event.

Events end at a blank line; `data:` lines are joined with newlines, comment lines (`:`) and
other fields (`event:`, `id:`, `retry:`) are ignored, CRLF line ends are accepted. A payload is
returned as bytes so the caller decides whether to decode JSON (the hot path of the client).
"""

from __future__ import annotations


class SSEDecoder:
    """Incremental decoder: feed(bytes) -> list of complete events' data payloads."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Return the data payloads of the events completed by `data` (possibly none)."""
        buf = self._buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()  # incomplete tail (b"" when data ended on an event boundary)
        out = []
        for block in blocks:
            if block.startswith(b"data:") and b"\n" not in block:  # fast path: one data line
                out.append(block[6:] if block[5:6] == b" " else block[5:])
                continue
            lines = [line for line in block.split(b"\n") if line.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(ln[6:] if ln[5:6] == b" " else ln[5:] for ln in lines))
        return out

    @property
    def pending(self) -> bytes:
        """Return bytes received after the last complete event (non-empty: the stream was cut)."""
        return self._buf
