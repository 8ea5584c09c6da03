"""The local executor with several (fake) GPUs: groups at once, one writer, resume after kill -9, placement checks."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.errors import BenchInputError
from bench.execution.executors.local import LocalExecutor, resolve_pool
from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix
from bench.spec.narrow import narrow

WORKLOAD = {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}


def fake_matrix(**over):
    data = {"backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16", "int4"], "max_batch_sizes": [1],
            "workloads": ["w"], "devices": ["cuda:0", "cuda:1"], "trials": 2, "warmup": 0, "timeout_s": 60,
            "build_timeout_s": 120, "options": {"wall_ms": 1500}, "workload": WORKLOAD}
    data.update(over)
    return parse_matrix({k: v for k, v in data.items() if v is not None})


def test_two_devices_run_two_groups_at_once_and_name_their_gpu(tmp_path, monkeypatch):
    writers = set()
    append = ResultStore.append

    def spy(self, record):  # one writer: every record is appended by this process's main thread
        writers.add((os.getpid(), threading.current_thread() is threading.main_thread()))
        append(self, record)

    monkeypatch.setattr(ResultStore, "append", spy)
    m = fake_matrix()
    assert {c.device for c in m.cells} == {"cuda"}  # the pool chooses the GPU; cell ids do not name one
    summary = run_matrix(m, tmp_path / "s.jsonl", show_progress=False)
    assert summary.statuses == {"ok": 4}
    assert writers == {(os.getpid(), True)}
    recs = list(ResultStore(tmp_path / "s.jsonl").records())
    by_precision = {}
    for r in recs:
        by_precision.setdefault(r["cell"]["precision"], []).append(r)
    placed = {p: {(r["environment"]["placement"]["devices"][0], r["environment"]["cuda_visible_devices"]) for r in rs}
              for p, rs in by_precision.items()}
    assert sorted(next(iter(v)) for v in placed.values()) == [("cuda:0", "0"), ("cuda:1", "1")]
    # The two groups overlapped in time: each started before the other ended.
    spans = {p: (min(r["started_at"] for r in rs), max(r["ended_at"] for r in rs)) for p, rs in by_precision.items()}
    (a0, a1), (b0, b1) = spans.values()
    assert a0 < b1 and b0 < a1, spans


def test_a_tensor_parallel_group_takes_two_gpus(tmp_path):
    m = fake_matrix(precisions=["bf16"], options={"tensor_parallel_size": [1, 2]}, trials=1)
    run_matrix(m, tmp_path / "s.jsonl", show_progress=False)
    recs = list(ResultStore(tmp_path / "s.jsonl").records())
    got = {r["cell"]["options"].get("tensor_parallel_size", 1): r["environment"]["placement"]["devices"] for r in recs}
    assert len(got[1]) == 1 and got[2] == ["cuda:0", "cuda:1"]
    # tp=1 keeps the id the cell had before the option existed
    before = fake_matrix(precisions=["bf16"], trials=1, options={}).cells[0].cell_id
    assert before in {r["cell_id"] for r in recs} and len({r["cell_id"] for r in recs}) == 2


def test_pool_names_map_through_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert resolve_pool(("all",), gpu_count=3) == [("cuda:0", "0"), ("cuda:1", "1"), ("cuda:2", "2")]
    with pytest.raises(BenchInputError, match="has 2 GPU"):
        resolve_pool(("cuda:2",), gpu_count=2)
    with pytest.raises(BenchInputError, match="NVML sees no GPU"):
        resolve_pool(("all",), gpu_count=0)
    # The user's own CUDA_VISIBLE_DEVICES: cuda:N is its N-th entry, passed on as written (an index or a UUID).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa,5")
    assert resolve_pool(("all",), gpu_count=8) == [("cuda:0", "GPU-aa"), ("cuda:1", "5")]
    with pytest.raises(BenchInputError, match="sees 2 GPU"):
        resolve_pool(("cuda:2",), gpu_count=8)


def test_placement_is_checked_before_anything_runs(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(BenchInputError, match="asks for 4 GPUs"):
        LocalExecutor(("cuda:0", "cuda:1"), needs=[1, 4], gpu_count=0)
    with pytest.raises(BenchInputError, match="tensor_parallel_size=4 GPUs, but devices lists 2"):
        fake_matrix(options={"tensor_parallel_size": 4})
    with pytest.raises(BenchInputError, match="list them, e.g. devices = \\['cuda:0', 'cuda:1'\\]"):
        fake_matrix(devices=None, device="cuda", options={"tensor_parallel_size": 2})
    with pytest.raises(BenchInputError, match="does not divide model 'qwen-tiny'"):
        fake_matrix(options={"tensor_parallel_size": 3})
    with pytest.raises(BenchInputError, match="make device an axis"):
        fake_matrix(devices=["cpu", "cuda"])
    with pytest.raises(BenchInputError, match="not both"):
        fake_matrix(device="cuda")
    with pytest.raises(BenchInputError, match="executor 'ray' places"):
        fake_matrix(executor="ray")
    with pytest.raises(BenchInputError, match="unknown executor 'slurm'"):
        fake_matrix(executor="slurm")
    # the command line: --devices spreads a cuda matrix; the cells lose their pinned index
    m = narrow(fake_matrix(devices=None, device="cuda:1"), devices="cuda:0,cuda:1")
    assert m.settings.devices == ("cuda:0", "cuda:1") and {c.device for c in m.cells} == {"cuda"}
    with pytest.raises(BenchInputError, match="cells run on 'cpu'"):
        narrow(fake_matrix(devices=None, device="cpu"), devices="all")


def test_kill_9_mid_matrix_leaves_no_worker_and_a_rerun_resumes(tmp_path):
    """SIGKILL the parent while two workers run: they die with it (nothing holds a GPU), the store keeps what
    finished, and the next run measures only what is missing. A pass takes 0.5 s: the first record is stored at least
    1.5 s before the last (one device has four passes), time enough to kill the parent mid-matrix."""
    path = tmp_path / "m.toml"
    path.write_text('''name = "k9"
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16", "int4", "fp16"]
max_batch_sizes = [1]
workloads = ["w"]
devices = ["cuda:0", "cuda:1"]
trials = 2
warmup = 0
[options]
wall_ms = 500
[workload.w]
source = "synthetic"
input_len = 8
output_len = 4
num_requests = 2
''')
    store = tmp_path / "results" / "k9.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "--matrix", str(path), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (not store.exists() or store.read_text().count("\n") < 1):
        time.sleep(0.1)
    assert store.exists(), "no record within 180 s"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone_by = time.monotonic() + 1.0  # as long as this test ever gave them
    while _workers_of(proc.pid) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert _workers_of(proc.pid) == []  # PR_SET_PDEATHSIG: the workers died with their parent
    first = list(ResultStore(store).records())
    assert 1 <= len(first) < 6
    again = subprocess.run([sys.executable, "-m", "bench", "run", "--matrix", str(path), "--no-progress"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    recs = list(ResultStore(store).records())
    done = {(r["cell"]["precision"], r["trial"]) for r in recs if r["status"] == "ok"}
    assert len(done) == 6  # every (cell, trial) measured
    assert recs[: len(first)] == first  # what the killed run stored is kept as it was


def _workers_of(parent_pid: int) -> list[int]:
    """Return the pids of live workers started by the given (dead) parent, from their environment."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            status = (proc / "stat").read_text().split()[2]
        except OSError:
            continue
        if f"BENCH_PARENT_PID={parent_pid}".encode() in env and status != "Z":
            out.append(int(proc.name))
    return out


def test_the_command_line_chooses_the_executor(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('name = "cli"\nbackends = ["fake"]\nmodel = "qwen-tiny"\nprecisions = ["bf16"]\nmax_batch_sizes = [1]\n'
                    'workloads = ["w"]\ndevice = "DEVICE"\n[workload.w]\nsource = "synthetic"\ninput_len = 8\n'
                    'output_len = 4\nnum_requests = 2\n')

    def run(device, *flags):
        path.write_text(path.read_text().replace('"DEVICE"', f'"{device}"').replace('"cpu"', f'"{device}"')
                        .replace('"cuda"', f'"{device}"'))
        out = subprocess.run([sys.executable, "-m", "bench", "run", "--matrix", str(path), "--dry-run", *flags],
                             capture_output=True, text=True)
        out.stderr = " ".join(out.stderr.split())  # rich wraps long lines
        return out

    out = run("cuda", "--devices", "cuda:0,cuda:1")
    assert out.returncode == 0 and "executor local on cuda:0,cuda:1" in out.stderr
    out = run("cpu", "--ray-address", "auto")
    assert out.returncode == 2 and "ray_address is the Ray cluster of executor = 'ray'" in out.stderr
    # the flags reach the settings (the rest through narrow, as the command line calls it)
    m = narrow(fake_matrix(devices=None, device="cuda"), executor="ray", ray_address="ray://head:10001")
    assert (m.settings.executor, m.settings.ray_address, m.settings.devices) == ("ray", "ray://head:10001", ())


class CountingExecutor:
    """An executor of `gpus` interchangeable slots whose runs only wait: the scheduler's bookkeeping, alone."""

    name = "counting"

    def __init__(self, gpus, fail_label=None):
        self.free, self.busy, self.most, self.log, self.fail_label = gpus, 0, 0, [], fail_label
        self.lock = threading.Lock()

    def acquire(self, run):
        if run.gpus > self.free:
            return None
        self.free -= run.gpus
        return run.gpus

    def release(self, placement):
        self.free += placement

    def describe(self, placement):
        return f"{placement} gpu"

    def run(self, run, placement, emit, stop):
        from bench.execution.supervisor import GroupStopped

        with self.lock:
            self.busy += placement
            self.most = max(self.most, self.busy)
        self.log.append(("start", run.job))
        try:
            emit({"event": "tick", "thread": threading.current_thread().name})
            if run.job == self.fail_label:
                raise RuntimeError("boom")
            if stop.wait(0.3 if run.job != "slow" else 30):
                raise GroupStopped()
        finally:
            with self.lock:
                self.busy -= placement
            self.log.append(("end", run.job))

    def close(self):
        pass


def test_the_scheduler_fills_the_gpus_keeps_rounds_in_order_and_hands_events_to_the_main_thread():
    from bench.execution.executors import GroupRun, run_chains

    ex = CountingExecutor(gpus=2)
    seen = []

    def chain(name, gpus):
        return lambda k: GroupRun(job=f"{name}{k}", gpus=gpus, on_event=lambda e: seen.append(
            (e["thread"], threading.current_thread() is threading.main_thread())))

    run_chains(ex, [chain("A", 2), chain("B", 1), chain("C", 1)], rounds=2)
    starts = [job for what, job in ex.log if what == "start"]
    assert sorted(starts) == ["A0", "A1", "B0", "B1", "C0", "C1"] and ex.most == 2
    assert starts[0] == "A0"  # round 0 in matrix order first
    for name in "ABC":  # a group's round 1 starts after its round 0 ended
        assert ex.log.index(("end", f"{name}0")) < ex.log.index(("start", f"{name}1"))
    assert all(main for _, main in seen) and len({t for t, _ in seen}) > 1


def test_a_failing_group_stops_the_others_and_the_error_reaches_the_caller():
    from bench.execution.executors import GroupRun, run_chains

    ex = CountingExecutor(gpus=2, fail_label="bad0")
    chains = [lambda k: GroupRun(job="slow", gpus=1, on_event=lambda e: None),
              lambda k: GroupRun(job=f"bad{k}", gpus=1, on_event=lambda e: None)]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="boom"):
        run_chains(ex, chains, rounds=1)
    assert time.monotonic() - t0 < 10 and ("end", "slow") in ex.log  # the 30 s group was stopped, not waited for


def test_the_warm_up_line_names_the_cache_counts_and_the_longest_compile_phases(monkeypatch):
    """A slow warm-up from an engine artifact (272 s for int8wo on the H200) is read in the worker's log: cache hits,
    misses and bypasses, and torch's own timers of the phases that took longest."""
    import sys
    import types

    from bench.execution import compile_counts

    utils = types.SimpleNamespace(
        counters={"inductor": {"fxgraph_cache_hit": 1}, "aot_autograd": {"autograd_cache_bypass": 1}},
        compilation_time_metrics={"_compile.compile_inner": [40.0, 2.5], "CachingAutotuner.coordinate_descent_tuning":
                                  [58.0, 46.0, 9.0], "async_compile.wait": [1.0], "empty": []})
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)
    before = compile_counts.compile_counters()
    assert compile_counts.describe_compile(before) == (
        "; FX graph cache 1 hit / 0 miss, AOT cache 0 hit / 0 miss / 1 bypassed; longest compile "
        "phases: CachingAutotuner.coordinate_descent_tuning 113.0 s, _compile.compile_inner 42.5 s, "
        "async_compile.wait 1.0 s")
    # What one piece of work compiled: the difference of two snapshots (an accuracy session's cell, after the one before).
    utils.counters["inductor"]["fxgraph_cache_miss"] = 2
    utils.counters["frames"] = {"ok": 3}  # not read: torch 2.11 left it at 0 in workers that compiled
    utils.compilation_time_metrics["_compile.compile_inner"].append(7.25)
    since = compile_counts.counters_since(before)
    assert since == {"fx_hit": 0, "fx_miss": 2, "aot_hit": 0, "aot_miss": 0, "aot_bypass": 0,
                     "phases_s": {"_compile.compile_inner": 7.25}}
    assert compile_counts.describe_compile(since).endswith(
        "AOT cache 0 hit / 0 miss / 0 bypassed; longest compile phases: _compile.compile_inner 7.2 s")
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", types.SimpleNamespace(counters={}))
    assert compile_counts.compile_counters() == {} and compile_counts.describe_compile(compile_counts.compile_counters()) == ""
    assert compile_counts.counters_since(before) == {}
