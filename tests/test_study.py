"""`bench study`: the whole study (run, OOM frontier, kernel profiles, report) in one command.

The GPU preset (h200-study) is checked and planned here; its CPU twin below has the same
structure (a baseline, a harness-loop configuration, a third precision at the larger batch, two
workloads, OOM searches, an eager and a harness profile) on qwen-tiny and the fake backend,
and runs end to end.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import browser

ROOT = Path(__file__).resolve().parent.parent

TWIN = """
name = "cpu-study"
backends = ["hf", "fake"]
model = "qwen-tiny"
device = "cpu"
precisions = ["bf16"]
max_batch_sizes = [1, 4]
workloads = ["w1", "w2"]
runs = 1
trials = 1
warmup = 1
timeout_s = 300
baseline = { backend = "hf", precision = "bf16", max_batch_size = 1, cache = "dynamic" }

[options.hf]
attn_implementation = "sdpa"
cache = "dynamic"

[options.fake]                   # a 1.1 GB device: 1 GB of weights, room for ~190 tokens of KV cache
memory_gb = 1.1

[[include]]                      # the harness loop (compile needs a GPU: off here)
backend = "hf"
cache = "static"
decode_loop = "harness"

[workload.w1]
num_requests = 4
seed = 1
max_input_len = 128
max_total_len = 256
max_output_len = 6

[workload.w2]                    # admits a 280-token prompt that w1 drops
num_requests = 4
seed = 1
max_input_len = 512
max_total_len = 1024
max_output_len = 6

[study.oom]
only = "backend=fake"
strategy = "bisect"
confirm = false
searches = [{ lengths = "32x32", lower = 1, upper = 4 }, { lengths = "64x64", lower = 1, upper = 2 }]

[study.profile]
only = "backend=hf,max_batch_size=1,workload=w1,precision=bf16"
decode_steps = 2
"""


def _bench(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=900, cwd=cwd,
                          env=env)


def test_the_h200_study_preset_plans_every_step(tmp_path):
    proc = _bench("study", "--preset", "h200-study", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # 14 cells, and int8wo beside int4wo at batch 16 on the 1024-limit workload for the accuracy step
    assert "run: bench run --preset h200-study" in out and "15 cells x 2 run(s) x 1 trial(s)" in out
    assert "memory cap 24 GB" in out
    assert "--lengths 1024x1024 --lower 6 --upper 8 --strategy bisect --no-confirm" in out
    assert "--lengths 2048x2048 --lower 3 --upper 5" in out
    profiled = [line for line in out.splitlines() if line.startswith("  hf/bf16/bs1/sharegpt-1024") and "noise floor" not in line]
    assert len(profiled) == 4  # listed under run and under profile: eager and harness loop
    assert any("decode_loop=harness" in line for line in profiled[2:]) and any("cache=dynamic" in line for line in profiled[2:])
    # a verdict on every row: the 15 cells (2 baselines) in 7 sessions, each through its own runtime
    assert "accuracy: bench accuracy --preset h200-study --parallel 3\n" in out  # its [study.accuracy] parallel = 3
    assert "15 cell(s) in 7 session(s), each through its own runtime (16 prompts x up to 32 answer tokens" in out
    assert out.count("(baseline: its reference and noise floor)") == 2
    assert ("bench report results/h200-study.jsonl results/h200-study-oom.jsonl results/h200-study-accuracy.jsonl "
            "--profiles profiles/h200-study.jsonl") in out
    assert not (tmp_path / "results").exists()  # a dry run runs nothing


def test_study_refuses_bad_input_before_running(tmp_path):
    (tmp_path / "plain.toml").write_text(TWIN[: TWIN.index("[study.oom]")])
    proc = _bench("study", "--matrix", "plain.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "has no [study] table" in proc.stderr
    (tmp_path / "bad.toml").write_text(TWIN.replace('strategy = "bisect"', 'stratgy = "bisect"'))
    proc = _bench("study", "--matrix", "bad.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "[study.oom]: unknown key 'stratgy'" in proc.stderr
    (tmp_path / "twin.toml").write_text(TWIN)
    proc = _bench("study", "--matrix", "twin.toml", "--steps", "run,plot", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown step 'plot'" in proc.stderr
    (tmp_path / "np.toml").write_text(TWIN.replace('only = "backend=hf,max_batch_size=1', 'only = "backend=fake,max_batch_size=1'))
    proc = _bench("study", "--matrix", "np.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "backend(s) ['fake']" in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("value, said", [
    ("0", "[study.accuracy] parallel must be a positive integer, got 0: how many accuracy sessions run at once"),
    ("2.5", "[study.accuracy] parallel must be an integer, got 2.5"),
    ('"3"', "[study.accuracy] parallel must be a positive integer, got '3'"),
    ("true", "[study.accuracy] parallel must be a positive integer, got True"),
])
def test_the_accuracy_steps_parallel_is_checked_before_any_step(tmp_path, value, said):
    from bench.errors import BenchInputError
    from bench.spec.matrix import load_matrix
    from bench.study.plan import step_commands, study_plan

    path = tmp_path / "twin.toml"
    path.write_text(TWIN + '\n[study.accuracy]\nonly = "backend=hf"\nparallel = ' + value + "\n")
    with pytest.raises(BenchInputError) as err:
        study_plan(path, load_matrix(path))
    assert str(err.value).startswith(said)
    path.write_text(TWIN + '\n[study.accuracy]\nonly = "backend=hf"\nparallel = 2\n')
    plan = study_plan(path, load_matrix(path))
    assert plan.accuracy_parallel == 2
    assert step_commands(plan, None, "twin.toml")["accuracy"] == "bench accuracy --matrix twin.toml --only backend=hf --parallel 2"


def test_a_study_without_plotly_is_refused_before_its_first_step(tmp_path, monkeypatch, capsys):
    import sys

    from bench.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "plotly.io", None)  # `import plotly.io` raises ImportError
    (tmp_path / "twin.toml").write_text(TWIN)
    assert main(["study", "--matrix", "twin.toml"]) == 2
    err = capsys.readouterr().err
    assert "the dashboard needs plotly" in err and "or leave the report out (--steps run,oom,profile" in err
    assert not (tmp_path / "results").exists() and not (tmp_path / "profiles").exists()


@pytest.mark.slow
def test_the_cpu_twin_of_the_study_runs_end_to_end(tmp_path, capsys):
    """In this process (bench.cli.main): its workers fork from the test process's zygote, whose imports are paid
    once; the command line's own process is tested above and in tests/test_cli.py."""
    from bench.cli import main

    (tmp_path / "twin.toml").write_text(TWIN)
    code = main(["study", "--matrix", "twin.toml", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err[-4000:]
    for store in ("results/cpu-study.jsonl", "results/cpu-study-oom.jsonl", "profiles/cpu-study.jsonl"):
        assert (tmp_path / store).is_file(), store
    report = (tmp_path / "dashboards" / "cpu-study" / "report.md").read_text()
    assert report == out.rstrip("\n") + "\n" or report in out
    # the speedup tables: one per length limit, the options that vary, OOM rows (the fake device, w2's long prompt)
    w1, w2 = report.split("### w2")
    assert "### w1 — in <= 128" in w1 and w2.startswith(" — in <= 512")
    assert "| cache=static, decode_loop=harness |" in report and "| cache=dynamic, decode_loop=generate |" in report
    assert "| OOM |" not in w1 and "| fake | qwen-tiny | bf16 |  | 4 | – (≤512) / – (≤6) | OOM |" in w2
    # the OOM frontier: both searches, the fake device's boundary found (bisection, no confirmation)
    frontier = report[report.index("## OOM frontier (bench oom)"):]
    assert "| 32/32 | device | 2 | 3 (OOM) |" in frontier and "| 64/64 | device | 1 | 2 (OOM) |" in frontier
    # the kernels of one decode step, eager (module ranges) and harness loop
    kernels = report[report.index("## Kernels of one decode step"):]
    rows = [line for line in kernels.splitlines() if line.startswith("| hf ")]
    assert len(rows) == 2 and all("decode step (x2)" in r for r in rows)
    study = json.loads((tmp_path / "dashboards" / "cpu-study" / "study.json").read_text())
    assert set(study["steps_s"]) == {"run", "oom", "profile", "report"} and not any(study["failed"].values())
    assert "bench oom --matrix twin.toml --only backend=fake --lengths 32x32" in study["commands"]["oom0"]
    # the same report from the product's own report command
    code = main(["report", "results/cpu-study.jsonl", "results/cpu-study-oom.jsonl", "--profiles",
                 "profiles/cpu-study.jsonl", "--out", "again"])
    assert code == 0, capsys.readouterr().err[-3000:]
    assert (tmp_path / "again" / "report.md").read_text() == report
    if browser.chromium():
        status = browser.page_status(tmp_path / "dashboards" / "cpu-study" / "dashboard.html", "#all")
        assert status["state"] == "ok", status
        assert "OOM frontier (bench oom)" in status["dom"] and "decode step (x2)" in status["dom"]


def cutting_step(calls: list, step: str, seconds: float):
    """A stand-in for bench.study.driver._step: each step takes `seconds`; the first `step` after `calls` is cleared is
    stopped by SIGTERM, as `timeout` stops a study."""
    import signal
    import time

    def fake_step(name, *args):
        calls.append(name)
        time.sleep(seconds)
        if name == step and calls.count(step) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # never reached: the handler raises here
        return None

    return fake_step


def test_a_study_stopped_by_sigterm_keeps_the_part_it_ran_and_the_step_that_finishes_it_counts_it(
        tmp_path, monkeypatch, capsys):
    """study.json is written after every step; a SIGTERM (`timeout`) in a step keeps that part's seconds in cut_s, and
    the invocation that finishes the step adds them: a study resumed across calls is timed whole, not only its last
    part (on the H100, 2026-12-06, a cut call lost its OOM, profile and half its accuracy step's times)."""
    import signal

    from bench.cli import main
    from bench.study import driver

    monkeypatch.chdir(tmp_path)
    (tmp_path / "twin.toml").write_text(TWIN)
    calls = []
    monkeypatch.setattr(driver, "_step", cutting_step(calls, "oom", 0.2))
    before = signal.getsignal(signal.SIGTERM)
    assert main(["study", "--matrix", "twin.toml", "--steps", "run,oom,profile"]) == 130
    assert signal.getsignal(signal.SIGTERM) is before  # the study's handler is gone once it returns
    assert "interrupted; every finished cell is in the store" in capsys.readouterr().err
    study = json.loads((tmp_path / "dashboards" / "cpu-study" / "study.json").read_text())
    assert calls == ["run", "oom"] and list(study["steps_s"]) == ["run"] and study["steps_s"]["run"] >= 0.2
    assert len(study["cut_s"]["oom"]) == 1 and 0.2 <= study["cut_s"]["oom"][0] < 5
    cut = study["cut_s"]["oom"][0]

    assert main(["study", "--matrix", "twin.toml", "--steps", "oom,profile"]) == 0
    study = json.loads((tmp_path / "dashboards" / "cpu-study" / "study.json").read_text())
    assert study["cut_s"] == {} and set(study["steps_s"]) == {"run", "oom", "profile"}
    assert study["steps_s"]["oom"] >= cut + 0.2  # the cut part and the part that finished it
    assert "all steps so far" in capsys.readouterr().err


@pytest.mark.parametrize("text, said", [
    ("{not json", "is not a study summary bench wrote"),
    ('["a list"]', "not an object of steps_s, failed, cut_s"),
    ('{"matrix": "cpu-study", "steps_s": {"run": NaN}}', "steps_s['run'] must be a finite number"),
    ('{"matrix": "cpu-study", "steps_s": {"run": -5}}', "steps_s['run'] must be a non-negative number"),
    ('{"matrix": "cpu-study", "failed": {"run": "x"}}', "failed['run'] must be a non-negative integer"),
    ('{"matrix": "cpu-study", "cut_s": {"oom": 3.0}}', "cut_s['oom'] must be a list of seconds"),
    ('{"matrix": "cpu-study", "cut_s": {"oom": [1e999]}}', "cut_s['oom'] must be a finite number"),
    ('{"matrix": "cpu-study", "invocations": {"run": 1}}', "invocations must be a list of objects with steps_s"),
    ('{"matrix": "cpu-study", "invocations": [{"steps_s": [1]}]}', "invocations must be a list of objects with steps_s"),
])
def test_a_hostile_study_json_is_refused_before_any_step_and_left_as_it_is(tmp_path, monkeypatch, capsys, text, said):
    from bench.cli import main
    from bench.study import driver

    monkeypatch.chdir(tmp_path)
    (tmp_path / "twin.toml").write_text(TWIN)
    summary = tmp_path / "dashboards" / "cpu-study" / "study.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(text)
    monkeypatch.setattr(driver, "_step", lambda *a: pytest.fail("a step ran"))
    assert main(["study", "--matrix", "twin.toml", "--steps", "run"]) == 2
    err = capsys.readouterr().err
    assert said in err and "move dashboards/cpu-study/study.json away or delete it" in err, err
    assert "Traceback" not in err and summary.read_text() == text


def test_a_study_resumed_with_the_same_command_is_timed_whole_and_lists_its_invocations(tmp_path, monkeypatch):
    """`bench study` cut by `timeout` says "re-run to continue"; re-run with the same steps, its finished steps run
    again over what their stores hold. On the H100 (2026-12-07) that second call's 5.6 s run step replaced the first
    call's 336.8 s in study.json. A resumed step now adds its time to the earlier one; --redo starts it afresh; each
    invocation's own parts are listed."""

    from bench.cli import main
    from bench.study import driver

    monkeypatch.chdir(tmp_path)
    (tmp_path / "twin.toml").write_text(TWIN)
    calls = []
    monkeypatch.setattr(driver, "_step", cutting_step(calls, "profile", 0.1))
    path = tmp_path / "dashboards" / "cpu-study" / "study.json"
    assert main(["study", "--matrix", "twin.toml", "--steps", "run,oom,profile"]) == 130
    first = json.loads(path.read_text())
    assert main(["study", "--matrix", "twin.toml", "--steps", "run,oom,profile"]) == 0
    study = json.loads(path.read_text())
    assert study["cut_s"] == {} and len(study["invocations"]) == 2
    one, two = study["invocations"]
    assert set(one["steps_s"]) == {"run", "oom"} and set(one["cut"]) == {"profile"}
    assert set(two["steps_s"]) == {"run", "oom", "profile"} and "cut" not in two
    for step in ("run", "oom"):  # the earlier call's time and this call's
        assert study["steps_s"][step] == pytest.approx(first["steps_s"][step] + two["steps_s"][step])
    assert study["steps_s"]["profile"] == pytest.approx(one["cut"]["profile"] + two["steps_s"]["profile"])
    assert main(["study", "--matrix", "twin.toml", "--steps", "run", "--redo"]) == 0
    study = json.loads(path.read_text())
    assert study["steps_s"]["run"] == pytest.approx(study["invocations"][-1]["steps_s"]["run"])
    assert study["invocations"][-1]["redo"] is True and len(study["invocations"]) == 3
    calls.clear()  # a cut profile step, then --redo: the redone step is its own time, the cut part not in it
    assert main(["study", "--matrix", "twin.toml", "--steps", "profile"]) == 130
    assert main(["study", "--matrix", "twin.toml", "--steps", "profile", "--redo"]) == 0
    study = json.loads(path.read_text())
    assert study["cut_s"] == {} and study["steps_s"]["profile"] == pytest.approx(
        study["invocations"][-1]["steps_s"]["profile"])


def test_a_resumed_study_profiles_only_the_cells_its_store_lacks(tmp_path, monkeypatch):
    """The profile step re-profiled every cell when a cut study was run again (34 s on the H100, 2026-12-07); it now
    reuses a stored whole profile of the same tool, decode steps and batches, as the run and OOM steps reuse theirs;
    --redo profiles again. The dry run counts the same cells."""
    from types import SimpleNamespace

    from bench.profiling import driver as profiling
    from bench.profiling.driver import ProfileSettings
    from bench.results.records import new_context, new_record
    from bench.results.store import ResultStore
    from bench.spec.matrix import parse_matrix
    from bench.study import driver

    monkeypatch.chdir(tmp_path)
    matrix = parse_matrix({
        "name": "m", "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
        "max_batch_sizes": [1, 2, 4], "workloads": ["syn"],
        "workload": {"syn": {"source": "synthetic", "num_requests": 4, "input_len": 8, "output_len": 6}}})
    settings = ProfileSettings()
    store = tmp_path / "profiles" / "m.jsonl"
    store.parent.mkdir()
    context = new_context("profile", matrix="m")
    windows = {1: settings.decode_steps, 2: settings.decode_steps + 1}  # bs2: another window; bs4: none
    with ResultStore(store).writer() as s:
        for cell in matrix.cells:
            if cell.max_batch_size in windows:
                window = {"decode_steps": windows[cell.max_batch_size], "batches": settings.batches}
                s.append(new_record("profile", cell, {"status": "ok", "extra": {"tool": "torch", "profile": {
                    "tool": "torch", "window": window, "from": "profiling session"}}}, context=context))
    seen = []
    monkeypatch.setattr(profiling, "profile_matrix", lambda m, *a, **k: seen.append(
        sorted(c.max_batch_size for c in m.cells)) or ([], 0))
    plan = SimpleNamespace(profile_matrix=matrix, profile=settings)
    console = SimpleNamespace(print=lambda *a, **k: None)
    assert driver._profile(plan, store, False, console, "bench profile ...") == 0
    assert driver._profile(plan, store, True, console, "bench profile ...") == 0
    assert seen == [[2, 4], [1, 2, 4]]


@pytest.mark.parametrize("step, store", [("oom", "results/cpu-study-oom.jsonl"), ("profile", "profiles/cpu-study.jsonl")])
def test_a_store_a_later_step_cannot_resume_from_is_refused_before_the_run_step(tmp_path, monkeypatch, capsys, step,
                                                                               store):
    """The OOM, profile and accuracy steps read their stores to resume; one that is not a store was found only when
    its step started, after the run step's GPU time (the CPU twin, 2026-12-07: `bench: error: results/cpu-study-oom.jsonl
    is not a bench result store` after the run). It is now refused before any step, named with the fix, left as it
    is."""
    from bench.cli import main
    from bench.study import driver

    monkeypatch.chdir(tmp_path)
    (tmp_path / "twin.toml").write_text(TWIN)
    path = tmp_path / store
    path.parent.mkdir()
    path.write_text('{"not": "a record"}\n')
    monkeypatch.setattr(driver, "_step", lambda *a: pytest.fail("a step ran"))
    assert main(["study", "--matrix", "twin.toml", "--steps", f"run,{step}"]) == 2
    err = capsys.readouterr().err
    assert f"{store} is not a bench result store" in err and f"The study's {step} step resumes from {store}" in err
    assert "no step has run" in err and "Traceback" not in err and path.read_text() == '{"not": "a record"}\n'
