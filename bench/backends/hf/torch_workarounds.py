"""Every patch of torch's private internals the harness makes, each gated to the torch versions that need it.

All three patch Inductor's `CachingAutotuner` (torch/_inductor/runtime/triton_heuristics.py), and only in a
worker process that compiles: the hf backend calls `install()` once from its load path when the cell's
compile option is not "off", after `configure_process` and before the first compile; an eager cell's
process patches nothing. Each `Patch` below says what it fixes, which upstream issue or fix
it cites, and the torch versions it applies to; one whose fix the installed torch has is not installed.
What a process installed, and what its patches saw and did, lives in its one `Workarounds` object, which
the records read (`extra.inductor`: `torch_workarounds`, `recheck_backported`, `tuned_in_process`,
`kept_in_process`, `winner_files_restored`).

Why they matter: a coordinate-descent winner is saved per kernel in Inductor's cache (the build key's
engine folder, which an engine artifact carries), so every process of a build key should run the first
one's kernels. Without these patches, processes of one key tuned again and ran different kernels
(docs/measurements/2026-12-01-h200-int8wo-runs.md, 2026-12-01-h200-artifact-same-machine.md);
docs/guide/hf-backend.md ("Tuned kernels and runs") tells what each patch changed there.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import sys
from pathlib import Path

# The newest torch these patches were read against (its source) and tested on. A patch without an upstream
# fix is installed up to this release and no further: a newer torch may have changed the internals it
# wraps, so someone checks it first and moves this line.
NEWEST_TESTED = (2, 13)


@dataclasses.dataclass(frozen=True)
class TorchVersion:
    """A torch version as the gates compare it: its release (major, minor, micro), and whether it is a build
    before that release (dev, alpha, beta, rc: a nightly of 2.12 is not 2.12.0)."""

    release: tuple[int, int, int]
    prerelease: bool = False

    @classmethod
    def parse(cls, text: str) -> TorchVersion:
        """Return the version of '2.11.0+cu130', '2.13.0+cpu', '2.9.1', '2.12.0.dev20260301+cu130', '2.11.0a0+nv25.03'.

        The local part (after '+': CUDA build, vendor) says nothing of which fixes the source has and is dropped.
        """
        m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?([^+]*)", text or "")
        if m is None:
            raise ValueError(f"not a torch version: {text!r}")
        major, minor, micro, rest = m.groups()
        prerelease = re.match(r"[.\-_]?(a|b|c|rc|alpha|beta|pre|preview|dev)", rest.lower()) is not None
        return cls((int(major), int(minor), int(micro or 0)), prerelease)

    @property
    def minor(self) -> tuple[int, int]:
        return self.release[:2]

    def before(self, release: tuple[int, ...]) -> bool:
        """Return whether this torch precedes `release` (a build before a release precedes it)."""
        release = tuple(release) + (0,) * (3 - len(release))
        return self.release < release or (self.release == release and self.prerelease)

    def __str__(self) -> str:
        return ".".join(map(str, self.release)) + (" (pre-release)" if self.prerelease else "")


@dataclasses.dataclass(frozen=True)
class Patch:
    """One patch of torch's internals: what it fixes, the upstream issue or fix it cites, the versions it applies to."""

    name: str
    fixes: str
    upstream: str
    # The oldest torch with the problem; None: every torch the package supports (2.9 on).
    first: tuple[int, int] | None = None
    # The first torch release with the upstream fix; None: no fix upstream, so up to NEWEST_TESTED.
    fixed_in: tuple[int, int, int] | None = None

    def why_not(self, version: TorchVersion) -> str | None:
        """Return why this patch is not for `version`, or None where it applies."""
        if self.first is not None and version.minor < self.first:
            return f"torch {version} predates the problem (from {_dotted(self.first)})"
        if self.fixed_in is not None and not version.before(self.fixed_in):
            return f"torch {version} has the fix (from {_dotted(self.fixed_in)})"
        if self.fixed_in is None and version.minor > NEWEST_TESTED:
            return (f"torch {version} is newer than the newest tested ({_dotted(NEWEST_TESTED)}) and there is no upstream "
                    "fix to gate on: check the patch against it, then move NEWEST_TESTED")
        return None

    @property
    def versions(self) -> str:
        """Return the torch versions this patch applies to, in words."""
        low = f"{_dotted(self.first)} <= " if self.first else ""
        if self.fixed_in is not None:
            return f"{low}torch < {_dotted(self.fixed_in)}"
        return f"{low}torch <= {_dotted(NEWEST_TESTED)}.x (newest tested)"


def _dotted(release) -> str:
    return ".".join(map(str, release))


RECHECK_BACKPORT = Patch(
    "recheck_backport",
    fixes="kernels the FX graph cache loads for the static CUDA launcher skip their stored coordinate-descent winner "
          "when they were compiled with one config, and tune again in every process "
          "(`CachingAutotuner.recheck_autotune_cache` is replaced by the fixed one)",
    upstream="pytorch/pytorch#172819, fixed by pytorch/pytorch#173391 (in torch 2.12.0's and 2.13.0's source; "
             "2.9.1's and 2.11's have the bug)",
    first=(2, 8),  # pytorch/pytorch#153565 added the recheck
    fixed_in=(2, 12, 0),
)
TUNING_COUNT = Patch(
    "tuning_count",
    fixes="a diagnostic, not a fix: counts and logs each coordinate-descent tuning the process runs, with what the "
          "kernel's autotune cache held, so a record says whether its kernels were tuned here and why "
          "(wraps `CachingAutotuner.coordinate_descent_tuning`)",
    upstream="no upstream equivalent as of torch 2.13: torch >= 2.12 counts coordinate-descent benchmarks "
             "(counters['inductor']['coordesc_tuning_bench']), not which kernels tuned or why their cache was not used",
)
KEPT_WINNERS = Patch(
    "kept_winners",
    fixes="a kernel whose coordinate-descent winner the engine folder held is tuned again: the winner comes back "
          "from a compile worker without its found_by_coordesc mark, or a reduction gets a second config and is "
          "re-benchmarked; the stored winner runs instead (wraps `CachingAutotuner.coordinate_descent_tuning`)",
    upstream="no upstream fix or issue found as of torch 2.13; the pickle path's cause is triton-lang/triton#6595 "
             "(`triton.Config.__setstate__` restores only Triton's own fields); the symptom is that of "
             "pytorch/pytorch#172819, on paths its fix does not touch",
)
# In installation order: the count wraps torch's tuner, the kept-winner rule wraps the count, so a kept winner is
# not counted as a tuning.
PATCHES = (RECHECK_BACKPORT, TUNING_COUNT, KEPT_WINNERS)


class Workarounds:
    """One process's patches of torch's Inductor: which were installed, which not and why, and what they did.

    torch_version: the version the gates read (default: the installed torch's; tests fake it). patches: which
    of PATCHES to consider (tests install one alone).
    """

    def __init__(self, torch_version: str | None = None, patches: tuple[Patch, ...] = PATCHES):
        self.torch_version = torch_version
        self.patches = tuple(patches)
        self.installed: list[str] = []
        self.not_installed: dict[str, str] = {}
        self._done = False
        # tuning_count: one entry per coordinate-descent tuning this process ran: {"kernel", "cache", ...}.
        self.tuned: list[dict] = []
        # kept_winners: best_config path -> (its bytes, its parsed entry) as the engine folder held them at install;
        # the kernels whose stored winner ran instead of a tuning; stored files written back after the warm-up.
        self.stored: dict[str, tuple[bytes, dict]] = {}
        self.kept: list[dict] = []
        self.restored_files = 0

    @property
    def recheck_backported(self) -> bool:
        return RECHECK_BACKPORT.name in self.installed

    def install(self, cache_dir: str | os.PathLike | None = None) -> Workarounds:
        """Install each patch the torch version needs, once; return self.

        cache_dir: Inductor's cache folder, whose coordinate-descent winners kept_winners snapshots (default:
        `$TORCHINDUCTOR_CACHE_DIR`, where the hf backend's build points it at the build key's folder).
        """
        if self._done:
            return self
        self._done = True
        import torch

        version = TorchVersion.parse(self.torch_version or torch.__version__)
        try:
            from torch._inductor.runtime import triton_heuristics as th
        except ImportError as exc:  # nothing to patch
            self.not_installed = {p.name: f"no Inductor runtime ({exc})" for p in self.patches}
            return self
        for patch in self.patches:
            why = patch.why_not(version)
            if why is None:
                why = getattr(self, f"_install_{patch.name}")(th, cache_dir)
            if why is None:
                self.installed.append(patch.name)
            else:
                self.not_installed[patch.name] = why
        print(f"[bench] torch {version}: patches of torch's internals installed: {', '.join(self.installed) or 'none'}"
              + "".join(f"; {name} not: {why}" for name, why in self.not_installed.items())
              + " (bench/backends/hf/torch_workarounds.py)", file=sys.stderr, flush=True)
        return self

    def record(self) -> dict:
        """Return what the records say of this process's patches (`extra.inductor`)."""
        counted = TUNING_COUNT.name in self.installed
        return {"torch_workarounds": list(self.installed),
                # True: this torch lacked pytorch/pytorch#173391 and the worker applied it
                "recheck_backported": self.recheck_backported,
                # Kernels this process tuned by coordinate descent (0 where it ran stored winners), and why; None: not counted
                "tuned_in_process": len(self.tuned) if counted else None, "tuned_in_process_kernels": self.tuned[:32],
                # Kernels Inductor was about to tune again whose stored winner ran instead
                "kept_in_process": len(self.kept), "kept_in_process_kernels": self.kept[:32],
                # Stored winner files written back after the warm-up, where Inductor had saved over a winner it ran
                "winner_files_restored": self.restored_files}

    # --- recheck_backport -------------------------------------------------------------------------

    def _install_recheck_backport(self, th, cache_dir) -> str | None:
        if not recheck_skips_single_config_hits():  # a build with the fix cherry-picked (a vendor's, a nightly)
            return "this torch's recheck_autotune_cache keeps single-config hits (the fix, read in its source)"
        th.CachingAutotuner.recheck_autotune_cache = _recheck_autotune_cache
        return None

    # --- tuning_count -----------------------------------------------------------------------------

    def _install_tuning_count(self, th, cache_dir) -> str | None:
        original = th.CachingAutotuner.coordinate_descent_tuning
        if _wraps(original, TUNING_COUNT.name):
            return "already installed in this process"

        @functools.wraps(original)
        def counted(autotuner, launcher, *args, **kwargs):
            if getattr(autotuner, "_should_coordesc_tune", True):
                entry = _tuning_entry(autotuner, th)
                self.tuned.append(entry)
                print(f"[bench] coordinate-descent tuning in this process: {json.dumps(entry, sort_keys=True)}",
                      file=sys.stderr, flush=True)
            return original(autotuner, launcher, *args, **kwargs)

        counted._bench_workaround = TUNING_COUNT.name
        th.CachingAutotuner.coordinate_descent_tuning = counted
        return None

    # --- kept_winners -----------------------------------------------------------------------------

    def _install_kept_winners(self, th, cache_dir) -> str | None:
        original = th.CachingAutotuner.coordinate_descent_tuning
        if _wraps(original, KEPT_WINNERS.name):
            return "already installed in this process"
        self.snapshot(cache_dir)

        @functools.wraps(original)
        def coordinate_descent_tuning(autotuner, launcher, *args, **kwargs):
            kept = self._kept_launcher(autotuner, launcher)
            if kept is None:
                return original(autotuner, launcher, *args, **kwargs)
            return kept

        coordinate_descent_tuning._bench_workaround = KEPT_WINNERS.name
        th.CachingAutotuner.coordinate_descent_tuning = coordinate_descent_tuning
        return None

    def snapshot(self, cache_dir: str | os.PathLike | None = None) -> int:
        """Read every coordinate-descent winner under this process's Inductor cache; return how many.

        Taken at install, once the engine is installed and before the first compile: later, Inductor itself
        may overwrite a winner (a reduction's re-benchmark), and the snapshot is what the folder held, so what
        the artifact carried.
        """
        self.stored.clear()
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
                self.stored[os.path.realpath(f)] = (raw, entry)
        return len(self.stored)

    def restore_overwritten(self) -> int:
        """Write back every stored winner Inductor saved over while it ran it; return how many files.

        Call it after the warm-up. A reduction whose re-benchmark picks the stored winner itself runs it marked
        (no tuning, so the rule never sees it) but `autotune_to_one_config` has saved it again, unmarked and under
        this process's candidate-set hash: the same kernel config, a different file, so the folder's tuned digest
        would differ from the artifact's although the kernels are its own (H200, 2026-12-01: 4 of 17 int8wo files
        in each of two processes that tuned nothing). Every other path to a different kernel goes through the rule.
        """
        restored = 0
        for path, (raw, _) in self.stored.items():
            try:
                restored += _restore(path, raw)
            except OSError as exc:
                print(f"[bench] stored winner {path} not written back ({exc})", file=sys.stderr, flush=True)
        self.restored_files += restored
        if restored:
            print(f"[bench] {restored} stored winner file(s) Inductor saved over while running them were written back",
                  file=sys.stderr, flush=True)
        return restored

    def _kept_launcher(self, autotuner, launcher):
        """Return a launcher of the kernel's stored winner, or None to let Inductor tune (no winner was stored)."""
        if not getattr(autotuner, "_should_coordesc_tune", True):
            return None  # torch decides not to tune this kernel: its own call returns what it runs
        try:
            path = winner_path(autotuner)
            stored = self.stored.get(path) if path else None
            if stored is None:
                return None
            raw, entry = stored
            winner = _winner_config(entry, autotuner)
            if winner is None:
                return None
            from torch._inductor.runtime.triton_heuristics import (
                triton_config_to_hashable,
            )

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
        self.kept.append(note)
        print(f"[bench] kept the stored coordinate-descent winner: {json.dumps(note, sort_keys=True)}",
              file=sys.stderr, flush=True)
        return kept_launcher


# The Workarounds this process installed: torch's classes are patched process-wide, so their patches' state is too.
_PROCESS: Workarounds | None = None


def install() -> Workarounds:
    """Install the patches the installed torch needs into this process, once; return the process's Workarounds.

    Called by the hf backend's load path for a cell that compiles, once the engine folder is in place and before
    the first compile (kept_winners snapshots the folder's winners then). A later call returns the same object:
    one build key per process, so one snapshot.
    """
    global _PROCESS
    if _PROCESS is None:
        _PROCESS = Workarounds().install()
    return _PROCESS


def _wraps(function, name: str) -> bool:
    """Return whether `function` is, or wraps, this module's patch `name` (a second install must not wrap twice)."""
    while function is not None:
        if getattr(function, "_bench_workaround", None) == name:
            return True
        function = getattr(function, "__wrapped__", None)
    return False


# --- recheck_backport: pytorch/pytorch#173391 ---------------------------------------------------------------------


def _recheck_autotune_cache(self, reload_kernel_from_src) -> None:
    """torch 2.13's `CachingAutotuner.recheck_autotune_cache` (pytorch/pytorch#173391), for torch releases without it.

    On a static-launcher cache load, take the cached best config, whether the kernel had one config or several:
    reuse the compiled one that matches (marked as found by coordinate descent where it was, so `run` does not
    tune it again), or compile the cached one.
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

    In torch 2.9.1 and 2.11 (every release whose `CachingAutotuner.recheck_autotune_cache` skips a cache hit for a
    kernel with one config: pytorch/pytorch#172819), kernels loaded with the static CUDA launcher from the FX graph
    cache ignore the saved winner and tune again. source: the method's source, for tests.
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


# --- tuning_count ------------------------------------------------------------------------------------------------


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


# --- kept_winners ------------------------------------------------------------------------------------------------
# Two paths lose a stored winner, read from torch 2.11.0 (`async_compile.py` `AsyncCompile.triton`,
# `runtime/triton_heuristics.py`) and Triton 3.6.0 (`runtime/autotuner.py`); `CachingAutotuner.run` tunes only a
# launcher whose config lacks the `found_by_coordesc` mark:
# - A kernel that is not in the FX graph cache's static bundle is compiled in Inductor's worker processes, which
#   read the cache hit (a `Config` marked `found_by_coordesc`) and pickle the compiled kernel back;
#   `triton.Config.__setstate__` restores only Triton's own fields, so the parent runs the winner unmarked and
#   tunes it again, from the winner.
# - A reduction kernel gets a second config (`_dynamic_scale_rblock`: the winner needs too many registers for full
#   occupancy), so `run` first benchmarks the two (`autotune_to_one_config`), saves the faster one over the stored
#   winner (torch 2.11 without the mark), and tunes again from it.
# Each tuning re-measures candidates on this machine, so the process may pick other kernels than the artifact's.
# The rule: where the folder held a winner for this kernel's source at install, run it (the launcher itself when
# it already is that config, else the winner compiled here), restore the stored file if something overwrote it,
# and tune only kernels the folder held no winner for. No torch release checked (2.11, 2.12, 2.13) keeps the
# winner on both paths.


def winner_path(autotuner) -> str | None:
    """Return where Inductor keeps this kernel's winner (its local autotune cache file), or None."""
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    if not getattr(autotuner, "filename", None):
        return None
    cache = AutotuneCache.create(autotuner.inductor_meta, autotuner.filename, "")
    local = getattr(cache, "local_cache", None) if cache is not None else None
    return os.path.realpath(local[1]) if local else None


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
    elif getattr(autotuner.fn, "fn", True) is None:  # torch 2.9-2.12: what _coordinate_descent_tuning does
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
