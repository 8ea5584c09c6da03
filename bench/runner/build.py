"""`bench build`: each build key of a matrix built cold in a worker, warmed up, and written as an engine artifact.

Nothing is measured and nothing goes into a result store: the worker builds, loads and runs the
warm-up of every cell of the build group (the shapes its measured passes would compile and
tune), then writes the engine as an artifact (bench.backends.engine_artifact) to the output
folder. Each build starts from an empty engine folder of its own, so an artifact is one cold
build's compile and tuning, never a mix with an earlier process's cache. That folder lies under
engine_artifact.build_root() (/tmp/bench-engine-builds/builds/<stamp>/), an absolute path another
machine can create, because the artifact is loaded into the same path it was built in. Each
artifact, read back whole and checked, is recorded as built on this machine
(bench.backends.artifact_trust), so `bench run --engines` trusts it here.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from bench.backends.engine_artifact import build_root
from bench.errors import BenchInputError


@dataclass
class BuildOutcome:
    """What one build key's build gave: its artifact (path, digest, size) or why there is none."""

    key_hash: str
    label: str
    artifact: str | None = None
    digest: str | None = None
    bytes: int | None = None
    tuned: dict | None = None
    error: str | None = None
    seconds: float = 0.0
    events: list = field(default_factory=list)

    def text(self) -> str:
        """Return the line `bench build` prints: the artifact (size, digests, time) or why there is none."""
        if self.artifact:
            tuned = self.tuned or {}
            return (f"{self.label}  build key {self.key_hash}: {self.artifact} ({self.bytes / 1e6:.1f} MB, digest "
                    f"{self.digest[:12]}, tuned digest {tuned.get('digest')}, {self.seconds:.0f} s)")
        return f"{self.label}  build key {self.key_hash}: no artifact ({self.seconds:.0f} s): {self.error}"


def build_artifacts(matrix, out_dir: str | Path, *, engines_dir: str | Path | None = None,
                    workload_cache: str | Path = "workloads/cache", on_outcome=None, console=None) -> list[BuildOutcome]:
    """Return one BuildOutcome per build key of the matrix, each built cold in a fresh worker and exported to out_dir.

    on_outcome gets each outcome as its build ends; console (if given) the plan's line before the first.
    """
    from bench.execution.supervisor import GroupItem, GroupJob, supervise_group
    from bench.machine.memory_cap import check_cap, env_for
    from bench.workloads.workload import cached_workload

    settings = matrix.settings
    check_cap(settings.gpu_memory_gb, [c.device for c in matrix.cells])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups: OrderedDict = OrderedDict()
    for cell in matrix.cells:
        groups.setdefault(cell.build_key(), []).append(cell)
    if console is not None:
        console.print(f"matrix [bold]{matrix.name}[/]: {len(groups)} build key(s), each built cold -> {out_dir}")
    workloads = {}
    for cell in matrix.cells:
        if cell.workload not in workloads:
            workloads[cell.workload] = cached_workload(cell.workload, Path(workload_cache))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
    outcomes = []
    for key, cells in groups.items():
        items = [GroupItem(c, [], str(workloads[c.workload][1])) for c in cells]
        job = GroupJob(
            # An absolute folder every machine can create: the artifact loads into it again (engine_artifact.load_dir).
            build_key=key, items=items, engines_dir=(Path(engines_dir) if engines_dir else build_root()) / "builds" / stamp,
            warmup=max(1, settings.warmup), build_timeout_s=settings.build_timeout_s,
            cell_timeout_s=settings.timeout_s, log_dir=out_dir / "logs", log_prefix=f"build-{key.key_hash}",
            env=env_for(settings.gpu_memory_gb), engine={"export_dir": str(out_dir)},
        )
        outcome = BuildOutcome(key.key_hash, cells[0].label)
        started = time.monotonic()
        supervise_group(job, outcome.events.append)
        outcome.seconds = time.monotonic() - started
        for event in outcome.events:
            kind = event.get("event")
            if kind == "exported":
                outcome.artifact, outcome.digest = event["path"], event["digest"]
                outcome.bytes, outcome.tuned = event["bytes"], event.get("tuned")
            elif kind in ("fatal", "warmup_failed") and outcome.error is None:
                outcome.error = f"{event.get('status')}: {event.get('error')}"
        if outcome.artifact is None and outcome.error is None:
            outcome.error = f"the worker ended without writing an artifact; log {job.logs[-1] if job.logs else '?'}"
        if outcome.artifact is not None:
            _trust_built(outcome)
        outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome)
    return outcomes


def _trust_built(outcome: BuildOutcome) -> None:
    """Record the artifact a build made here as trusted on this machine, after reading it back whole.

    The artifact is checked as `bench run --engines` will check it (engine_artifact.read_files), so
    a build whose artifact would be refused fails here, not on the machine it is carried to."""
    from bench.backends import artifact_trust, engine_artifact

    try:
        manifest, _ = engine_artifact.read_files(outcome.artifact, outcome.digest)
        artifact_trust.record_built(manifest["digest"], outcome.artifact, manifest["key_hash"])
    except BenchInputError as exc:
        outcome.error = f"artifact {outcome.artifact} written, but not recorded as trusted: {exc}"
        outcome.artifact = None
