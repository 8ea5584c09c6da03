"""Writing output files: the one helper every writer uses, so a reader never sees half a file."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Return `path` after replacing its content with `text` (UTF-8; bytes as they are) in one step.

    The text goes to a temporary file beside it (this process's own name, so two writers do not
    share one), then os.replace: an interrupted write leaves the old file or none, never a torn one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path
