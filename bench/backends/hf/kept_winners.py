"""Every process of a build key runs the coordinate-descent winners its engine folder held when it started.

A tuned cell's kernels are the winners Inductor stores beside each kernel (`<hash>.best_config`,
`found_by_coordesc: true`) in the build key's folder, which an engine artifact carries to the next
machine. Inductor means to reuse them (`CachingAutotuner.run` tunes only a launcher whose config
lacks the `found_by_coordesc` mark), but with torch 2.11 and Triton 3.6 a loaded process tuned
some of them again anyway (H200, 2026-12-01: 3 of 17 int8wo kernels in a process that had just
installed the artifact on the machine that built it, each logged as an autotune-cache "hit";
docs/measurements/2026-12-01-h200-artifact-same-machine.md). Two paths lose a stored winner,
read from the installed sources (torch 2.11.0 `torch/_inductor/async_compile.py`
`AsyncCompile.triton`, `runtime/triton_heuristics.py`; Triton 3.6.0 `runtime/autotuner.py`):

- The mark does not survive a pickle. A kernel that is not in the FX graph cache's static
  bundle is compiled in Inductor's worker processes, which read the cache hit (a `Config`
  marked `found_by_coordesc`) and pickle the compiled kernel back; `triton.Config.__setstate__`
  restores only Triton's own fields, so the parent's launcher runs the winner unmarked and
  `run` tunes it again, from the winner.
- A reduction kernel gets a second config (`_dynamic_scale_rblock`: the winner needs too many
  registers for full occupancy), so `run` first benchmarks the two (`autotune_to_one_config`),
  saves the faster one over the stored winner (torch 2.11 without the mark), and tunes again
  from it.

Each tuning re-measures candidates on this machine, so the process may pick other kernels than
the artifact's: the tuning lottery the artifact is meant to end. `apply()` puts one rule in front
of `CachingAutotuner.coordinate_descent_tuning`: where the folder held a coordinate-descent winner
for this kernel's source when the process configured itself (`snapshot`), run that winner (the
launcher itself when it already is that config, else the winner compiled here), restore the
stored file if something overwrote it, and tune only kernels the folder held no winner for. It
is a rule of the harness, not a backport: no torch release checked (2.11, 2.12, 2.13) keeps the winner
on both paths. Applied by bench.backends.hf.compile.configure_process.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

# best_config path -> (its bytes, its parsed entry) as the engine folder held them at snapshot time.
_STORED: dict[str, tuple[bytes, dict]] = {}
# One entry per kernel whose stored winner this process ran instead of tuning: {"kernel", "how", "file_restored"}.
_KEPT: list[dict] = []
# Stored winner files written back after the warm-up (restore_overwritten), summed over the process.
_RESTORED_FILES = 0


def snapshot(cache_dir: str | os.PathLike | None = None) -> int:
    """Read every coordinate-descent winner under this process's Inductor cache; return how many.

    Call it once the engine is installed and before the first compile: later, Inductor itself
    may overwrite a winner (a reduction's re-benchmark), and the snapshot is what the folder
    held, so what the artifact carried. cache_dir: Inductor's cache folder (default:
    `$TORCHINDUCTOR_CACHE_DIR`, where the hf backend points it at the build key's folder).
    """
    _STORED.clear()
    folder = cache_dir or os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not folder or not Path(folder).is_dir():
        return 0
    for f in Path(folder).rglob("*.best_config"):
        try:
            raw = f.read_bytes()
            entry = json.loads(raw)
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and entry.get("found_by_coordesc"):
            _STORED[os.path.realpath(f)] = (raw, entry)
    return len(_STORED)


def apply() -> None:
    """Run stored winners instead of tuning them again, in this process (idempotent)."""
    try:
        from torch._inductor.runtime import triton_heuristics as th
    except ImportError:
        return
    original = th.CachingAutotuner.coordinate_descent_tuning
    if getattr(original, "_bench_keeps_winners", False):
        return

    @functools.wraps(original)
    def coordinate_descent_tuning(self, launcher, *args, **kwargs):
        kept = _kept_launcher(self, launcher)
        if kept is None:
            return original(self, launcher, *args, **kwargs)
        return kept

    coordinate_descent_tuning._bench_keeps_winners = True
    th.CachingAutotuner.coordinate_descent_tuning = coordinate_descent_tuning


def restore_overwritten() -> int:
    """Write back every stored winner Inductor saved over while it ran it; return how many files.

    Call it after the warm-up. A reduction whose re-benchmark picks the stored winner itself runs
    it marked (no tuning, so the rule above never sees it) but `autotune_to_one_config` has saved
    it again, unmarked and under this process's candidate-set hash: the same kernel config, a
    different file, so the folder's tuned digest would differ from the artifact's although the
    kernels are its own (H200, 2026-12-01: 4 of 17 int8wo files in each of two processes that
    tuned nothing). Every other path to a different kernel goes through the rule above.
    """
    global _RESTORED_FILES
    restored = 0
    for path, (raw, _) in _STORED.items():
        try:
            restored += _restore(path, raw)
        except OSError as exc:
            print(f"[bench] stored winner {path} not written back ({exc})", file=sys.stderr, flush=True)
    _RESTORED_FILES += restored
    if restored:
        print(f"[bench] {restored} stored winner file(s) Inductor saved over while running them were written back",
              file=sys.stderr, flush=True)
    return restored


def restored_files() -> int:
    """Return how many stored winner files this process wrote back after Inductor saved over them."""
    return _RESTORED_FILES


def kept() -> list[dict]:
    """Return the kernels whose stored winner this process ran instead of tuning them."""
    return list(_KEPT)


def winner_path(autotuner) -> str | None:
    """Return where Inductor keeps this kernel's winner (its local autotune cache file), or None."""
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    if not getattr(autotuner, "filename", None):
        return None
    cache = AutotuneCache.create(autotuner.inductor_meta, autotuner.filename, "")
    local = getattr(cache, "local_cache", None) if cache is not None else None
    return os.path.realpath(local[1]) if local else None


def _kept_launcher(autotuner, launcher):
    """Return a launcher of the kernel's stored winner, or None to let Inductor tune (no winner was stored)."""
    if not getattr(autotuner, "_should_coordesc_tune", True):
        return None  # torch decides not to tune this kernel: its own call returns what it runs
    try:
        path = winner_path(autotuner)
        stored = _STORED.get(path) if path else None
        if stored is None:
            return None
        raw, entry = stored
        winner = _winner_config(entry, autotuner)
        if winner is None:
            return None
        from torch._inductor.runtime.triton_heuristics import triton_config_to_hashable

        if triton_config_to_hashable(launcher.config) == triton_config_to_hashable(winner):
            launcher.config.found_by_coordesc = True  # the winner itself, its mark lost on the way
            kept_launcher, how = launcher, "mark restored"
        else:
            with autotuner.lock:
                _load_kernel_function(autotuner)
                kept_launcher = autotuner._precompile_config(winner).make_launcher()
            kept_launcher.config.found_by_coordesc = True
            how = "compiled the stored winner"
        restored = _restore(path, raw)
    except Exception as exc:  # never worse than Inductor alone: it tunes as it would have
        print(f"[bench] stored winner not used ({type(exc).__name__}: {exc}); Inductor tunes this kernel",
              file=sys.stderr, flush=True)
        return None
    note = {"kernel": (autotuner.inductor_meta or {}).get("kernel_name"), "how": how, "file_restored": restored}
    _KEPT.append(note)
    print(f"[bench] kept the stored coordinate-descent winner: {json.dumps(note, sort_keys=True)}",
          file=sys.stderr, flush=True)
    return kept_launcher


def _winner_config(entry: dict, autotuner):
    """Return the stored winner as a triton Config marked found_by_coordesc, through Inductor's own reader."""
    from torch._inductor.runtime.autotune_cache import _load_cached_autotuning

    meta = {**(autotuner.inductor_meta or {}), "coordinate_descent_tuning": True}
    # Its own candidate-set hash: the winner belongs to this kernel source whatever set it was tuned from.
    cfg = _load_cached_autotuning(dict(entry), entry.get("configs_hash"), [], meta)
    return cfg if cfg is not None and getattr(cfg, "found_by_coordesc", False) else None


def _load_kernel_function(autotuner) -> None:
    """Load the kernel's Triton function in this process where a compile worker dropped it (as tuning would)."""
    ensure = getattr(autotuner, "_ensure_kernel_loaded", None)  # torch 2.13 (not 2.11 or 2.12)
    if ensure is not None:
        ensure()
    elif getattr(autotuner.fn, "fn", True) is None:  # torch 2.11/2.12: what _coordinate_descent_tuning does
        autotuner.fn = autotuner._reload_kernel().fn


def _restore(path: str, raw: bytes) -> bool:
    """Write the stored winner back where Inductor replaced it (its re-benchmark saves over it); return whether."""
    try:
        if Path(path).read_bytes() == raw:
            return False
    except OSError:
        pass
    Path(path).write_bytes(raw)
    return True
