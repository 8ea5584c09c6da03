"""bench.backends.hf.torch_workarounds: every patch of torch's private internals, gated to the versions that need it.

The gates (a torch version against each patch's first affected release, its fix, the newest tested torch), the
install (a compiling cell's process gets exactly the gated patches, an eager cell's none), and each patch's
behaviour: the recheck backport (pytorch/pytorch#173391), the tuning count, and the kept-winner rule (a process of
a build key runs the coordinate-descent winners its engine folder held, instead of tuning them again).

Inductor's own classes and cache reader (`AutotuneCache`, `_load_cached_autotuning`,
`triton_config_to_hashable`) run as installed; only what needs a GPU is a stand-in: Triton's
`Config` (this machine has no Triton; the stand-in pickles as Triton 3.6.0's does) and the
compile of a launcher.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from bench.backends.hf import compile as hf_compile
from bench.backends.hf import torch_workarounds as tw
from bench.backends.hf.torch_workarounds import (
    KEPT_WINNERS,
    PATCHES,
    RECHECK_BACKPORT,
    TUNING_COUNT,
    TorchVersion,
    Workarounds,
)

# --- the version gates -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, release, prerelease", [
    ("2.11.0+cu130", (2, 11, 0), False),   # the GPU machine's
    ("2.9.1", (2, 9, 1), False),           # TensorRT-LLM 1.2's
    ("2.13.0+cpu", (2, 13, 0), False),     # a fresh install's
    ("2.12.0.dev20260301+cu130", (2, 12, 0), True),  # a nightly precedes its release
    ("2.11.0a0+nv25.03", (2, 11, 0), True),           # a vendor build (NGC)
    ("2.10.0rc3", (2, 10, 0), True),
    ("2.10.0.post1", (2, 10, 0), False),
    ("2.14", (2, 14, 0), False),
])
def test_torch_versions_are_read_with_local_and_pre_release_parts(text, release, prerelease):
    version = TorchVersion.parse(text)
    assert (version.release, version.prerelease) == (release, prerelease)
    assert version.before((2, 12, 0)) is (release < (2, 12, 0) or (release == (2, 12, 0) and prerelease))
    with pytest.raises(ValueError):
        TorchVersion.parse("unknown")


@pytest.mark.parametrize("torch_version, applies", [
    ("2.9.1", {"recheck_backport", "tuning_count", "kept_winners"}),
    ("2.11.0+cu130", {"recheck_backport", "tuning_count", "kept_winners"}),
    ("2.12.0.dev20260301+cpu", {"recheck_backport", "tuning_count", "kept_winners"}),  # the source decides (below)
    ("2.12.0", {"tuning_count", "kept_winners"}),
    ("2.13.0+cpu", {"tuning_count", "kept_winners"}),
    ("2.13.2", {"tuning_count", "kept_winners"}),
    ("2.14.0.dev20261101", set()),  # past the newest tested: no fix to gate on, so not installed unchecked
    ("2.7.1", {"tuning_count", "kept_winners"}),  # no recheck to backport before 2.8
])
def test_each_patch_applies_to_the_versions_it_names(torch_version, applies):
    version = TorchVersion.parse(torch_version)
    assert {p.name for p in PATCHES if p.why_not(version) is None} == applies
    assert RECHECK_BACKPORT.versions == "2.8 <= torch < 2.12.0"
    assert KEPT_WINNERS.versions == TUNING_COUNT.versions == "torch <= 2.13.x (newest tested)"
    for patch in PATCHES:  # each cites what it works around
        assert "pytorch/pytorch#" in patch.upstream or "no upstream" in patch.upstream
    assert "no upstream fix" in KEPT_WINNERS.upstream and "2.13" in KEPT_WINNERS.upstream


@pytest.fixture
def autotuner(monkeypatch):
    """CachingAutotuner as installed; whatever a test patches is put back after it."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    for name in ("recheck_autotune_cache", "coordinate_descent_tuning"):
        monkeypatch.setattr(CachingAutotuner, name, getattr(CachingAutotuner, name))
    monkeypatch.setattr(tw, "_PROCESS", None)  # a fresh worker process
    return CachingAutotuner


def test_a_patch_whose_fix_the_installed_torch_has_is_not_installed(autotuner, monkeypatch):
    """The gate, with the version faked: the same torch source is patched as 2.11 and left alone as 2.12."""
    monkeypatch.setattr(tw, "recheck_skips_single_config_hits", lambda source=None: True)  # 2.11's source
    installed = autotuner.recheck_autotune_cache
    fixed = Workarounds("2.12.0+cu130", patches=(RECHECK_BACKPORT,)).install()
    assert fixed.installed == [] and "has the fix (from 2.12.0)" in fixed.not_installed["recheck_backport"]
    assert autotuner.recheck_autotune_cache is installed
    # A fix dated to the installed torch's own release (2.13 here) is not installed either.
    import torch

    here = TorchVersion.parse(torch.__version__).release
    dated_here = Workarounds(patches=(dataclasses.replace(RECHECK_BACKPORT, fixed_in=here),)).install()
    assert dated_here.installed == [] and autotuner.recheck_autotune_cache is installed
    unfixed = Workarounds("2.11.0+cu130", patches=(RECHECK_BACKPORT,)).install()
    assert unfixed.installed == ["recheck_backport"] and unfixed.recheck_backported
    assert autotuner.recheck_autotune_cache is tw._recheck_autotune_cache


def test_no_patch_without_an_upstream_fix_is_installed_past_the_newest_tested_torch(autotuner):
    wrapped = autotuner.coordinate_descent_tuning
    newer = Workarounds("2.14.0+cu130").install()
    assert newer.installed == [] and set(newer.not_installed) == {p.name for p in PATCHES}
    assert "newer than the newest tested (2.13)" in newer.not_installed["kept_winners"]
    assert autotuner.coordinate_descent_tuning is wrapped
    # Not counted is not zero: the record says the count did not run.
    assert newer.record()["tuned_in_process"] is None and newer.record()["torch_workarounds"] == []


def test_the_backport_is_left_out_where_the_source_has_the_fix_whatever_the_version(autotuner, monkeypatch):
    """A nightly or a vendor build of a version before 2.12 may carry the fix: its source says so."""
    monkeypatch.setattr(tw, "recheck_skips_single_config_hits", lambda source=None: False)
    nightly = Workarounds("2.12.0.dev20260301+cu130", patches=(RECHECK_BACKPORT,)).install()
    assert nightly.installed == [] and "read in its source" in nightly.not_installed["recheck_backport"]


def test_a_process_installs_once_and_never_wraps_twice(autotuner, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    first = tw.install()
    wrapped = autotuner.coordinate_descent_tuning
    assert tw.install() is first and first.install() is first
    assert autotuner.coordinate_descent_tuning is wrapped
    other = Workarounds().install()  # another object in the same process: torch's class is already patched
    assert other.installed == [] and autotuner.coordinate_descent_tuning is wrapped
    assert set(other.not_installed.values()) >= {"already installed in this process"}


def _loaded(tmp_path, compile_mode):
    from bench.backends.hf.backend import HFBackend
    from bench.spec.cells import BuildKey

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu",
                   (("attn_implementation", "sdpa"), ("cache", "static"), ("compile", compile_mode)))
    backend = HFBackend()
    return backend.load(backend.build(key, tmp_path / compile_mode))


@pytest.mark.slow
def test_an_eager_cell_patches_nothing_and_a_compiling_cell_exactly_the_gated_patches(autotuner, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(hf_compile, "_PROCESS", None)
    before = dict(vars(autotuner))
    eager = _loaded(tmp_path, "off")
    assert eager.workarounds is None and tw._PROCESS is None
    assert dict(vars(autotuner)) == before  # CachingAutotuner untouched
    eager.close()

    compiled = _loaded(tmp_path, "default")
    version = TorchVersion.parse(torch.__version__)
    expected = [p.name for p in PATCHES if p.why_not(version) is None
                and (p is not RECHECK_BACKPORT or tw.recheck_skips_single_config_hits())]
    assert compiled.workarounds is tw._PROCESS and compiled.workarounds.installed == expected
    if version.minor == (2, 13):
        assert expected == ["tuning_count", "kept_winners"]  # fixed upstream in 2.12: no backport
    changed = {name for name in set(before) | set(vars(autotuner)) if vars(autotuner).get(name) is not before.get(name)}
    assert changed == ({"coordinate_descent_tuning"} if expected else set()) | (
        {"recheck_autotune_cache"} if "recheck_backport" in expected else set())
    settings = hf_compile.inductor_settings(compiled.workarounds)
    assert settings["torch_workarounds"] == expected and settings["tuned_in_process"] == 0
    compiled.close()


# --- recheck_backport: pytorch/pytorch#173391 ------------------------------------------------------------------


# CachingAutotuner.recheck_autotune_cache's hit test, before and after pytorch/pytorch#173391.
RECHECK_2_11 = """
        # I.e. there was an autotune cache hit
        if len(cached_configs) == 1 and len(configs) > 1:
            best_config = cached_configs[0]
"""
RECHECK_FIXED = """
        # I.e. there was an autotune cache hit
        if len(cached_configs) == 1:
            best_config = cached_configs[0]
            found_by_coordesc = getattr(best_config, "found_by_coordesc", False)
"""


def test_recheck_bug_is_read_from_the_installed_source():
    assert tw.recheck_skips_single_config_hits(RECHECK_2_11) is True
    assert tw.recheck_skips_single_config_hits(RECHECK_FIXED) is False
    import torch

    installed = tw.recheck_skips_single_config_hits()  # this machine's torch
    if torch.__version__.startswith("2.11."):
        assert installed is True
    elif tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13):
        assert installed is False


@pytest.mark.parametrize("buggy, tuning, static, retunes", [
    (True, True, True, True),      # torch 2.11, coordinate descent: each process tunes its own kernels
    (True, False, True, False),    # nothing tuned at run time
    (True, True, False, False),    # without the static launcher the autotune cache is read
    (False, True, True, False),    # a fixed torch
])
def test_inductor_settings_say_whether_each_process_retunes(monkeypatch, buggy, tuning, static, retunes):
    import torch._inductor.config as inductor

    monkeypatch.setattr(tw, "recheck_skips_single_config_hits", lambda source=None: buggy)
    with inductor.patch(coordinate_descent_tuning=tuning, use_static_cuda_launcher=static):
        settings = hf_compile.inductor_settings()
    assert settings["retunes_each_process"] is retunes and settings["static_cuda_launcher"] is static


@pytest.mark.parametrize("buggy", [True, False])
def test_the_backport_is_installed_only_where_the_torch_source_lacks_the_fix(autotuner, monkeypatch, buggy):
    import torch._inductor.config as inductor

    monkeypatch.setattr(tw, "recheck_skips_single_config_hits", lambda source=None: buggy)
    workarounds = Workarounds("2.11.0+cu130", patches=(RECHECK_BACKPORT,)).install()
    assert workarounds.recheck_backported is buggy
    assert (autotuner.recheck_autotune_cache is tw._recheck_autotune_cache) is buggy
    with inductor.patch(coordinate_descent_tuning=True, use_static_cuda_launcher=True):
        settings = hf_compile.inductor_settings(workarounds)
    # Patched, the process keeps the cache's winners: the record must not say it re-tunes.
    assert settings["recheck_backported"] is buggy and settings["retunes_each_process"] is False
    assert settings["torch_workarounds"] == (["recheck_backport"] if buggy else [])


class _Config:  # the fields triton_config_to_hashable reads from a triton.Config
    def __init__(self, block, coordesc=False):
        self.kwargs, self.num_warps, self.num_stages = {"XBLOCK": block}, 4, 1
        if coordesc:
            self.found_by_coordesc = True


class _Autotuner:  # a statically launchable CachingAutotuner as the FX graph cache loads it
    def __init__(self, *blocks):
        self.compile_results = [type("CompileResult", (), {"config": _Config(b)})() for b in blocks]
        self.filename, self.inductor_meta, self.fn = "k.py", {"coordinate_descent_tuning": True}, type("F", (), {"fn": None})()
        self.compiled = []

    def is_statically_launchable(self):
        return True

    def _precompile_config(self, cfg):
        self.compiled.append(cfg)
        return type("CompileResult", (), {"config": cfg})()


@pytest.mark.parametrize("blocks, cached, kept_block, compiled", [
    ((128,), 128, 128, False),       # torch 2.11's bug: one config, its cached winner skipped -> tuned again
    ((64, 128), 128, 128, False),    # several configs: the cached one is chosen
    ((128,), 512, 512, True),        # coordinate descent found a config the bundle never compiled
    ((128,), None, 128, False),      # no cache hit: left to run's tuning
])
def test_backported_recheck_runs_the_cached_winner(monkeypatch, blocks, cached, kept_block, compiled):
    from torch._inductor.runtime import triton_heuristics as th

    hits = [] if cached is None else [_Config(cached, coordesc=True)]
    monkeypatch.setattr(th, "check_autotune_cache", lambda configs, filename, meta: (hits, None, {"hit": bool(hits)}))
    tuner = _Autotuner(*blocks)
    reloaded = type("Reloaded", (), {"fn": "kernel"})()
    tw._recheck_autotune_cache(tuner, lambda: reloaded)
    assert [r.config.kwargs["XBLOCK"] for r in tuner.compile_results] == ([kept_block] if cached else list(blocks))
    assert bool(tuner.compiled) is compiled and tuner.autotune_cache_info == {"hit": bool(hits)}
    if cached:  # marked: CachingAutotuner.run does not tune a found_by_coordesc config again
        assert tuner.compile_results[0].config.found_by_coordesc is True
        assert tuner.fn == ("kernel" if compiled else tuner.fn)


# --- tuning_count ------------------------------------------------------------------------------------------------


def test_each_coordinate_descent_tuning_in_a_process_is_counted_with_why_the_cache_was_not_used(monkeypatch, tmp_path):
    """A process that loaded an engine artifact should tune nothing; when it does, its records say which kernels and
    what the kernel's cache held (a stored winner for other candidate configs is a miss, not a hit)."""
    from torch._inductor.runtime import triton_heuristics as th

    calls = []
    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning",
                        lambda self, launcher, *a, **k: calls.append(launcher) or "tuned-launcher")
    workarounds = Workarounds(patches=(TUNING_COUNT,)).install()
    assert workarounds.install() is workarounds and workarounds.installed == ["tuning_count"]
    assert Workarounds(patches=(TUNING_COUNT,)).install().installed == []  # a second object does not wrap twice
    (tmp_path / "k.best_config").write_text(json.dumps({"configs_hash": "stored-for-other-configs", "XBLOCK": 8}))

    class Kernel:
        inductor_meta = {"kernel_name": "triton_red_fused_mm_0"}
        autotune_cache_info = {"autotune_cache_state": "miss"}
        filename = str(tmp_path / "k.py")
        configs = []
        _should_coordesc_tune = True

    assert th.CachingAutotuner.coordinate_descent_tuning(Kernel(), "launcher") == "tuned-launcher"
    assert calls == ["launcher"]
    (entry,) = workarounds.tuned
    assert entry == {"kernel": "triton_red_fused_mm_0", "cache": "miss", "best_configs_beside": 1,
                     "configs_hash_stored": False}
    settings = hf_compile.inductor_settings(workarounds)
    assert settings["tuned_in_process"] == 1 and settings["tuned_in_process_kernels"] == [entry]
    Kernel.configs = None  # a kernel loaded for the static launcher keeps no candidate configs: no error entry
    th.CachingAutotuner.coordinate_descent_tuning(Kernel(), "launcher")
    assert "error" not in workarounds.tuned[-1] and "configs_hash_stored" not in workarounds.tuned[-1]
    del workarounds.tuned[-1]
    Kernel._should_coordesc_tune = False  # torch decides not to tune this one: nothing counted
    th.CachingAutotuner.coordinate_descent_tuning(Kernel(), "launcher")
    assert len(workarounds.tuned) == 1


# --- kept_winners ------------------------------------------------------------------------------------------------


class TritonConfig:
    """triton.runtime.autotuner.Config as far as Inductor's cache and this rule use it (Triton 3.6.0)."""

    def __init__(self, kwargs, num_warps=4, num_stages=1, num_ctas=1, maxnreg=None, pre_hook=None, ir_override=None):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook, self.ir_override = num_ctas, maxnreg, pre_hook, ir_override

    def __setstate__(self, state):  # Triton 3.6.0's: only its own fields come back from a pickle
        self.kwargs = state.get("kwargs", {})
        self.num_warps = state.get("num_warps", 4)
        self.num_stages = state.get("num_stages", 3)
        self.num_ctas = state.get("num_ctas", 1)
        self.maxnreg = state.get("maxnreg", None)
        self.pre_hook = state.get("pre_hook", None)
        self.ir_override = state.get("ir_override", None)


class Launcher:
    def __init__(self, config):
        self.config = config


class Autotuner:
    """A CachingAutotuner of one kernel source as Inductor's compile worker sends it back: fn dropped, launchers made."""

    def __init__(self, filename, launcher_config, fail_compile=False):
        import threading

        self.filename = str(filename)
        self.inductor_meta = {"kernel_name": "triton_red_fused_mm_7", "coordinate_descent_tuning": True}
        self.fn = type("JITFunction", (), {"fn": None})()
        self.lock = threading.Lock()
        self.launchers = [Launcher(launcher_config)]
        self.compiled, self.fail_compile = [], fail_compile

    def _reload_kernel(self):  # torch 2.11's callback (set by precompile(reload_kernel=...))
        return type("Reloaded", (), {"fn": "kernel"})()

    def _precompile_config(self, cfg):
        if self.fail_compile:
            raise RuntimeError("out of resources")
        self.compiled.append(cfg)
        return type("CompileResult", (), {"make_launcher": lambda result: Launcher(cfg)})()


WINNER = {"XBLOCK": 2, "R0_BLOCK": 2048, "num_warps": 4, "num_stages": 1, "configs_hash": "5d1b6934",
          "found_by_coordesc": True, "time_taken_ms": 20530, "triton_cache_hash": None}  # one from the H200's int8wo artifact


@pytest.fixture
def inductor(monkeypatch, tmp_path):
    """An engine folder's Inductor cache holding one kernel's stored winner; the wrapped tuner records its calls."""
    from torch._inductor.runtime import autotune_cache
    from torch._inductor.runtime import triton_heuristics as th

    monkeypatch.setattr(autotune_cache, "Config", TritonConfig)
    tuned = []
    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning",
                        lambda self, launcher, *a, **k: tuned.append(launcher) or Launcher(TritonConfig({"XBLOCK": 64})))
    cache = tmp_path / "inductor"
    kernel = cache / "ab" / "cabcdef.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# kernel source")
    path = Autotuner(kernel, None)
    stored = tw.winner_path(path)
    (cache / "ab" / stored.rsplit("/", 1)[1]).write_text(json.dumps(WINNER))
    (cache / "ab" / "untuned.best_config").write_text(json.dumps({**WINNER, "found_by_coordesc": False}))
    workarounds = Workarounds(patches=(KEPT_WINNERS,)).install(cache)  # the folder's winners are read at install
    assert workarounds.install(cache) is workarounds and workarounds.installed == ["kept_winners"]
    return {"cache": cache, "kernel": kernel, "tuned": tuned, "stored": stored, "th": th, "workarounds": workarounds}


def test_triton_config_loses_the_coordinate_descent_mark_in_a_pickle():
    """The cause: Inductor's compile workers pickle kernels back to the parent, and the mark does not survive."""
    cfg = TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048})
    cfg.found_by_coordesc = True
    assert not hasattr(pickle.loads(pickle.dumps(cfg)), "found_by_coordesc")


def test_snapshot_holds_the_folders_coordinate_descent_winners_only(inductor):
    assert len(inductor["workarounds"].stored) == 1  # taken at install
    assert inductor["workarounds"].snapshot(inductor["cache"]) == 1
    assert inductor["workarounds"].snapshot(inductor["cache"] / "absent") == 0


def test_the_winner_that_lost_its_mark_in_a_pickle_runs_as_it_is(inductor):
    inductor["workarounds"].snapshot(inductor["cache"])
    marked = TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}, num_warps=4, num_stages=1)
    marked.found_by_coordesc = True
    tuner = Autotuner(inductor["kernel"], pickle.loads(pickle.dumps(marked)))  # back from a compile worker
    launcher = tuner.launchers[0]
    assert inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, launcher) is launcher
    assert inductor["tuned"] == [] and tuner.compiled == []
    assert launcher.config.found_by_coordesc is True  # CachingAutotuner.run does not tune it again
    assert inductor["workarounds"].kept == [{"kernel": "triton_red_fused_mm_7", "how": "mark restored", "file_restored": False}]


def test_a_re_benchmarked_reduction_runs_the_stored_winner_and_the_file_is_restored(inductor):
    """_dynamic_scale_rblock added a config, autotune_to_one_config picked it and saved it over the winner."""
    inductor["workarounds"].snapshot(inductor["cache"])
    stored = inductor["cache"] / "ab" / inductor["stored"].rsplit("/", 1)[1]
    original = stored.read_bytes()
    stored.write_text(json.dumps({**WINNER, "R0_BLOCK": 1024, "found_by_coordesc": False}))
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 1024}))
    launcher = inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert inductor["tuned"] == []
    assert (launcher.config.kwargs, launcher.config.num_warps) == ({"XBLOCK": 2, "R0_BLOCK": 2048}, 4)
    assert launcher.config.found_by_coordesc is True and tuner.fn == "kernel"  # torch 2.11: fn reloaded first
    assert stored.read_bytes() == original  # the folder's tuned digest stays the artifact's
    assert inductor["workarounds"].kept[-1]["how"] == "compiled the stored winner" and inductor["workarounds"].kept[-1]["file_restored"]


def test_a_kernel_the_folder_held_no_winner_for_is_tuned(inductor, tmp_path):
    inductor["workarounds"].snapshot(inductor["cache"])
    other = inductor["cache"] / "cd" / "cother.py"
    other.parent.mkdir()
    tuner = Autotuner(other, TritonConfig({"XBLOCK": 8}))
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert inductor["tuned"] == [tuner.launchers[0]] and inductor["workarounds"].kept == []


def test_winners_written_after_the_snapshot_are_not_kept(inductor):
    """Only what the engine held when the process configured itself: a winner this process tuned is not 'kept'."""
    inductor["workarounds"].snapshot(inductor["cache"] / "absent")
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}))
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert len(inductor["tuned"]) == 1


def test_a_winner_that_does_not_compile_here_is_tuned_as_inductor_would(inductor, capsys):
    inductor["workarounds"].snapshot(inductor["cache"])
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 1024}), fail_compile=True)
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert len(inductor["tuned"]) == 1 and inductor["workarounds"].kept == []
    assert "stored winner not used (RuntimeError: out of resources)" in capsys.readouterr().err


def test_torchs_own_decision_not_to_tune_is_left_to_torch(inductor):
    inductor["workarounds"].snapshot(inductor["cache"])
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 1024}))
    tuner._should_coordesc_tune = False
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert len(inductor["tuned"]) == 1 and inductor["workarounds"].kept == []


def test_kept_winners_are_not_counted_as_tunings_and_the_record_says_how_many(inductor, monkeypatch):
    """PATCHES' order: the count wraps torch's tuner, the kept-winner rule wraps the count."""
    from torch._inductor.runtime import triton_heuristics as th

    tuning = th.CachingAutotuner.coordinate_descent_tuning  # the kept-winner rule around the test's tuner
    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", tuning.__wrapped__)
    workarounds = Workarounds(patches=(TUNING_COUNT, KEPT_WINNERS)).install(inductor["cache"])
    kept_tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}))
    th.CachingAutotuner.coordinate_descent_tuning(kept_tuner, kept_tuner.launchers[0])
    other = inductor["cache"] / "cd" / "cother.py"
    other.parent.mkdir()
    tuned = Autotuner(other, TritonConfig({"XBLOCK": 8}))
    tuned.autotune_cache_info, tuned.configs = {"autotune_cache_state": "miss"}, None
    th.CachingAutotuner.coordinate_descent_tuning(tuned, tuned.launchers[0])
    settings = hf_compile.inductor_settings(workarounds)
    assert settings["tuned_in_process"] == 1 and settings["tuned_in_process_kernels"][0]["cache"] == "miss"
    assert settings["kept_in_process"] == 1 and settings["kept_in_process_kernels"][0]["how"] == "mark restored"


def test_a_cache_folder_reached_through_a_link_or_a_relative_path_is_the_same_folder(inductor, monkeypatch):
    """engines/ is relative by default and /tmp may be a link: the snapshot and Inductor's kernel paths must meet."""
    link = inductor["cache"].parent / "link"
    link.symlink_to(inductor["cache"], target_is_directory=True)
    monkeypatch.chdir(inductor["cache"].parent)
    assert inductor["workarounds"].snapshot("link") == 1
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}))
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert inductor["tuned"] == [] and len(inductor["workarounds"].kept) == 1


def test_winner_files_inductor_saved_over_while_running_them_are_written_back(inductor, monkeypatch):
    """The H200 (2026-12-01): processes that tuned nothing still left 4 of 17 int8wo files changed (a re-benchmark picked
    the stored winner and saved it unmarked under its own candidate hash): after the warm-up the folder holds the
    artifact's files again, so its tuned digest is the artifact's."""
    workarounds = inductor["workarounds"]
    workarounds.snapshot(inductor["cache"])
    stored = inductor["cache"] / "ab" / inductor["stored"].rsplit("/", 1)[1]
    original = stored.read_bytes()
    before = hf_compile.tuned_kernel_configs(inductor["cache"])["digest"]
    assert workarounds.restore_overwritten() == 0
    stored.write_text(json.dumps({**WINNER, "configs_hash": "this-process", "found_by_coordesc": False}))
    assert hf_compile.tuned_kernel_configs(inductor["cache"])["digest"] != before
    assert workarounds.restore_overwritten() == 1 and stored.read_bytes() == original
    assert hf_compile.tuned_kernel_configs(inductor["cache"])["digest"] == before
    assert workarounds.restored_files == 1 and hf_compile.inductor_settings(workarounds)["winner_files_restored"] == 1
