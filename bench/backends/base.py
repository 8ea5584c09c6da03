"""The backend protocol: what a worker drives (declarations live in bench.backends.declaration).

In the worker a backend does three steps:
`build(key, engines_dir) -> artifact`, `load(artifact) -> Loaded`, `Loaded.run(requests,
max_batch_size, options) -> RunOutput`, and finally `Loaded.close()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.workloads.request import RequestTiming


@dataclass
class RunOutput:
    """One measured pass over a workload: per-request timings plus what the backend saw."""

    timings: list[RequestTiming]
    started: float
    ended: float
    extra: dict = field(default_factory=dict)  # backend-specific figures (peak memory, ...)


class Loaded:
    """A built-and-loaded model, ready to replay requests."""

    # A digest of the weights as loaded (bench.backends.hf.weights.weights_digest), equal in every process that
    # loaded the same weights; None where the backend holds no weights of its own (a server, an engine).
    weights_digest: str | None = None

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:  # pragma: no cover
        """Replay requests in batches of at most max_batch_size; options = the cell's options."""
        raise NotImplementedError

    def warmup(self, requests, max_batch_size: int, options: dict, passes: int) -> dict:
        """Run the unmeasured warm-up passes; return what they cost ({'warmup_pass_s': [...]}).

        Default: the first batch, `passes` times (module load, allocator growth, kernel choice).
        Backends whose compiled shapes depend on the batch (static cache + CUDA graphs) override it.
        """
        import time

        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            self.run(requests[:max_batch_size], max_batch_size, options)
            times.append(time.perf_counter() - t0)
        return {"warmup_pass_s": times}

    def engine_files(self) -> dict[str, bytes]:
        """Return the files of this build's engine an artifact carries, by path relative to the build's folder.

        Called after the warm-up (compiled and tuned by then); {} where the backend has nothing to
        carry (bench.backends.engine_artifact)."""
        return {}

    def tuned_kernels(self) -> dict | None:
        """Return {kernels, digest, ...} of the kernel configs this engine tuned (None: nothing tuned)."""
        return None

    def recover(self) -> None:
        """Free what a failed run (for example an out-of-memory) left behind."""

    def close(self) -> None:
        """Release the model and its device memory."""


class Backend:
    """The build/load steps of one backend; a runtime class also derives from its backend's config."""

    def build(self, key, engines_dir: Path):  # pragma: no cover - protocol
        """Build (or find already built) the artifact for `key`; return it."""
        raise NotImplementedError

    def load(self, artifact) -> Loaded:  # pragma: no cover - protocol
        raise NotImplementedError

    def install_engine(self, artifact: dict, files: dict[str, bytes]) -> None:
        """Put an engine artifact's files into the build's folder (artifact["folder"]) before `load`.

        A backend whose compiler keeps state elsewhere (torch's cache artifacts) overrides it."""
        folder = Path(artifact["folder"]).resolve()
        for rel, data in files.items():
            target = (folder / rel).resolve()
            if folder not in target.parents:
                raise ValueError(f"engine artifact file {rel!r} points outside the build folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
