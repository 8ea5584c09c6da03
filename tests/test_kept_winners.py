"""A process of a build key runs the coordinate-descent winners its engine folder held, instead of tuning them again.

Inductor's own classes and cache reader (`AutotuneCache`, `_load_cached_autotuning`,
`triton_config_to_hashable`) run as installed; only what needs a GPU is a stand-in: Triton's
`Config` (this machine has no Triton; the stand-in pickles as Triton 3.6.0's does) and the
compile of a launcher.
"""

from __future__ import annotations

import json
import pickle

import pytest

from bench.backends.hf import compile as hf_compile
from bench.backends.hf import kept_winners


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
    monkeypatch.setattr(kept_winners, "_STORED", {})
    monkeypatch.setattr(kept_winners, "_KEPT", [])
    cache = tmp_path / "inductor"
    kernel = cache / "ab" / "cabcdef.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# kernel source")
    path = Autotuner(kernel, None)
    stored = kept_winners.winner_path(path)
    (cache / "ab" / stored.rsplit("/", 1)[1]).write_text(json.dumps(WINNER))
    (cache / "ab" / "untuned.best_config").write_text(json.dumps({**WINNER, "found_by_coordesc": False}))
    kept_winners.apply()
    kept_winners.apply()  # a second configure_process does not wrap twice
    return {"cache": cache, "kernel": kernel, "tuned": tuned, "stored": stored, "th": th}


def test_triton_config_loses_the_coordinate_descent_mark_in_a_pickle():
    """The cause: Inductor's compile workers pickle kernels back to the parent, and the mark does not survive."""
    cfg = TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048})
    cfg.found_by_coordesc = True
    assert not hasattr(pickle.loads(pickle.dumps(cfg)), "found_by_coordesc")


def test_snapshot_holds_the_folders_coordinate_descent_winners_only(inductor):
    assert kept_winners.snapshot(inductor["cache"]) == 1
    assert kept_winners.snapshot(inductor["cache"] / "absent") == 0


def test_the_winner_that_lost_its_mark_in_a_pickle_runs_as_it_is(inductor):
    kept_winners.snapshot(inductor["cache"])
    marked = TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}, num_warps=4, num_stages=1)
    marked.found_by_coordesc = True
    tuner = Autotuner(inductor["kernel"], pickle.loads(pickle.dumps(marked)))  # back from a compile worker
    launcher = tuner.launchers[0]
    assert inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, launcher) is launcher
    assert inductor["tuned"] == [] and tuner.compiled == []
    assert launcher.config.found_by_coordesc is True  # CachingAutotuner.run does not tune it again
    assert kept_winners.kept() == [{"kernel": "triton_red_fused_mm_7", "how": "mark restored", "file_restored": False}]


def test_a_re_benchmarked_reduction_runs_the_stored_winner_and_the_file_is_restored(inductor):
    """_dynamic_scale_rblock added a config, autotune_to_one_config picked it and saved it over the winner."""
    kept_winners.snapshot(inductor["cache"])
    stored = inductor["cache"] / "ab" / inductor["stored"].rsplit("/", 1)[1]
    original = stored.read_bytes()
    stored.write_text(json.dumps({**WINNER, "R0_BLOCK": 1024, "found_by_coordesc": False}))
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 1024}))
    launcher = inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert inductor["tuned"] == []
    assert (launcher.config.kwargs, launcher.config.num_warps) == ({"XBLOCK": 2, "R0_BLOCK": 2048}, 4)
    assert launcher.config.found_by_coordesc is True and tuner.fn == "kernel"  # torch 2.11: fn reloaded first
    assert stored.read_bytes() == original  # the folder's tuned digest stays the artifact's
    assert kept_winners.kept()[-1]["how"] == "compiled the stored winner" and kept_winners.kept()[-1]["file_restored"]


def test_a_kernel_the_folder_held_no_winner_for_is_tuned(inductor, tmp_path):
    kept_winners.snapshot(inductor["cache"])
    other = inductor["cache"] / "cd" / "cother.py"
    other.parent.mkdir()
    tuner = Autotuner(other, TritonConfig({"XBLOCK": 8}))
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert inductor["tuned"] == [tuner.launchers[0]] and kept_winners.kept() == []


def test_winners_written_after_the_snapshot_are_not_kept(inductor):
    """Only what the engine held when the process configured itself: a winner this process tuned is not 'kept'."""
    kept_winners.snapshot(inductor["cache"] / "absent")
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}))
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert len(inductor["tuned"]) == 1


def test_a_winner_that_does_not_compile_here_is_tuned_as_inductor_would(inductor, capsys):
    kept_winners.snapshot(inductor["cache"])
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 1024}), fail_compile=True)
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert len(inductor["tuned"]) == 1 and kept_winners.kept() == []
    assert "stored winner not used (RuntimeError: out of resources)" in capsys.readouterr().err


def test_torchs_own_decision_not_to_tune_is_left_to_torch(inductor):
    kept_winners.snapshot(inductor["cache"])
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 1024}))
    tuner._should_coordesc_tune = False
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert len(inductor["tuned"]) == 1 and kept_winners.kept() == []


def test_kept_winners_are_not_counted_as_tunings_and_the_record_says_how_many(inductor, monkeypatch):
    """configure_process's order: the count wraps torch's tuner, the kept-winner rule wraps the count."""
    from torch._inductor.runtime import triton_heuristics as th

    monkeypatch.setattr(hf_compile, "_TUNED_HERE", [])
    tuning = th.CachingAutotuner.coordinate_descent_tuning  # the kept-winner rule around the test's tuner
    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", tuning.__wrapped__)
    hf_compile._count_tunings()
    kept_winners.apply()
    kept_winners.snapshot(inductor["cache"])
    kept_tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}))
    th.CachingAutotuner.coordinate_descent_tuning(kept_tuner, kept_tuner.launchers[0])
    other = inductor["cache"] / "cd" / "cother.py"
    other.parent.mkdir()
    tuned = Autotuner(other, TritonConfig({"XBLOCK": 8}))
    tuned.autotune_cache_info, tuned.configs = {"autotune_cache_state": "miss"}, None
    th.CachingAutotuner.coordinate_descent_tuning(tuned, tuned.launchers[0])
    settings = hf_compile.inductor_settings()
    assert settings["tuned_in_process"] == 1 and settings["tuned_in_process_kernels"][0]["cache"] == "miss"
    assert settings["kept_in_process"] == 1 and settings["kept_in_process_kernels"][0]["how"] == "mark restored"


def test_a_cache_folder_reached_through_a_link_or_a_relative_path_is_the_same_folder(inductor, monkeypatch):
    """engines/ is relative by default and /tmp may be a link: the snapshot and Inductor's kernel paths must meet."""
    link = inductor["cache"].parent / "link"
    link.symlink_to(inductor["cache"], target_is_directory=True)
    monkeypatch.chdir(inductor["cache"].parent)
    assert kept_winners.snapshot("link") == 1
    tuner = Autotuner(inductor["kernel"], TritonConfig({"XBLOCK": 2, "R0_BLOCK": 2048}))
    inductor["th"].CachingAutotuner.coordinate_descent_tuning(tuner, tuner.launchers[0])
    assert inductor["tuned"] == [] and len(kept_winners.kept()) == 1


def test_winner_files_inductor_saved_over_while_running_them_are_written_back(inductor, monkeypatch):
    """The H200 (2026-12-01): processes that tuned nothing still left 4 of 17 int8wo files changed (a re-benchmark picked
    the stored winner and saved it unmarked under its own candidate hash): after the warm-up the folder holds the
    artifact's files again, so its tuned digest is the artifact's."""
    from bench.backends.hf import compile as hf_compile

    monkeypatch.setattr(kept_winners, "_RESTORED_FILES", 0)
    kept_winners.snapshot(inductor["cache"])
    stored = inductor["cache"] / "ab" / inductor["stored"].rsplit("/", 1)[1]
    original = stored.read_bytes()
    before = hf_compile.tuned_kernel_configs(inductor["cache"])["digest"]
    assert kept_winners.restore_overwritten() == 0
    stored.write_text(json.dumps({**WINNER, "configs_hash": "this-process", "found_by_coordesc": False}))
    assert hf_compile.tuned_kernel_configs(inductor["cache"])["digest"] != before
    assert kept_winners.restore_overwritten() == 1 and stored.read_bytes() == original
    assert hf_compile.tuned_kernel_configs(inductor["cache"])["digest"] == before
    assert kept_winners.restored_files() == 1 and hf_compile.inductor_settings()["winner_files_restored"] == 1
