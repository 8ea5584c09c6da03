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
build` therefore builds under `BUILD_ROOT`, a path any Linux machine can create, and a manifest's
`engines_dir` is followed only under it (load_dir).

An artifact is code: an hf artifact's torch caches hold pickles and compiled source that torch
runs. The SHA-256s detect damage, not authorship; bench.backends.artifact_trust decides which
artifacts load at all. Every artifact is read through `read_files`, which makes every check this
module knows (the manifest's keys and types, each file's SHA-256, the digest, each file's
contents, torch's cache entries through bench.backends.hf.torch_cache) before anything is
written: in the parent before any worker starts (bench.runner.engines), again in the worker.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
from pathlib import Path

from bench.checks import is_finite_number
from bench.errors import BenchInputError

FORMAT = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20
MAX_PATH_CHARS = 1024
HEX64 = re.compile(r"[0-9a-f]{64}")
KEY_HASH = re.compile(r"[0-9a-f]{8,64}")
PATH_PART = re.compile(r"[A-Za-z0-9_.+=-]+")
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

    The build's absolute engines folder where the manifest names one under this machine's build
    root (build_root(): a manifest decides where folders are made here only there) and it can be
    created; else `fallback` (an older artifact, a folder elsewhere, or a path this machine refuses),
    with the reason: its statically launched kernels may then tune again, which the records count."""
    made_in = manifest.get("engines_dir")
    if not made_in:
        return fallback, "the artifact does not name the folder it was built in (made before format 1 recorded it)"
    root = build_root()
    if not under_build_root(made_in, root):
        return fallback, (f"the folder it was built in, {str(made_in)[:200]!r}, is not under the build root {root} "
                          "(an artifact makes folders here only there)")
    # A link under the root must not lead the folders made next outside it: judged before mkdir follows it, and after.
    existing = next(p for p in (Path(made_in), *Path(made_in).parents) if os.path.lexists(p) or p == p.parent)
    if existing.is_relative_to(root) and not existing.resolve().is_relative_to(root.resolve()):
        return fallback, f"the folder it was built in, {made_in}, leads outside the build root {root} (a link)"
    try:
        Path(made_in).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return fallback, f"cannot create the folder it was built in, {made_in}: {exc}"
    if not Path(made_in).resolve().is_relative_to(root.resolve()):
        return fallback, f"the folder it was built in, {made_in}, leads outside the build root {root} (a link)"
    return Path(made_in), None


def under_build_root(path, root: Path) -> bool:
    """Return whether `path` is an absolute, normalized path strictly under `root` (no `..`, no NUL)."""
    if not isinstance(path, str) or "\x00" in path or not os.path.isabs(path):
        return False
    if os.path.normpath(path) != path.rstrip("/") or ".." in Path(path).parts:
        return False
    return Path(path) != root and Path(path).is_relative_to(root)


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
    """Return an artifact's manifest, checked (check_manifest); BenchInputError if the file is not an artifact this
    harness reads."""
    p = Path(path)
    try:
        with tarfile.open(p, mode="r:") as tar:
            member = tar.getmember(MANIFEST)
            if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
                raise ValueError(f"{MANIFEST} is not a file of at most {MAX_MANIFEST_BYTES} bytes")
            manifest = json.loads(tar.extractfile(member).read())
    except (OSError, tarfile.TarError, KeyError, ValueError, EOFError) as exc:
        raise BenchInputError(f"{str(p)!r} is not an engine artifact (a tar with {MANIFEST}, made by `bench build`): "
                              f"{exc}") from exc
    return check_manifest(manifest, p)


def check_manifest(manifest, path) -> dict:
    """Return the manifest if every key it must hold is there with its type; BenchInputError naming the first that is not.

    Required: format (FORMAT), digest (64 hex digits), key_hash (hex), build_key and environment
    (objects), files (a list of {path: a plain relative path, sha256: 64 hex digits, bytes: a count});
    optional: tuned (an object whose digest is text), engines_dir (an absolute path), made_at, made_by."""
    name = Path(str(path)).name

    def bad(what: str) -> BenchInputError:
        return BenchInputError(f"engine artifact {name}: its manifest {what}: not an artifact `bench build` wrote; "
                               "build it again with `bench build`")

    if not isinstance(manifest, dict):
        raise bad(f"is JSON {type(manifest).__name__}, not an object")
    if manifest.get("format") != FORMAT or isinstance(manifest.get("format"), bool):
        raise BenchInputError(f"engine artifact {name} has format {manifest.get('format')!r}; this harness reads "
                              f"format {FORMAT}: build it again with `bench build`")
    for key, kind in (("digest", str), ("key_hash", str), ("build_key", dict), ("environment", dict), ("files", list)):
        if key not in manifest:
            raise bad(f"lacks {key!r}")
        if not isinstance(manifest[key], kind):
            raise bad(f"has {key} {str(manifest[key])[:60]!r}, not {'text' if kind is str else 'an ' + kind.__name__}")
    if not HEX64.fullmatch(manifest["digest"]):
        raise bad(f"has digest {manifest['digest'][:80]!r}, not 64 hex digits")
    if not KEY_HASH.fullmatch(manifest["key_hash"]):
        raise bad(f"has key_hash {manifest['key_hash'][:80]!r}, not a build key's hex digits")
    if not all(isinstance(v, (str, int, float, bool, type(None))) for v in manifest["environment"].values()):
        raise bad("has an environment value that is not text or a number")
    tuned = manifest.get("tuned")
    if tuned is not None and (not isinstance(tuned, dict) or not isinstance(tuned.get("digest"), (str, type(None)))):
        raise bad(f"has tuned {str(tuned)[:80]!r}: an object whose digest is text (or null)")
    for key in ("engines_dir", "made_by"):
        if not isinstance(manifest.get(key), (str, type(None))):
            raise bad(f"has {key} {str(manifest[key])[:80]!r}, not text")
    made_at = manifest.get("made_at")
    if made_at is not None and not is_finite_number(made_at):
        raise bad(f"has made_at {made_at!r}, not a time")
    if not manifest["files"]:
        raise bad("lists no file")
    seen = set()
    for entry in manifest["files"]:
        if not isinstance(entry, dict) or not {"path", "sha256", "bytes"} <= set(entry):
            raise bad(f"lists a file {str(entry)[:80]!r} without its path, sha256 and bytes")
        why = plain_path_problem(entry["path"])
        if why:
            raise bad(f"lists file {str(entry['path'])[:120]!r}, which {why}")
        if not isinstance(entry["sha256"], str) or not HEX64.fullmatch(entry["sha256"]):
            raise bad(f"gives file {entry['path']!r} the SHA-256 {str(entry['sha256'])[:80]!r}, not 64 hex digits")
        if isinstance(entry["bytes"], bool) or not isinstance(entry["bytes"], int) or entry["bytes"] < 0:
            raise bad(f"gives file {entry['path']!r} a size of {entry['bytes']!r} bytes")
        if entry["path"] in seen:
            raise bad(f"lists file {entry['path']!r} twice")
        seen.add(entry["path"])
    return manifest


def plain_path_problem(path) -> str | None:
    """Return why `path` is not a plain relative path (absolute, `..`, empty parts, odd characters), or None."""
    if not isinstance(path, str) or not path:
        return "is not a path"
    if len(path) > MAX_PATH_CHARS:
        return f"is over {MAX_PATH_CHARS} characters"
    if path.startswith("/") or "\\" in path:
        return "is an absolute path (or holds a backslash)"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "climbs out of its folder or holds an empty part (.., ., //)"
    if not all(PATH_PART.fullmatch(p) for p in parts):
        return "holds a character other than letters, digits and _ . + = -"
    return None


def read_files(path: str | Path, digest: str | None = None) -> tuple[dict, dict[str, bytes]]:
    """Return (manifest, {path: bytes}) of an artifact, every check made: the manifest's keys and types, each file
    against its SHA-256, the digest (and `digest` where the caller knows which one it trusts), and each file's
    contents (check_contents). BenchInputError names the artifact and what is wrong."""
    manifest = read_manifest(path)
    name = Path(str(path)).name
    if digest is not None and manifest["digest"] != digest:
        raise BenchInputError(f"engine artifact {name} has digest {manifest['digest'][:12]}, not the {digest[:12]} "
                              "checked before the run: the file changed since; give it again")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(Path(path), mode="r:") as tar:
            for entry in manifest["files"]:
                member = tar.getmember(f"files/{entry['path']}")
                if not member.isfile() or member.size != entry["bytes"]:
                    raise BenchInputError(f"engine artifact {name}: files/{entry['path']} is not a file of the "
                                          f"{entry['bytes']} bytes its manifest says (a damaged or edited copy)")
                files[entry["path"]] = tar.extractfile(member).read()
    except (OSError, tarfile.TarError, KeyError, EOFError) as exc:
        raise BenchInputError(f"engine artifact {name} cannot be read ({exc}): carry the file again") from exc
    for entry in manifest["files"]:
        if hashlib.sha256(files[entry["path"]]).hexdigest() != entry["sha256"]:
            raise BenchInputError(f"engine artifact {str(path)!r}: {entry['path']} does not match its SHA-256 "
                                  "(a damaged copy): carry the file again")
    if digest_of(manifest["build_key"], files) != manifest["digest"]:
        raise BenchInputError(f"engine artifact {str(path)!r}: its files do not give its digest (an edited copy)")
    check_contents(name, files)
    return manifest, files


def check_contents(name: str, files: dict[str, bytes]) -> None:
    """Raise BenchInputError for a file whose contents are not of its kind: torch's cache artifacts (every entry's
    type, key and content: bench.backends.hf.torch_cache) and tuned configs (`*.best_config`: a JSON object)."""
    from bench.backends.hf.compile import TORCH_CACHE_ARTIFACTS
    from bench.backends.hf.torch_cache import UnsafeCacheArtifacts, check_blob

    for rel, data in files.items():
        if rel == TORCH_CACHE_ARTIFACTS:
            try:
                check_blob(data)
            except UnsafeCacheArtifacts as exc:
                raise BenchInputError(f"engine artifact {name}: {rel}: {exc}; the artifact is refused before torch "
                                      "reads it") from exc
        elif rel.endswith(".best_config"):
            try:
                ok = isinstance(json.loads(data.decode("utf-8")), dict)
            except (UnicodeDecodeError, ValueError):
                ok = False
            if not ok:
                raise BenchInputError(f"engine artifact {name}: {rel} is not the JSON object of a tuned config")


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
