"""SSE parsing: an OpenAI-style completion stream, split into network-sized pieces, decoded event by event."""

import json

from bench.serving.sse import SSEDecoder

CHUNKS = 2000


def _stream(piece: int) -> list[bytes]:
    """Return the bytes of a streamed completion (CHUNKS token events + [DONE]) cut every `piece` bytes."""
    events = [
        b"data: " + json.dumps({"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
                                "choices": [{"index": 0, "text": f" tok{i}", "logprobs": None, "finish_reason": None}]}
                               ).encode() + b"\n\n"
        for i in range(CHUNKS)
    ] + [b"data: [DONE]\n\n"]
    blob = b"".join(events)
    return [blob[i:i + piece] for i in range(0, len(blob), piece)]


def _decode(pieces: list[bytes]) -> int:
    dec = SSEDecoder()
    return sum(len(dec.feed(p)) for p in pieces)


def test_sse_one_event_per_read(benchmark):
    pieces = [p for p in _stream(1 << 20)[0].split(b"\n\n") if p]  # one whole event per read, as a fast server sends
    pieces = [p + b"\n\n" for p in pieces]
    assert benchmark(_decode, pieces) == CHUNKS + 1


def test_sse_split_reads(benchmark):
    pieces = _stream(97)  # events cut across reads, as a slow network delivers them
    assert benchmark(_decode, pieces) == CHUNKS + 1
