"""Compile policy of the hf backend: the model's compile config, and the process-wide Inductor and dynamo settings.

Inductor's and dynamo's settings are global to a process. A worker process serves one build
key (the supervisor starts one per build group, docs/architecture.md), so `configure_process`
sets them once, for that key, and refuses to change them for another: the one-build-key-per-
process rule, held in code. Everything here goes through torch's settings and public API; the
patches of torch's private internals live in bench.backends.hf.torch_workarounds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# (build key hash, settings) this process was configured for; None until the first load.
_PROCESS: tuple[str, tuple] | None = None


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
    (docs/guide/hf-backend.md: why, and what each measured). A second build key whose settings
    differ would compile under the first's: it is refused (AssertionError), since the supervisor
    never runs two build keys in one worker. It patches nothing: a process that compiles installs
    bench.backends.hf.torch_workarounds after this.
    """
    global _PROCESS
    settings = (tuning, freeze)
    if _PROCESS is None:
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


def inductor_settings(workarounds=None) -> dict:
    """Return the Inductor settings this worker's compiles use (torchao's quantisers set some too), and what its
    patches of torch did (workarounds: the process's torch_workarounds.Workarounds; None: none installed)."""
    import torch._inductor.config as inductor

    from bench.backends.hf.torch_workarounds import (
        Workarounds,
        recheck_skips_single_config_hits,
    )

    workarounds = workarounds if workarounds is not None else Workarounds()
    tuning, static = bool(inductor.coordinate_descent_tuning), bool(getattr(inductor, "use_static_cuda_launcher", False))
    return {"coordinate_descent_tuning": tuning, "freezing": bool(inductor.freezing), "static_cuda_launcher": static,
            # True: a warm compile cache does not keep this cell's tuned kernels (torch_workarounds.RECHECK_BACKPORT)
            "retunes_each_process": (tuning and static and recheck_skips_single_config_hits()
                                     and not workarounds.recheck_backported),
            **workarounds.record()}


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
