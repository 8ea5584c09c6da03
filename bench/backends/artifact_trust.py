"""Which engine artifacts this machine loads: those `bench build` made here, and those the user names.

An engine artifact is code (docs/guide/trust.md): loading an hf artifact hands torch pickles and
the Python source of compiled graphs, which torch runs. Its SHA-256s show that a copy is whole,
not who made it: anyone can recompute them. So `bench run --engines` loads an artifact only when
its digest is trusted:

- built on this machine: `bench build` records each artifact it exports in a ledger, a JSON file
  under the user's state folder ($BENCH_TRUSTED_ARTIFACTS, else $XDG_STATE_HOME/bench/
  trusted-artifacts.json, else ~/.local/state/bench/trusted-artifacts.json):
      {"format": 1, "artifacts": {"<digest>": {"file", "key_hash", "made_at", "host"}}}
- named by the user: `--trust DIGEST` (repeatable) or `--trust-file FILE`, one digest a line
  (`#` starts a comment; text after the digest on its line is ignored, so `sha256sum`-style
  "DIGEST  name" lines work).
A digest is the full 64 hex digits the artifact's manifest holds (bench.backends.engine_artifact):
a 12-digit prefix could be matched by a crafted artifact. A matrix never names a trusted digest:
a matrix is input from anywhere, as the artifact is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path

from bench.errors import BenchInputError

LEDGER_ENV = "BENCH_TRUSTED_ARTIFACTS"
LEDGER_FORMAT = 1
DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_TRUST_FILE_BYTES = 1 << 20


def ledger_path() -> Path:
    """Return the ledger file: $BENCH_TRUSTED_ARTIFACTS, else under $XDG_STATE_HOME or ~/.local/state."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "bench" / "trusted-artifacts.json"


def check_digest(text, what: str) -> str:
    """Return a digest as the manifest writes it (64 lowercase hex digits); BenchInputError naming `what` otherwise."""
    if not isinstance(text, str) or not DIGEST.fullmatch(text.strip().lower()):
        raise BenchInputError(f"{what} must be an artifact's full digest (64 hex digits, as `bench build` prints and "
                              f"the refusal of an untrusted artifact shows), got {str(text)[:80]!r}")
    return text.strip().lower()


def ledger_digests(path: Path | None = None) -> set[str]:
    """Return the digests of the ledger (none when it does not exist); BenchInputError when it cannot be read."""
    return set(_read_ledger(path or ledger_path())["artifacts"])


def _read_ledger(path: Path) -> dict:
    if not path.exists():
        return {"format": LEDGER_FORMAT, "artifacts": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"the ledger of artifacts built here, {str(path)!r}, cannot be read ({exc}): remove it "
                              f"(`bench build` starts a new one) or set ${LEDGER_ENV} to another file") from exc
    artifacts = data.get("artifacts") if isinstance(data, dict) else None
    if not isinstance(artifacts, dict) or data.get("format") != LEDGER_FORMAT or not all(
            isinstance(d, str) and DIGEST.fullmatch(d) for d in artifacts):
        raise BenchInputError(f"the ledger of artifacts built here, {str(path)!r}, is not a format-{LEDGER_FORMAT} "
                              "ledger of digests: remove it (`bench build` starts a new one)")
    return data


def record_built(digest: str, artifact: str | Path, key_hash: str, path: Path | None = None) -> Path:
    """Return the ledger after adding an artifact `bench build` made here (locked: two builds may end at once)."""
    from bench.files import write_atomic

    path = path or ledger_path()
    digest = check_digest(digest, "a built artifact's digest")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        from bench.files import describe_os_error

        raise BenchInputError(f"cannot record artifact {digest[:12]} as built here: "
                              + describe_os_error(exc, exc.filename or path)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = _read_ledger(path)
        data["artifacts"][digest] = {"file": str(Path(artifact).resolve()), "key_hash": key_hash,
                                     "made_at": time.time(), "host": socket.gethostname()}
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return path


def read_trust_file(path: str | Path) -> set[str]:
    """Return the digests a --trust-file lists; BenchInputError naming the file and line of anything else."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_TRUST_FILE_BYTES:
            raise BenchInputError(f"--trust-file {str(p)!r} is over {MAX_TRUST_FILE_BYTES} bytes: a list of digests is "
                                  "a few KB")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchInputError(f"--trust-file {str(p)!r} cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BenchInputError(f"--trust-file {str(p)!r} is not UTF-8 text: one digest a line") from exc
    out = set()
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words:
            out.add(check_digest(words[0], f"line {n} of --trust-file {str(p)!r}"))
    return out


def trusted_digests(given: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> dict[str, str]:
    """Return {digest: why it is trusted}: --trust, --trust-file, then the ledger of artifacts built here."""
    out = {check_digest(d, "--trust"): "--trust" for d in given}
    for f in files:
        out.update({d: f"--trust-file {f}" for d in read_trust_file(f) if d not in out})
    ledger = ledger_path()
    out.update({d: f"built here ({ledger})" for d in ledger_digests(ledger) if d not in out})
    return out


def untrusted_message(artifact: str | Path, digest: str) -> str:
    """Return the refusal of an artifact nobody vouched for: what it is, its digest, and the ways to trust it."""
    return (f"engine artifact {str(artifact)!r} (digest {digest}) is not trusted: it was not built on this machine "
            f"(the ledger {ledger_path()} does not list it) and no --trust names it. An artifact is code: loading it "
            "runs the pickles and compiled source it holds, and its SHA-256s show only that the copy is whole. If you "
            f"know who built it, pass --trust {digest} (or list it in a --trust-file); else build one here with "
            "`bench build`")
