"""Engines as artifacts: a build's compiled and tuned state as one portable file, identified by a digest.

A cell's engine folder (`engines/<build key>/`) holds what its first process compiled and tuned;
for a tuned cell (torchao int8wo: coordinate descent) that is a draw, and another machine, or a
fresh folder, draws again (docs/guide/hf-backend.md, "Engines as artifacts"). An artifact carries one
draw to wherever the cell runs next, as TensorRT-LLM ships its engine.

Format 1: an uncompressed tar, named `<build key hash>-<digest 12>.tar`, holding

    manifest.json   {"format", "digest", "key_hash", "build_key", "environment", "tuned",
                     "files": [{"path", "sha256", "bytes"}], "made_at", "made_by", "engines_dir"}
    files/<path>    each file the backend chose (`Loaded.engine_files`), relative to its engine folder

The digest is the SHA-256 of the build key and of each file's (path, SHA-256): two artifacts
with one digest hold the same kernels and tuned configs, whichever machine or hour made them.
`environment` is where it was made; `MATCH_KEYS` must agree where it is loaded.

`engines_dir` is the absolute engines folder the build ran in, and an artifact loads into that same
folder (`load_dir`): Inductor pickles the absolute paths of a compiled kernel's source file and of
its autotune-cache entry into the kernels it caches for the static CUDA launcher, so a kernel
loaded under another path looks for its tuned winner where the build kept it, misses, and tunes
again (seen on the H200: docs/measurements/2026-12-01-h200-artifacts-two-machines.md). `bench
build` therefore builds under `BUILD_ROOT`, a path any Linux machine can create.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

from bench.errors import BenchInputError

FORMAT = 1
MANIFEST = "manifest.json"
# What decides whether an artifact's kernels are the ones this machine would run: Inductor's
# caches are keyed by torch's own source hash and Triton's version, compiled kernels are
# binaries for one GPU architecture, built by one CUDA toolkit and loaded by one driver.
MATCH_KEYS = ("torch", "triton", "cuda", "gpu_name", "compute_capability", "driver")
# Where `bench build` builds (BENCH_ARTIFACT_BUILD_ROOT overrides it): the same absolute path on every machine.
BUILD_ROOT = "/tmp/bench-engine-builds"
# Kept in the manifest to say where it was made (not compared).
WHERE_KEYS = ("host", "gpu_uuid", "transformers", "torchao", "commit", "dirty")


class ArtifactMismatch(Exception):
    """An artifact made in another environment (the message names each difference)."""


def digest_of(key_dict: dict, files: dict[str, bytes]) -> str:
    """Return the artifact digest (64 hex digits) of a build key and its files' contents."""
    listing = sorted((path, hashlib.sha256(data).hexdigest()) for path, data in files.items())
    return hashlib.sha256(json.dumps({"build_key": key_dict, "files": listing}, sort_keys=True).encode()).hexdigest()


def environment_of(fingerprint: dict) -> dict:
    """Return the part of a worker's environment fingerprint an artifact records."""
    return {k: fingerprint.get(k) for k in (*MATCH_KEYS, *WHERE_KEYS)}


def build_root() -> Path:
    """Return the folder `bench build` builds under (BUILD_ROOT unless $BENCH_ARTIFACT_BUILD_ROOT names another)."""
    return Path(os.environ.get("BENCH_ARTIFACT_BUILD_ROOT") or BUILD_ROOT)


def load_dir(manifest: dict, fallback: Path) -> tuple[Path, str | None]:
    """Return (engines folder to load an artifact into, why not the build's own or None).

    The build's absolute engines folder where the manifest names one and it can be created here;
    else `fallback` (an older artifact, or a path this machine refuses), with the reason: its
    statically launched kernels may then tune again, which the records count."""
    made_in = manifest.get("engines_dir")
    if not made_in:
        return fallback, "the artifact does not name the folder it was built in (made before format 1 recorded it)"
    try:
        Path(made_in).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fallback, f"cannot create the folder it was built in, {made_in}: {exc}"
    return Path(made_in), None


def write(out_dir: str | Path, key_dict: dict, key_hash: str, environment: dict, tuned: dict | None,
          files: dict[str, bytes], engines_dir: str | Path | None = None) -> tuple[Path, dict]:
    """Return (path, manifest) of the artifact written to out_dir from an engine's files (built in engines_dir)."""
    from bench.files import write_atomic

    if not files:
        raise ValueError("an engine artifact needs at least one file")
    digest = digest_of(key_dict, files)
    manifest = {
        "format": FORMAT, "digest": digest, "key_hash": key_hash, "build_key": key_dict,
        "environment": environment_of(environment), "tuned": tuned,
        "files": [{"path": p, "sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for p, d in sorted(files.items())],
        "made_at": time.time(), "made_by": "bench build",
        "engines_dir": os.path.abspath(engines_dir) if engines_dir else None,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())] + [
                (f"files/{p}", d) for p, d in sorted(files.items())]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    path = write_atomic(Path(out_dir) / f"{key_hash}-{digest[:12]}.tar", buf.getvalue())
    return path, manifest


def read_manifest(path: str | Path) -> dict:
    """Return an artifact's manifest; BenchInputError if the file is not an artifact this harness reads."""
    p = Path(path)
    try:
        with tarfile.open(p, mode="r:") as tar:
            member = tar.extractfile(MANIFEST)
            manifest = json.loads(member.read()) if member else None
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise BenchInputError(f"{str(p)!r} is not an engine artifact (a tar with {MANIFEST}, made by `bench build`): "
                              f"{exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BenchInputError(f"engine artifact {str(p)!r} has format {manifest.get('format') if manifest else None!r}; "
                              f"this harness reads format {FORMAT}: build it again with `bench build`")
    return manifest


def read_files(path: str | Path) -> tuple[dict, dict[str, bytes]]:
    """Return (manifest, {path: bytes}) of an artifact, every file checked against its SHA-256 and the digest."""
    manifest = read_manifest(path)
    files: dict[str, bytes] = {}
    with tarfile.open(Path(path), mode="r:") as tar:
        for entry in manifest["files"]:
            member = tar.extractfile(f"files/{entry['path']}")
            data = member.read() if member else b""
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise BenchInputError(f"engine artifact {str(path)!r}: {entry['path']} does not match its SHA-256 "
                                      "(a damaged copy): carry the file again")
            files[entry["path"]] = data
    if digest_of(manifest["build_key"], files) != manifest["digest"]:
        raise BenchInputError(f"engine artifact {str(path)!r}: its files do not give its digest (an edited copy)")
    return manifest, files


def mismatches(made: dict, here: dict) -> list[str]:
    """Return 'key: made with A, here B' for each MATCH_KEYS value that differs; keys `here` lacks are not judged."""
    out = []
    for k in MATCH_KEYS:
        if k in here and not _same(k, made.get(k), here.get(k)):
            out.append(f"{k}: made with {made.get(k)}, here {here.get(k)}")
    return out


def _same(key: str, made, here) -> bool:
    """Return whether two values of a MATCH_KEYS entry agree. A version read from the package's metadata
    (the parent, which never imports torch) may lack the local part that torch.__version__ has
    ('2.11.0' vs '2.11.0+cu130', seen on the H200): then the public versions are compared, and the
    worker, which imports torch, judges the full one."""
    made, here = str(made), str(here)
    if made == here:
        return True
    if key in ("torch", "triton") and ("+" in made) != ("+" in here):
        return made.split("+")[0] == here.split("+")[0]
    return False


def mismatch_message(path, manifest: dict, differences: list[str]) -> str:
    """Return the refusal of an artifact made elsewhere, naming each difference and the two ways on."""
    return (f"engine artifact {Path(str(path)).name} (digest {manifest['digest'][:12]}) was made in another "
            f"environment: {'; '.join(differences)}. Its kernels and tuned configs are not this machine's: build one "
            "here (`bench build`), or pass --retune-on-mismatch to compile and tune here instead (the records then say "
            "so)")


def find(paths) -> dict[str, tuple[Path, dict]]:
    """Return {build key hash: (artifact path, manifest)} from artifact files and folders of them.

    BenchInputError when a path is missing, holds no artifact, or two artifacts are for one build key."""
    out: dict[str, tuple[Path, dict]] = {}
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise BenchInputError(f"--engines {str(p)!r} does not exist: give an artifact (.tar) made by `bench build` "
                                  "or a folder of them")
        candidates = sorted(p.glob("*.tar")) if p.is_dir() else [p]
        if not candidates:
            raise BenchInputError(f"--engines folder {str(p)!r} holds no engine artifact (*.tar): run `bench build "
                                  f"--artifacts {p}` first")
        for c in candidates:
            manifest = read_manifest(c)
            key = manifest["key_hash"]
            if key in out and out[key][1]["digest"] != manifest["digest"]:
                raise BenchInputError(f"two engine artifacts for build key {key}: {out[key][0]} and {c}; give the one "
                                      "to load")
            out[key] = (c, manifest)
    return out
