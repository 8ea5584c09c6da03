"""Which engine each build group uses: an artifact to load, a cold tuning build, or the shared engine folder.

`bench run --engines PATH` loads `bench build`'s artifacts. An artifact is code (docs/guide/trust.md),
so every check runs here, in the parent, before any worker starts, and a refusal is exit 2 with its
reason on the console: each cell's build key must have one artifact; each artifact is read whole
(engine_artifact.read_files: the manifest's keys and types, the SHA-256s, the digest, the contents,
torch's cache entries); its digest must be trusted (built here, or named by --trust / --trust-file:
bench.backends.artifact_trust); and one made with another torch, Triton, GPU or driver is refused
where this process can tell (versions of the installed packages; the GPU and driver through NVML).
The worker checks again (the file may have changed since: it must still have the digest checked
here) and checks the rest (CUDA). `--retune-on-mismatch` builds here instead of refusing a mismatch.
`--tuning-builds K` gives each cell K cold builds, each in an engine folder of its own.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from bench.backends import engine_artifact
from bench.errors import BenchInputError


def local_environment(device: str, remote: bool = False) -> dict:
    """Return the MATCH_KEYS values this process can tell for a cell on `device` without importing torch.

    remote: the cells run elsewhere (Ray), so the GPU here says nothing: only the worker judges it."""
    from bench.machine.environment import gpu_info, installed_version, nvml_device

    if remote:
        return {}
    here = {"torch": installed_version("torch"), "triton": installed_version("triton")}
    if device.startswith("cuda"):
        info = gpu_info(nvml_device(device))
        if not info.get("nvml_error") and info.get("gpu_name"):
            here.update({k: info.get(k) for k in ("gpu_name", "compute_capability", "driver")})
    return here


def artifacts_for(matrix) -> dict[str, str]:
    """Return {build key hash: artifact path} for the matrix's cells (empty without `engines`), every artifact checked.

    BenchInputError, before any work: a cell without an artifact for its build key; an artifact that
    is damaged, malformed or holds an entry torch must not read; one whose digest is not trusted; one
    made in an environment that differs here (unless retune_on_mismatch: a warning)."""
    from bench.backends import artifact_trust

    settings = matrix.settings
    if not settings.engines:
        return {}
    found = engine_artifact.find(settings.engines)
    cells = {}
    for c in matrix.cells:
        cells.setdefault(c.build_key().key_hash, c)
    missing = [c.label for h, c in cells.items() if h not in found]
    if missing:
        have = ", ".join(f"{h} ({Path(p).name})" for h, (p, _) in sorted(found.items())) or "none"
        raise BenchInputError(
            f"no engine artifact for {len(missing)} cell(s) ({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}): "
            f"an artifact serves one build key, and those given are for {have}. Build them with `bench build` on "
            "this matrix, or choose the cells that have one with --only")
    trusted = artifact_trust.trusted_digests(settings.trust, settings.trust_files)
    out = {}
    for h, cell in cells.items():
        path, manifest = found[h]
        if manifest["digest"] not in trusted:
            raise BenchInputError(artifact_trust.untrusted_message(path, manifest["digest"]))
        engine_artifact.read_files(path, manifest["digest"])  # whole, intact, every entry plain: before any worker
        differences = engine_artifact.mismatches(manifest["environment"],
                                                 local_environment(cell.device, settings.executor == "ray"))
        if differences:
            message = engine_artifact.mismatch_message(path, manifest, differences)
            if not settings.retune_on_mismatch:
                raise BenchInputError(message)
            warnings.warn(f"{message} — building here (--retune-on-mismatch)", UserWarning, stacklevel=2)
        out[h] = str(path)
    return out


def engine_for(key, build: int | None, artifacts: dict[str, str], settings, engines_dir: Path,
               run_id: str) -> tuple[Path, dict]:
    """Return (engines dir, the worker's `engine` job entry) of one build group's process.

    An artifact loads into the absolute folder it was built in (engine_artifact.load_dir: Inductor's
    cached kernels name their build's paths), else into a folder of its own digest, never into one
    that tuned here; a tuning build k builds in `engines/tuning/<run id>/build-k`, cold the first time."""
    engine: dict = {"retune_on_mismatch": settings.retune_on_mismatch}
    path = artifacts.get(key.key_hash)
    if path:
        manifest = engine_artifact.read_manifest(path)
        folder, why_not = engine_artifact.load_dir(manifest, Path(engines_dir) / "artifacts" / manifest["digest"][:16])
        if why_not:
            warnings.warn(f"engine artifact {Path(path).name} loads into {folder}, not the folder it was built in "
                          f"({why_not}): its tuned kernels may be tuned again, and the records then say so",
                          UserWarning, stacklevel=2)
        # The digest checked here: the worker refuses a file that changed since (bench.execution.worker.install_artifact).
        return folder, {**engine, "artifact": path, "digest": manifest["digest"]}
    if build is not None:
        return Path(engines_dir) / "tuning" / run_id / f"build-{build}", {**engine, "tuning_build": build}
    return Path(engines_dir), engine
