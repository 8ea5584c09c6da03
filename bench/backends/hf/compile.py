"""Compile policy of the hf backend: the model's compile config, and the process-wide Inductor and dynamo settings.

Inductor's and dynamo's settings are global to a process. A worker process serves one build
key (the supervisor starts one per build group, docs/architecture.md), so `configure_process`
sets them once, for that key, and refuses to change them for another: the one-build-key-per-
process rule, held in code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path

from bench.backends.hf import inductor_recheck, kept_winners

# (build key hash, settings) this process was configured for; None until the first load.
_PROCESS: tuple[str, tuple] | None = None
# Each coordinate-descent tuning this process ran: {"kernel", "cache", "best_configs_beside", "configs_hash_stored"}.
_TUNED_HERE: list[dict] = []


def configure_compile(model, mode: str, cache: str) -> None:
    """Set the model's generation config for `mode`: CompileConfig for the decode step, or no compile.

    transformers compiles the decode step by itself whenever the cache is static on a GPU, so
    compile='off' must say so explicitly (disable_compile) to measure the eager static cache.
    """
    gc = model.generation_config
    if mode == "off":
        if cache == "static":
            gc.disable_compile = True
        return
    from transformers import CompileConfig

    gc.disable_compile = False
    # dynamic=False: shapes are fixed per cell (static cache length, warmed batch sizes), so each
    # graph is specialised; fullgraph=False tolerates a graph break rather than failing the cell.
    gc.compile_config = CompileConfig(fullgraph=False, dynamic=False, mode=mode)


def configure_process(key_hash: str, compile_mode: str, tuning: str, freeze: bool) -> None:
    """Set this worker process's Inductor and dynamo settings for its build key, once, before the first compile.

    coordinate-descent turns batch-1 matmuls into tuned reductions; freeze makes weights graph
    constants so matmuls sharing an input run as one, at the memory of concatenated copies
    (docs/guide/hf-backend.md: why, and what each measured). The recheck backport and the kept-winner
    rule (kept_winners: the engine folder's stored winners run instead of new tunings) are applied for
    every cell (torchao's quantisers turn coordinate descent on too). A second build key whose
    settings differ would compile under the first's: it is refused (AssertionError), since the
    supervisor never runs two build keys in one worker.
    """
    global _PROCESS
    settings = (tuning, freeze)
    first = _PROCESS is None
    if first:
        _PROCESS = (key_hash, settings)
    assert _PROCESS[1] == settings, (
        f"one build key per process: this process was configured for build key {_PROCESS[0]} "
        f"(tuning, freeze = {_PROCESS[1]}), not {key_hash} {settings}; Inductor's settings are process-wide"
    )
    import torch
    import torch._inductor.config as inductor

    if tuning == "coordinate-descent":
        inductor.coordinate_descent_tuning = True
    if freeze:
        inductor.freezing = True
    if compile_mode != "off":
        # One compiled graph per (batch, cache length); the default limit (8) would silently fall
        # back to eager in a batch-size sweep inside one worker.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    # pytorch/pytorch#173391 backported where torch lacks it (2.11 here); from torch 2.12 on apply() finds the fix
    # in torch's own source and changes nothing (bench.backends.hf.inductor_recheck).
    inductor_recheck.apply()
    _count_tunings()
    if first:  # the engine is installed and nothing compiled yet: what the folder holds is the build's winners
        kept_winners.snapshot()
    kept_winners.apply()  # outside the count: a kept winner is not a tuning


def _count_tunings() -> None:
    """Count (and log to the worker's log) every coordinate-descent tuning this process runs.

    A process that loaded an engine artifact, or a warm engine folder, should tune nothing: its
    kernels' winners are in the cache. When it tunes anyway its records say how many kernels and
    why Inductor did not take the cached winner (its autotune-cache state, whether a winner was
    stored beside the kernel and for the same candidate configs), instead of only a changed digest.
    """
    try:
        from torch._inductor.runtime import triton_heuristics as th
    except ImportError:
        return
    original = th.CachingAutotuner.coordinate_descent_tuning
    if getattr(original, "_bench_counts", False):
        return

    @functools.wraps(original)
    def counted(self, launcher, *args, **kwargs):
        if getattr(self, "_should_coordesc_tune", True):
            entry = _tuning_entry(self, th)
            _TUNED_HERE.append(entry)
            print(f"[bench] coordinate-descent tuning in this process: {json.dumps(entry, sort_keys=True)}",
                  file=sys.stderr, flush=True)
        return original(self, launcher, *args, **kwargs)

    counted._bench_counts = True
    th.CachingAutotuner.coordinate_descent_tuning = counted


def _tuning_entry(autotuner, th) -> dict:
    """Return what a tuned kernel's cache said: why the run tuned it rather than take a stored winner."""
    entry: dict = {"kernel": (getattr(autotuner, "inductor_meta", None) or {}).get("kernel_name")}
    try:
        entry["cache"] = (getattr(autotuner, "autotune_cache_info", None) or {}).get("autotune_cache_state")
        folder = os.path.dirname(autotuner.filename or "")
        stored = []
        for f in sorted(Path(folder).glob("*.best_config")) if folder else []:
            stored.append(json.loads(f.read_text()).get("configs_hash"))
        entry["best_configs_beside"] = len(stored)
        hash_configs = getattr(th, "hash_configs", None)
        if hash_configs is not None and stored:
            # The winner is stored under a hash of the candidate configs; a static-launcher load rechecks the cache
            # with the configs it compiled, which can differ from the candidates (then: a miss, and tuning again).
            if getattr(autotuner, "configs", None) is not None:  # None on kernels loaded for the static launcher (H200, torch 2.11)
                entry["configs_hash_stored"] = hash_configs(autotuner.configs) in stored
            compiled = [r.config for r in getattr(autotuner, "compile_results", None) or []]
            if compiled:
                entry["compiled_configs_hash_stored"] = hash_configs(compiled) in stored
                entry["compiled_configs"] = len(compiled)
    except Exception as exc:  # a diagnostic: it never stops the tuning it describes
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def inductor_settings() -> dict:
    """Return the Inductor settings this worker's compiles use (torchao's quantisers set some too)."""
    import torch._inductor.config as inductor

    tuning, static = bool(inductor.coordinate_descent_tuning), bool(getattr(inductor, "use_static_cuda_launcher", False))
    return {"coordinate_descent_tuning": tuning, "freezing": bool(inductor.freezing), "static_cuda_launcher": static,
            # True: a warm compile cache does not keep this cell's tuned kernels (see inductor_recheck)
            "retunes_each_process": tuning and static and inductor_recheck.recheck_skips_single_config_hits() and not inductor_recheck.applied(),
            # True: this torch lacked pytorch/pytorch#173391 and the worker applied it (inductor_recheck)
            "recheck_backported": inductor_recheck.applied(),
            # Kernels this process tuned by coordinate descent (0 where it ran stored winners), and why (_count_tunings)
            "tuned_in_process": len(_TUNED_HERE), "tuned_in_process_kernels": _TUNED_HERE[:32],
            # Kernels Inductor was about to tune again whose stored winner ran instead (kept_winners)
            "kept_in_process": len(kept_winners.kept()), "kept_in_process_kernels": kept_winners.kept()[:32],
            # Stored winner files written back after the warm-up, where Inductor had saved over a winner it ran
            "winner_files_restored": kept_winners.restored_files()}


def tuned_kernel_configs(folder: Path) -> dict:
    """Return how many Triton kernels of this engine have a tuned launch config, and a digest of those configs.

    Inductor writes each autotuned or coordinate-descent-tuned kernel's winner to a
    `<hash>.best_config` file in its cache (the engine folder). Two runs of one cell whose
    digests differ ran different kernel configs: int8wo's spread across processes
    (docs/guide/hf-backend.md) is what this makes visible. The time the tuning took is left out.
    """
    configs = []
    for f in sorted(Path(folder).rglob("*.best_config")) if Path(folder).is_dir() else []:
        try:
            cfg = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        cfg = {k: v for k, v in cfg.items() if k not in ("time_taken_ms", "triton_cache_hash")}
        configs.append((f.name, cfg))
    digest = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()[:16] if configs else None
    return {"kernels": len(configs), "coordinate_descent": sum(bool(c.get("found_by_coordesc")) for _, c in configs),
            "digest": digest}


# The artifact's member that holds torch.compiler.save_cache_artifacts()'s bytes.
TORCH_CACHE_ARTIFACTS = "torch/cache-artifacts.bin"


def engine_files(folder: Path) -> dict[str, bytes]:
    """Return what an engine artifact of this process's compiled cell carries, by path relative to its folder.

    - torch's own portable caches (`torch.compiler.save_cache_artifacts`, torch >= 2.6): the FX
      graphs (with their Triton kernels bundled), AOTAutograd entries, and the autotune entries
      this process recorded, including coordinate-descent winners saved while it ran.
    - every `*.best_config` file of the folder's Inductor cache: the tuned winners themselves, so
      they travel even where torch's recorder missed one (a cache hit it did not record, a torch
      without the API), and the loaded folder's `tuned_kernel_configs` digest is the artifact's.
    Call it after the warm-up: the winners are saved when a kernel first runs.
    """
    import torch

    files: dict[str, bytes] = {}
    save = getattr(getattr(torch, "compiler", None), "save_cache_artifacts", None)
    saved = save() if save is not None else None
    if saved:
        files[TORCH_CACHE_ARTIFACTS] = saved[0]
    for f in sorted((Path(folder) / "inductor").rglob("*.best_config")):
        files[str(f.relative_to(folder))] = f.read_bytes()
    return files
