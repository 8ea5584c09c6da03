"""torch's cache artifacts (`torch/cache-artifacts.bin`) read without torch, before torch sees them.

`torch.compiler.save_cache_artifacts()` returns the bytes an hf engine artifact carries, and
`torch.compiler.load_cache_artifacts(blob)` writes each entry back into Inductor's cache folder at a
path built from its key, where torch later unpickles it. The container is not a pickle: it is
torch's AppendingByteSerializer (torch/utils/_appending_byte_serializer.py and
torch/compiler/_cache.py; torch 2.13 installed here, and the same layout in the older copies of torch's
source read for this, ROCm's fork and a Python 3.8 backport; torch 2.11's own was not read):

    crc32       4 bytes, big-endian, of every byte after it
    version     uint64, big-endian: 1
    then, to the end, one group per artifact type:
      type      uint64 length + base64 of its UTF-8 name
      count     uint64
      count x   key: uint64 length + base64 of UTF-8 text; content: uint64 length + bytes

What torch does with each type (torch 2.13; `cache` is TORCHINDUCTOR_CACHE_DIR, the engine folder's
inductor/): "inductor" writes `cache/fxgraph/<key[1:3]>/<key>/<sha256>` and unpickles the content
(a CompiledFxGraph, whose source code it runs); "aot_autograd" writes `cache/aotautograd/<key>/<sha256>`
(a pickle); "autotune" writes `cache/<key>` (JSON: a tuned kernel's config). os.path.join drops what
comes before an absolute part, and `..` climbs, so a key decides where torch writes.

`check_blob` reads the container itself and accepts only what a bench build records:
- types "inductor", "aot_autograd" and "autotune" (no "pgo": it needs torch.compiler.config.job_id;
  no "precompile": it needs caching_precompile; bench sets neither);
- keys that are plain cache keys: for inductor and aot_autograd one name, for autotune
  `<folder>/<name>.best_config` (torch keeps the kernel file's folder and the entry's name); a name
  is letters, digits, `_`, `-` and `.`, never `..`, at most MAX_NAME characters (torch's are 52 and 76);
- contents of the type's kind: a JSON object for autotune; for the others a pickle stream that
  reads to its end when every global it names is replaced by an inert stand-in (`pickle_globals`:
  no global is imported and nothing the stream names runs), none of whose globals is a known
  code-running gadget (FORBIDDEN: os, subprocess, builtins.eval, ...).
The last is a tripwire, not a boundary: a CompiledFxGraph holds Python source that torch runs when
it loads the graph, so a pickle torch accepts is code whatever its globals. Trust decides whether an
artifact is loaded at all (bench.backends.artifact_trust); these checks keep even a trusted one from
writing outside its folder.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import re
import zlib
from dataclasses import dataclass

VERSION = 1
# type -> what its key looks like
KEY_SHAPES = {"inductor": "one name", "aot_autograd": "one name", "autotune": "<folder>/<name>.best_config"}
MAX_NAME = 128
MAX_TYPE_NAME = 64
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# Module or attribute names that no Inductor or AOTAutograd entry names, and that a crafted pickle
# reaches for to run a command, write a file or import one: refused in any part of a global's dotted
# path (('torch', 'os.system') reaches os through torch's own import of it).
FORBIDDEN = frozenset({
    "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "_posixsubprocess", "sys", "shutil", "socket",
    "importlib", "runpy", "pickle", "_pickle", "marshal", "ctypes", "io", "_io", "pty", "code", "codeop", "pdb",
    "bdb", "webbrowser", "multiprocessing", "signal", "tempfile", "urllib", "http", "asyncio", "threading",
    "_thread", "pathlib", "glob", "zipimport", "platform", "shelve", "fileinput", "__builtins__", "eval", "exec",
    "__import__", "open", "system", "popen", "breakpoint", "globals", "locals", "setattr", "delattr",
})
FORBIDDEN_BUILTINS = frozenset({"compile", "input", "vars", "exit", "quit", "help", "memoryview"})


class UnsafeCacheArtifacts(ValueError):
    """torch cache-artifact bytes refused before torch reads them (the message says which entry and why)."""


@dataclass(frozen=True)
class Entry:
    type: str
    key: str
    bytes: int


def check_blob(blob: bytes) -> list[Entry]:
    """Return the entries of torch's cache-artifact bytes; UnsafeCacheArtifacts at the first one refused."""
    entries = read_entries(blob)
    for entry, content in entries:
        check_key(entry.type, entry.key)
        check_content(entry, content)
    return [e for e, _ in entries]


def read_entries(blob: bytes) -> list[tuple[Entry, bytes]]:
    """Return [(entry, content)] of the container, read without unpickling; UnsafeCacheArtifacts if malformed."""
    reader = _Reader(blob)
    version = reader.uint64("the format version")
    if version != VERSION:
        raise UnsafeCacheArtifacts(f"torch cache artifacts of format {version}; this harness reads format {VERSION}")
    out = []
    while not reader.done():
        kind = reader.text("an artifact type", MAX_TYPE_NAME)
        if kind not in KEY_SHAPES:
            raise UnsafeCacheArtifacts(f"entry type {kind!r} is not one a bench build records (accepted: "
                                       f"{', '.join(KEY_SHAPES)})")
        count = reader.uint64(f"the count of {kind} entries")
        if count > reader.left() // 16:  # each entry takes at least two 8-byte lengths
            raise UnsafeCacheArtifacts(f"{count} {kind} entries cannot fit in the {reader.left()} bytes left")
        for _ in range(count):
            key = reader.text(f"the key of a {kind} entry", 2 * MAX_NAME + 1)
            content = reader.chunk(f"the content of {kind} entry {key!r}")
            out.append((Entry(kind, key, len(content)), content))
    return out


def check_key(kind: str, key: str) -> None:
    """Raise UnsafeCacheArtifacts unless `key` is a plain cache key of its type (KEY_SHAPES)."""
    parts = key.split("/")
    why = None
    if "\x00" in key:
        why = "holds a NUL byte"
    elif key.startswith("/") or re.match(r"[A-Za-z]:", key) or "\\" in key:
        why = "is an absolute path"
    elif ".." in parts or ".." in key:
        why = "climbs out of its folder (..)"
    elif kind == "autotune" and (len(parts) != 2 or not parts[1].endswith(".best_config")):
        why = "is not <folder>/<name>.best_config"
    elif kind != "autotune" and len(parts) != 1:
        why = "holds a path separator"
    elif any(len(p) > MAX_NAME for p in parts):
        why = f"is over-long (a name over {MAX_NAME} characters)"
    elif not all(NAME.fullmatch(p) for p in parts):
        why = "holds a character other than letters, digits, _, - and ."
    if why:
        raise UnsafeCacheArtifacts(f"{kind} entry key {key[:200]!r} {why}: a plain cache key is "
                                   f"{KEY_SHAPES[kind]}, and torch writes each entry at a path made from its key")


def check_content(entry: Entry, content: bytes) -> None:
    """Raise UnsafeCacheArtifacts unless the content is of its entry type's kind (see the module's docstring)."""
    what = f"{entry.type} entry {entry.key!r}"
    if entry.type == "autotune":
        try:
            value = json.loads(content.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise UnsafeCacheArtifacts(f"{what} is not JSON ({exc}): torch writes a tuned config as JSON") from exc
        if not isinstance(value, dict):
            raise UnsafeCacheArtifacts(f"{what} is JSON {type(value).__name__}, not the object of a tuned config")
        return
    try:
        names = pickle_globals(content)
    except Exception as exc:  # noqa: BLE001 - any failure to read the stream is the entry's fault
        raise UnsafeCacheArtifacts(f"{what} is not a pickle stream torch wrote ({type(exc).__name__}: {exc})") from exc
    for module, name in sorted(names):
        if forbidden(module, name):
            raise UnsafeCacheArtifacts(f"{what} names {module}.{name}, which no compiled graph names and a crafted "
                                       "pickle uses to run code: refused")


def forbidden(module: str, name: str) -> bool:
    """Return whether a pickle global (module, dotted name) is one FORBIDDEN (or FORBIDDEN_BUILTINS) names."""
    parts = module.split(".") + name.split(".")
    if module in ("builtins", "__builtin__") and name.split(".")[0] in FORBIDDEN_BUILTINS:
        return True
    return any(p in FORBIDDEN for p in parts)


class _Inert:
    """What every global of a scanned pickle becomes: takes any call, state or item and does nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass

    def add(self, value):
        pass


class _Scanner(pickle.Unpickler):
    """An unpickler that imports nothing: each global is recorded and replaced by _Inert."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.names: set[tuple[str, str]] = set()

    def find_class(self, module, name):
        self.names.add((module, name))
        return _Inert

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("a persistent id (torch's cache entries hold none)")


def pickle_globals(data: bytes) -> set[tuple[str, str]]:
    """Return the (module, name) of every global a pickle stream names, read to its end with nothing imported.

    Raises (pickle.UnpicklingError, ValueError, ...) for bytes that are not one whole pickle stream."""
    if not data[:1] == pickle.PROTO:
        raise pickle.UnpicklingError("no protocol header (torch writes protocol 2 or later)")
    scanner = _Scanner(data)
    scanner.load()
    return scanner.names


class _Reader:
    """A cursor over the container; every read is bounded by the bytes left (torch's own reader is not)."""

    def __init__(self, data: bytes):
        if len(data) < 12:
            raise UnsafeCacheArtifacts(f"{len(data)} bytes cannot hold torch's cache-artifact header (12 bytes)")
        if zlib.crc32(data[4:]).to_bytes(4, "big") != data[:4]:
            raise UnsafeCacheArtifacts("its CRC-32 does not match its bytes (a damaged or edited copy)")
        self.data, self.i = data, 4

    def left(self) -> int:
        return len(self.data) - self.i

    def done(self) -> bool:
        return self.i == len(self.data)

    def uint64(self, what: str) -> int:
        if self.left() < 8:
            raise UnsafeCacheArtifacts(f"the bytes end inside {what} (truncated)")
        value = int.from_bytes(self.data[self.i:self.i + 8], "big")
        self.i += 8
        return value

    def chunk(self, what: str) -> bytes:
        size = self.uint64(f"the length of {what}")
        if size > self.left():
            raise UnsafeCacheArtifacts(f"{what} claims {size} bytes; {self.left()} are left (truncated)")
        out = self.data[self.i:self.i + size]
        self.i += size
        return out

    def text(self, what: str, longest: int) -> str:
        raw = self.chunk(what)
        if len(raw) > 4 * (longest + 2) // 3 + 4:
            raise UnsafeCacheArtifacts(f"{what} is {len(raw)} bytes of base64: over-long (at most {longest} characters)")
        try:
            return base64.b64decode(raw, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise UnsafeCacheArtifacts(f"{what} is not base64 of UTF-8 text ({exc})") from exc
