"""A backport of pytorch/pytorch#173391 for torch releases without it (torch < 2.12).

Unnecessary from torch 2.12 on (read in the 2.12.0 and 2.13.0 wheels), whose
`CachingAutotuner.recheck_autotune_cache` keeps a cache hit for a kernel with one config:
`apply()` then detects the fixed source and changes nothing.
Delete this module once the oldest supported torch is 2.12.

Why it matters: coordinate-descent winners are saved per kernel in Inductor's cache (the build
key's folder), so every process of a key should run the first one's kernels; without the fix,
kernels loaded with the static CUDA launcher from the FX graph cache tune again in each process
(pytorch/pytorch#172819). Applied by bench.backends.hf.compile.configure_process, the one place
that sets process-wide compile state.
"""

from __future__ import annotations

import functools
import inspect

_APPLIED = False


def apply() -> bool:
    """Make this process run the tuned kernels its build key's cache holds; return whether torch needed the fix.

    Where the installed torch re-tunes in every process (recheck_skips_single_config_hits), its
    `CachingAutotuner.recheck_autotune_cache` is replaced, for this worker process only, by the
    fixed one of pytorch/pytorch#173391 (as in torch 2.12 and 2.13): a cache hit is kept for a kernel
    with one config too, and marked found by coordinate descent so the run does not tune again.
    """
    global _APPLIED
    if _APPLIED:
        return True
    if not recheck_skips_single_config_hits():
        return False
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    CachingAutotuner.recheck_autotune_cache = _recheck_autotune_cache
    _APPLIED = True
    return True


def _recheck_autotune_cache(self, reload_kernel_from_src) -> None:
    """torch 2.13's `CachingAutotuner.recheck_autotune_cache` (pytorch/pytorch#173391), for torch releases without it.

    On a static-launcher cache load, take the cached best config, whether the kernel had one
    config or several: reuse the compiled one that matches (marked as found by coordinate
    descent where it was, so `run` does not tune it again), or compile the cached one.
    """
    from torch._inductor.runtime import triton_heuristics as th

    assert self.is_statically_launchable()
    configs = [result.config for result in self.compile_results]
    cached_configs, _, autotune_cache_info = th.check_autotune_cache(configs, self.filename, self.inductor_meta)
    self.autotune_cache_info = autotune_cache_info
    if len(cached_configs) != 1:
        return  # no cache hit: run tunes as usual
    best_config = cached_configs[0]
    found_by_coordesc = getattr(best_config, "found_by_coordesc", False)
    best_hash = th.triton_config_to_hashable(best_config)
    for compile_result in self.compile_results:
        if th.triton_config_to_hashable(compile_result.config) == best_hash:
            compile_result.config.found_by_coordesc = found_by_coordesc
            self.compile_results = [compile_result]
            return
    # Found after the static autotuner was saved (coordinate descent): compile it now.
    with th.dynamo_timed("CachingAutotuner.slow_precompile_config"):
        if self.fn.fn is None:
            self.fn = reload_kernel_from_src().fn
        self.compile_results = [self._precompile_config(best_config)]


def recheck_skips_single_config_hits(source: str | None = None) -> bool:
    """Return whether this torch re-tunes coordinate-descent kernels in every process (reads the installed source).

    Coordinate-descent winners are saved per kernel in Inductor's cache (the build key's folder),
    so every process of a key should run the first one's kernels. In torch 2.11 (and every release
    whose `CachingAutotuner.recheck_autotune_cache` skips a cache hit for a kernel with one
    config: pytorch/pytorch#172819, fixed by #173391), kernels loaded with the static CUDA
    launcher from the FX graph cache ignore the saved winner and tune again, so each process
    may run different kernels (int8wo on the H200: 174.9, 166.8 and 248.8 tok/s in three
    processes, docs/measurements/2026-12-01-h200-int8wo-runs.md). source: the method's source, for tests.
    """
    source = _installed_recheck_source() if source is None else source
    return source is not None and "len(configs) > 1" in source


@functools.cache
def _installed_recheck_source() -> str | None:
    """Return the installed `CachingAutotuner.recheck_autotune_cache` source, read once per process (None: none)."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        return inspect.getsource(CachingAutotuner.recheck_autotune_cache)
    except (ImportError, AttributeError, OSError, TypeError):
        return None  # no such recheck (older torch), or no source to read: nothing to work around


def applied() -> bool:
    """Return whether this process runs with the backport (apply() found the installed torch unfixed)."""
    return _APPLIED
