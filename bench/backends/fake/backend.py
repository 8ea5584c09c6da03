"""Deterministic fake backend with a virtual clock, for tests of the runner, store and reports.

Time is computed, not slept: a batch costs prefill_ms_per_token x its prompt tokens, then each
decode step costs step_ms + step_ms_per_seq x batch size (so throughput grows with batch size
and saturates, as on a real device). A memory model (weights + KV bytes per token) raises an
out-of-memory when a batch's KV cache exceeds memory_gb (or the gpu_memory_gb cap, if lower);
`oom_flaky_band` makes sizes just under the limit fail on alternate runs. `fail` injects worker
failures, `short_rows` rows that come out one token short. `tuning_spread` simulates a tuned
build: the first load of a cold engine folder draws a speed factor and a tuned digest (seeded by
the build key, the tuning build and the folder's parent, so K cold builds draw K outcomes), keeps them in the
folder's tuned.json, and every later process of that folder, or of an artifact of it, runs them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path

from bench.backends.base import Backend, Loaded, RunOutput
from bench.backends.fake.config import (
    FakeConfig,
)
from bench.machine.memory_cap import cap_bytes
from bench.workloads.request import RequestTiming


class FakeBackend(FakeConfig, Backend):
    """The runtime of the fake backend; declarations in FakeConfig."""

    def build(self, key, engines_dir: Path) -> dict:
        fail = dict(key.options).get("fail")
        if fail == "build-oom":
            raise MemoryError("fake backend: out of memory while building")
        if fail == "build-hang":
            time.sleep(3600)
        folder = engines_dir / key.key_hash
        folder.mkdir(parents=True, exist_ok=True)
        return {"key": key.to_dict(), "folder": str(folder), "build_info": {"cold": True},
                "tuning_build": getattr(self, "tuning_build", None) or 0}

    def load(self, artifact: dict) -> FakeLoaded:
        return FakeLoaded(artifact["key"], Path(artifact["folder"]), artifact.get("tuning_build", 0))


class FakeLoaded(Loaded):
    def __init__(self, key: dict, folder: Path | None = None, tuning_build: int = 0):
        self.key = key
        self.folder = folder
        self.runs = 0
        # Which load of this build this process is: each worker process draws its own noise, as
        # real processes differ (reproducible: counted in the build folder, like the flaky band).
        self.process = self._count("loads") if folder is not None else 0
        self.tuned = self._tuned(tuning_build)

    def _tuned(self, tuning_build: int) -> dict | None:
        """Return this engine's simulated tuning outcome {factor, digest}: the folder's, or drawn now (a cold build)."""
        spread = float(dict(self.key.get("options") or {}).get("tuning_spread", 0.0) or 0.0)
        if not spread or self.folder is None:
            return None
        path = self.folder / "tuned.json"
        if path.is_file():
            return json.loads(path.read_text())
        # Every cold folder draws anew (its parent: a build's stamp, `build-k` of a tuning build, an artifact's digest).
        seed = f"{json.dumps(self.key, sort_keys=True)}:{tuning_build}:{self.folder.parent.name}"
        factor = random.Random(seed).uniform(1 - spread, 1 + spread)
        tuned = {"factor": factor, "digest": hashlib.sha256(f"{seed}:{factor}".encode()).hexdigest()[:16]}
        path.write_text(json.dumps(tuned))
        return tuned

    def tuned_kernels(self) -> dict | None:
        return dict(self.tuned) if self.tuned else None

    def engine_files(self) -> dict[str, bytes]:
        path = (self.folder or Path(".")) / "tuned.json"
        return {"tuned.json": path.read_bytes()} if path.is_file() else {}

    def _count(self, name: str) -> int:
        """Return how many times `name` was counted before in the build folder, and count this one.

        Kept in the build folder, so counts hold across worker processes."""
        path = (self.folder or Path(".")) / f"{name}.count"
        seen = int(path.read_text()) if path.is_file() else 0
        path.write_text(str(seen + 1))
        return seen

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        from bench.workloads.workload import batches

        opts = FakeBackend.normalize_options(options)
        fail = opts["fail"]
        if fail == "crash":
            os._exit(3)
        if fail == "sigkill":
            os.kill(os.getpid(), 9)
        if fail == "hang":
            time.sleep(3600)
        if fail == "error":
            raise RuntimeError("fake backend: injected error")
        if opts["wall_ms"]:
            time.sleep(opts["wall_ms"] / 1000)
        rng = random.Random((opts["seed"] * 1_000_003 + self.runs) * 7_919 + self.process)
        self.runs += 1
        k = opts["slowdown"] / (self.tuned["factor"] if self.tuned else 1.0)  # a faster tuning: shorter steps
        clock = 0.0
        timings = []
        peak = opts["weights_gb"] * 1e9
        # The device is memory_gb, or the emulated smaller device (gpu_memory_gb) if that is less.
        limit = opts["memory_gb"] * 1e9 or None
        cap = cap_bytes()
        if cap is not None:
            limit = cap if limit is None else min(limit, cap)
        flaky_from = limit * (1 - opts["oom_flaky_band"]) if limit else None
        for batch in batches(list(requests), max_batch_size):
            total_len = max(r.input_len for r in batch) + max(r.output_len for r in batch)
            need = opts["weights_gb"] * 1e9 + len(batch) * total_len * opts["kv_bytes_per_token"]
            peak = max(peak, need)
            # Flaky band: a batch just under the limit fails on every other run of this size
            # (parity of a per-size counter: reproducible, and both outcomes occur).
            flaky = False
            if flaky_from is not None and opts["oom_flaky_band"] and flaky_from < need <= limit:
                flaky = self._count(f"flaky-bs{len(batch)}") % 2 == 1
            if fail == "oom" or (limit and need > limit) or flaky:
                raise MemoryError(f"fake backend: out of memory (needs {need / 1e9:.2f} GB)")
            start = clock
            clock += k * opts["prefill_ms_per_token"] * sum(r.input_len for r in batch) / 1000
            steps = []
            for _ in range(max(r.output_len for r in batch)):
                step = opts["step_ms"] + opts["step_ms_per_seq"] * len(batch)
                step *= k * max(0.05, 1 + rng.gauss(0, opts["noise"])) if opts["noise"] else k
                clock += step / 1000
                steps.append(clock)
            for r in batch:
                produced = r.output_len - 1 if len(timings) < opts["short_rows"] else r.output_len
                times = steps[:produced]
                timings.append(RequestTiming(r.id, r.input_len, r.output_len, produced, start, times,
                                             times[-1] if times else start,
                                             output_ids=fake_ids(r.prompt_ids, produced, opts["diverge_at"])))
        extra = {"peak_memory_bytes": int(peak), "virtual_clock": True}
        if self.tuned:
            extra["tuned"] = dict(self.tuned)
        return RunOutput(timings, 0.0, clock, extra)


def fake_ids(prompt: tuple, n: int, diverge_at: int = -1) -> list[int]:
    """Return n generated ids that depend on the prompt alone (every cell agrees), shifted from diverge_at on."""
    seed = int(hashlib.sha256(repr(tuple(prompt)).encode()).hexdigest()[:8], 16)
    ids = [(seed + 7919 * k) % 50_000 for k in range(n)]
    if diverge_at >= 0:
        ids = [x if k < diverge_at else (x + 1) % 50_000 for k, x in enumerate(ids)]
    return ids
