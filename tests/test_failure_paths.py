"""Every failure is a result: stores whose cells all failed, or whose baseline failed, still make their tables
and comparisons (OOM rows, error rows), never a traceback."""

import pytest

from bench.cli import main
from bench.results.store import ResultStore
from tests.support.records import make_record

FAKE = """name = "{name}"
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16", "int4"]
max_batch_sizes = [1, 2]
workloads = ["w"]
device = "cpu"
trials = 2
baseline = {{ backend = "fake", precision = "bf16", max_batch_size = 1 }}
[options]
fail = "{fail}"
[workload.w]
path = "{data}"
num_requests = 4
"""


def write_fake(tmp_path, tiny_sharegpt, name, fail):
    path = tmp_path / f"{name}.toml"
    path.write_text(FAKE.format(name=name, fail=fail, data=tiny_sharegpt))
    return path


@pytest.mark.parametrize("fail, status, code", [("error", "ERROR", 1), ("oom", "OOM", 0)])
def test_run_and_report_of_a_matrix_whose_every_cell_failed(tmp_path, tiny_sharegpt, capsys, fail, status, code):
    matrix = write_fake(tmp_path, tiny_sharegpt, f"all{fail}", fail)
    assert main(["run", "--matrix", str(matrix), "--no-progress"]) == code
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "report not built" not in out.err
    assert out.out.count(f"| {status} | {status} |") == 4  # one row per cell, spelled out
    assert "no cell ran ok (4 " in out.out
    assert main(["report", f"results/all{fail}.jsonl"]) == 0
    rep = capsys.readouterr()
    assert rep.out.count(f"| {status} |") >= 4 and "Traceback" not in rep.err
    assert (tmp_path / f"dashboards/all{fail}/dashboard.html").exists()
    # Comparing the store with itself: every cell failed on both sides, a status verdict, no environment error.
    assert main(["compare", f"results/all{fail}.jsonl", f"results/all{fail}.jsonl"]) == 0
    cmp = capsys.readouterr()
    assert f"{fail} on both sides" in cmp.out and "holds only failures" in cmp.err


def _cell(precision, bs):
    return {"backend": "fake", "model": "m", "precision": precision, "max_batch_size": bs, "device": "cpu",
            "options": {}, "workload": {"name": "w"}}


def test_a_failed_baseline_leaves_a_table_without_speedups(tmp_path, capsys):
    store = ResultStore(tmp_path / "s.jsonl")
    store.append(make_record("base", status="oom", cell=_cell("bf16", 1)))
    for t in range(2):
        store.append(make_record("other", trial=t, cell=_cell("int4", 1), request_throughput=2.0,
                                 output_throughput=50.0))
    assert main(["report", str(store.path), "--baseline", "backend=fake,precision=bf16,max_batch_size=1"]) == 0
    out = capsys.readouterr()
    assert "| OOM | OOM |" in out.out and "| 2.000" in out.out
    assert "baseline (backend=fake, precision=bf16, max_batch_size=1) did not run ok (OOM)" in out.out
    # A baseline that names no cell at all is still refused, with the cells that exist.
    assert main(["report", str(store.path), "--baseline", "backend=fake,precision=fp32,max_batch_size=1"]) == 2
    assert "--baseline backend=fake,precision=int4,max_batch_size=1  (ok)" in capsys.readouterr().err


def test_compare_whose_head_holds_only_errors_says_so(tmp_path, capsys):
    base, head = ResultStore(tmp_path / "base.jsonl"), ResultStore(tmp_path / "head.jsonl")
    for run in range(2):
        base.append(make_record("a", run=run, output_throughput=10.0 + run, env={"cpu": "x", "torch": "2"}))
    head.append(make_record("a", status="error", run_id="run-2", env={}))  # its worker died before describing itself
    assert main(["compare", str(base.path), str(head.path)]) == 1
    out = capsys.readouterr()
    assert "ok on base, error on head" in out.out
    assert "holds only failures (error)" in out.err and "different environments" not in out.err


def test_unknown_ignore_option_is_refused_with_the_valid_names(tmp_path, capsys):
    store = ResultStore(tmp_path / "s.jsonl")
    cell = {**_cell("bf16", 1), "options": {"slowdown": 1.0, "seed": 0}}
    store.append(make_record("a", cell=cell, output_throughput=1.0))
    assert main(["compare", str(store.path), str(store.path), "--ignore-option", "slowdwn"]) == 2
    err = capsys.readouterr().err
    assert "--ignore-option 'slowdwn'" in err and "'seed', 'slowdown'" in err


# ---- the store's append: every byte written and synced, or nothing --------------------------------------------


def _failing_writes(monkeypatch, store_path, *, fail_from: int, short: bool = False, err=None):
    """Patch os.write so that writes to the store file fail (ENOSPC) from its `fail_from`-th write on.

    short: each failing write first stores part of its bytes (a short write), as a filling disk does.
    Writes to other files (the worker pipes) go through.
    """
    import errno
    import os

    real = os.write
    count = {"n": 0}

    def write(fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.endswith(str(store_path.name)):
            return real(fd, data)
        count["n"] += 1
        if count["n"] < fail_from:
            return real(fd, data)
        if short and len(data) > 1:
            return real(fd, bytes(data[: len(data) // 3]))  # part of it lands, then the next write fails
        raise err or OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)
    return count


def test_short_writes_are_continued(tmp_path, monkeypatch):
    import os

    real = os.write
    store = ResultStore(tmp_path / "s.jsonl")
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[: max(1, len(data) // 2)])))
        store.append(make_record("a", output_throughput=1.0))
        store.append(make_record("b", output_throughput=2.0))
    assert [r["cell_id"] for r in store.records()] == ["a", "b"]


@pytest.mark.parametrize("short", [False, True])
def test_a_failed_append_leaves_no_fragment_and_says_what_was_not_stored(tmp_path, monkeypatch, short):
    import errno

    from bench.errors import StoreWriteError

    store = ResultStore(tmp_path / "s.jsonl")
    store.append(make_record("a", output_throughput=1.0))
    before = store.path.read_bytes()
    with monkeypatch.context() as patch:
        _failing_writes(patch, store.path, fail_from=1, short=short)
        with pytest.raises(StoreWriteError, match=r"fake/bf16/bs1/w \(trial 0, ok\) was NOT stored .*no space left"):
            store.append(make_record("b", output_throughput=2.0))
    assert store.path.read_bytes() == before  # cut back: no fragment
    with monkeypatch.context() as patch, pytest.raises(StoreWriteError, match="I/O error"):
        _failing_writes(patch, store.path, fail_from=1, err=OSError(errno.EIO, "Input/output error"))
        store.append(make_record("c", output_throughput=2.0))
    assert store.path.read_bytes() == before


def test_a_full_disk_stops_the_matrix_cleanly_and_a_rerun_resumes(tmp_path, tiny_sharegpt, monkeypatch, capsys):
    matrix = write_fake(tmp_path, tiny_sharegpt, "full", "none")
    store = tmp_path / "results/full.jsonl"
    with monkeypatch.context() as patch:  # (monkeypatch.undo would also undo the test's chdir)
        _failing_writes(patch, store, fail_from=3, short=True)  # the third record hits a full disk
        assert main(["run", "--matrix", str(matrix), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "was NOT stored" in err and "every record stored before it stays" in err and "Traceback" not in err
    kept = list(ResultStore(store).records())
    assert len(kept) == 2 and store.read_bytes().endswith(b"\n") and store.read_bytes().count(b"\n") == 2
    assert main(["run", "--matrix", str(matrix), "--no-progress"]) == 0  # the next run resumes after them
    assert len(list(ResultStore(store).records())) == 8


# ---- partial runs: marked, or left out and said so -------------------------------------------------------------


def _runs_store(tmp_path, runs: int, trials: int, outcomes: dict) -> ResultStore:
    """Return a store of one cell whose context asked for runs × trials; outcomes: {run: [status per trial]}."""
    from bench.results.records import RunContext, new_record

    ctx = RunContext(run_id="r1", command="run", matrix="m", commit="c" * 40, dirty=False, runs=runs, trials=trials,
                     started_at=1.0, baseline={"backend": "fake"})
    store = ResultStore(tmp_path / "s.jsonl")
    for run, statuses in outcomes.items():
        for trial, status in enumerate(statuses):
            metrics = {"request_throughput": 1.0 + run, "output_throughput": 10.0 * (1 + run)} if status == "ok" else None
            store.append(new_record("measurement", _cell("bf16", 1), {
                "cell_id": "a", "trial": trial, "status": status, "metrics": metrics, "started_at": 10.0 * run + trial,
                "error": None if status == "ok" else "worker died"}, context=ctx, run=run, environment={"cpu": "x"}))
    return store


@pytest.mark.parametrize("runs, trials, outcomes, shown, tok_s", [
    # a worker killed after its first trial: the row is marked, not passed off as complete
    (1, 2, {0: ["ok", "error"]}, "| 1 × 1 of 1 × 2, partial |", "| 10.0 |"),
    # resumed: run 1 was killed after one trial, run 2 replaced it: 2 × 3, run 1 left out of the figures (not 3 × 2.3)
    (2, 3, {0: ["ok"] * 3, 1: ["ok", "error"], 2: ["ok"] * 3}, "| 2 × 3 (+1 partial run left out) |", "| 20.0 ± 14.1 |"),
    # not yet resumed: one complete run of two, and the partial one left out
    (2, 3, {0: ["ok"] * 3, 1: ["ok", "error"]}, "| 1 × 3 of 2 × 3, partial (+1 partial run left out) |",
     "| 10.0 ± 0.0 |"),
    # complete: nothing to say
    (2, 2, {0: ["ok"] * 2, 1: ["ok"] * 2}, "| 2 × 2 |", "| 15.0 ± 7.1 |"),
])
def test_partial_runs_are_marked_or_left_out_and_said_so(tmp_path, capsys, runs, trials, outcomes, shown, tok_s):
    store = _runs_store(tmp_path, runs, trials, outcomes)
    assert main(["report", str(store.path), "--baseline", "backend=fake"]) == 0
    out = capsys.readouterr()
    row = next(line for line in out.out.splitlines() if line.startswith("| fake |"))
    assert shown in row and tok_s in row, row
    assert ("partial runs (a worker killed" in out.err) == ("left out" in shown)


# ---- baselines: the error's suggested fix works, a named baseline must name a cell ----------------------------


def test_the_ambiguous_baseline_fix_works_when_a_cell_lacks_the_key(tmp_path):
    import re

    from bench.errors import BenchInputError
    from bench.spec.baseline import _baseline_matches, check_baseline
    from bench.spec.matrix import load_matrix
    from bench.spec.narrow import parse_pairs

    path = tmp_path / "m.toml"
    path.write_text('backends = ["hf", "fake"]\nmodel = "qwen-tiny"\ndevice = "cpu"\nprecisions = ["bf16"]\n'
                    'max_batch_sizes = [1]\nworkloads = ["w"]\n[options.hf]\nattn_implementation = ["sdpa", "eager"]\n'
                    '[workload.w]\nsource = "synthetic"\ninput_len = 8\noutput_len = 4\n')
    cells = load_matrix(str(path)).cells
    with pytest.raises(BenchInputError) as err:
        check_baseline({"precision": "bf16"}, cells)
    suggestion = re.search(r"e\.g\. --baseline (\S+)", str(err.value)).group(1)
    assert "None" not in suggestion
    baseline = parse_pairs(suggestion)
    check_baseline(baseline, cells, must_match=True)  # neither ambiguous nor empty
    assert sum(_baseline_matches(c, baseline) for c in cells) == 1


def test_a_named_baseline_that_matches_no_cell_is_refused_before_running(tmp_path, tiny_sharegpt, capsys):
    matrix = write_fake(tmp_path, tiny_sharegpt, "nobase", "none")
    assert main(["run", "--matrix", str(matrix), "--baseline", "backend=hf,precision=bf16"]) == 2
    err = capsys.readouterr().err
    assert "matches none of the matrix's 4 cells" in err and "fake/int4/bs2/w" in err
    assert not (tmp_path / "results/nobase.jsonl").exists()


# ---- file-system errors: one message naming the path and the fix, never a traceback ---------------------------


def _ok_store(tmp_path) -> ResultStore:
    store = ResultStore(tmp_path / "ok.jsonl")
    store.append(make_record("a", output_throughput=1.0, request_throughput=1.0, baseline={"backend": "fake"}))
    return store


def test_a_read_only_report_folder_is_refused_before_reading(tmp_path, monkeypatch, capsys):
    import os

    store = _ok_store(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    with monkeypatch.context() as patch:  # root may write anywhere: the check is what matters
        patch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(ro) else real(p, mode, **kw))
        patch.setattr(os, "statvfs", lambda p: type("V", (), {"f_flag": os.ST_RDONLY})())
        assert main(["report", str(store.path), "--out", str(ro / "out")]) == 2
    err = capsys.readouterr().err
    assert "is on a read-only file system: write to a writable folder with --out" in err and "Traceback" not in err


@pytest.mark.parametrize("errno_name, needle", [("EROFS", "read-only file system"), ("ENOSPC", "no space left"),
                                                ("EACCES", "not writable (permissions)")])
def test_a_write_that_fails_midway_is_one_message(tmp_path, monkeypatch, capsys, errno_name, needle):
    import errno
    from pathlib import Path

    store = _ok_store(tmp_path)

    def fail(self, *a, **kw):
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)), str(self))

    import os

    with monkeypatch.context() as patch:
        patch.setattr(Path, "write_text", fail)
        assert main(["report", str(store.path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and needle in err and "Traceback" not in err


def test_too_little_free_space_is_refused_before_running(tmp_path, tiny_sharegpt, monkeypatch, capsys):
    import shutil

    matrix = write_fake(tmp_path, tiny_sharegpt, "full", "none")
    with monkeypatch.context() as patch:
        patch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 4096, 4096))
        assert main(["run", "--matrix", str(matrix), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "only 4 KiB free" in err and "Traceback" not in err
    assert not (tmp_path / "results/full.jsonl").exists()


def test_an_unforeseen_file_system_error_is_a_message(monkeypatch, capsys):
    import errno

    import bench.commands.presets as presets

    def boom(args):  # any command that meets a file-system error no check foresaw
        raise OSError(errno.EIO, "Input/output error", "/some/file")

    monkeypatch.setattr(presets, "cmd_presets", boom)
    assert main(["presets"]) == 2
    err = capsys.readouterr().err
    assert "I/O error on '/some/file'" in err and "Traceback" not in err


@pytest.mark.parametrize("verb", ["run", "accuracy", "profile", "oom", "build"])
def test_a_cuda_matrix_on_a_machine_without_cuda_is_refused_before_any_worker(tmp_path, tiny_sharegpt, capsys,
                                                                              monkeypatch, verb):
    """A new user's 2-core laptop: GPU cells are refused in one line (exit 2), not by workers' tracebacks."""
    import bench.machine.environment as environment

    monkeypatch.setattr(environment, "cuda_missing", lambda: "this Python's torch 2.13.0+cpu is built without CUDA")
    path = tmp_path / "m.toml"
    path.write_text(f'name = "hfcuda"\nbackends = ["hf"]\nmodel = "qwen-tiny"\ndevice = "cuda"\nprecisions = ["bf16"]\n'
                    f'max_batch_sizes = [1]\nworkloads = ["w"]\ntrials = 1\n[workload.w]\npath = "{tiny_sharegpt}"\n'
                    'num_requests = 2\nmax_input_len = 64\nmax_total_len = 128\nmax_output_len = 8\n')
    args = [verb, "--matrix", str(path)] + (["--store", str(tmp_path / "s.jsonl")] if verb != "build" else
                                            ["--artifacts", str(tmp_path / "art")])
    assert main(args) == 2
    out = capsys.readouterr()
    (line,) = out.err.strip().splitlines()  # one line: the reason and the fix, no warning before it, no traceback
    assert line.startswith("bench: error: 1 cell(s) (hf) run on device 'cuda', but this machine cannot run CUDA: "
                           "this Python's torch 2.13.0+cpu is built without CUDA; run them on a machine with an NVIDIA GPU")
    assert "--preset default" in line and not (tmp_path / "s.jsonl").exists() and not (tmp_path / "results").exists()
    if verb == "run":  # planning needs no GPU, and a backend whose device is a label (fake) runs anywhere
        assert main(args + ["--dry-run"]) == 0
        fake = tmp_path / "fake.toml"
        fake.write_text(path.read_text().replace('["hf"]', '["fake"]'))
        assert main(["run", "--matrix", str(fake), "--store", str(tmp_path / "f.jsonl"), "--no-progress"]) == 0


def test_why_a_machine_cannot_run_cuda(monkeypatch):
    import bench.machine.environment as environment

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(environment, "installed_version", lambda *d: "2.13.0+cpu")
    assert "built without CUDA" in environment.cuda_missing()
    monkeypatch.setattr(environment, "installed_version", lambda *d: None)
    assert environment.cuda_missing() == "torch is not installed"
    monkeypatch.setattr(environment, "installed_version", lambda *d: "2.11.0")
    monkeypatch.setattr(environment.sys, "platform", "linux")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "hides every GPU" in environment.cuda_missing()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(environment.os.path, "exists", lambda f: False)
    monkeypatch.setattr(environment, "gpu_info", lambda d: {"gpu_count": 0})
    assert "no NVIDIA GPU or driver" in environment.cuda_missing()
    monkeypatch.setattr(environment, "gpu_info", lambda d: {"gpu_count": 8})
    assert environment.cuda_missing() is None
    monkeypatch.setattr(environment.os.path, "exists", lambda f: f == "/dev/nvidiactl")  # NVML absent, driver there
    monkeypatch.setattr(environment, "gpu_info", lambda d: {"gpu_count": 0})
    assert environment.cuda_missing() is None


def test_without_plotly_run_keeps_its_records_and_report_names_the_fix(tmp_path, tiny_sharegpt, capsys, monkeypatch):
    """A Python without plotly (a dependency; the GPU machine lacks it unless carried): a clear error, nothing lost."""
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "plotly.io", None)  # `import plotly.io` raises ImportError
    matrix = write_fake(tmp_path, tiny_sharegpt, "noplotly", "none")
    store = tmp_path / "s.jsonl"
    assert main(["run", "--matrix", str(matrix), "--store", str(store), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("the dashboard needs plotly, which this Python lacks: pip install plotly") == 2
    assert "report not built" in err and len(list(ResultStore(store).records())) == 8  # 4 cells x 2 trials
    assert main(["report", str(store), "--out", str(tmp_path / "d")]) == 2
    assert "pip install plotly" in capsys.readouterr().err and not (tmp_path / "d" / "report.md").exists()
