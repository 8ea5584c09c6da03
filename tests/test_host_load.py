"""A busy machine is detected, recorded and warned about (issue 34): host load, steal, other GPU processes,
large trial spreads with one run, error bars, and a line per finished cell without a terminal."""

import dataclasses
import io
import subprocess
import sys
import types

import pytest
from rich.console import Console

from bench.execution.progress import MatrixProgress
from bench.machine import host_load
from bench.machine.host_load import LoadSampler, busy_reasons, cpu_times, own_cpu_ticks
from bench.report.cells import aggregate
from bench.report.data import report_data
from bench.report.figures import throughput_vs_batch
from bench.report.render import render_rows, to_markdown
from bench.report.tables import speedup_table
from bench.results.stats import MAX_CV, run_spread
from tests.support.synthetic import synthetic_records

STAT = "cpu  100 5 50 800 20 3 2 40 0 0\ncpu0 50 2 25 400 10 1 1 20 0 0\ncpu1 50 3 25 400 10 2 1 20 0 0\n"


def test_proc_stat_parsing():
    assert cpu_times(STAT) == {"busy": 100 + 5 + 50 + 3 + 2, "steal": 40, "total": 160 + 800 + 20 + 40}
    assert cpu_times("intr 1 2 3\n") is None
    # /proc/self/stat: the name may hold spaces and parentheses; utime and stime are fields 14 and 15
    line = "4242 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0 1 0"
    assert own_cpu_ticks(line) == 333


def test_busy_reasons_take_off_the_workers_own_load():
    idle_cpu_run = {"cores": 2, "load_1m_before": 2.1, "load_1m_max": 2.2, "own_cpu_cores": 1.9,
                    "other_cpu_cores": 0.05, "steal_share": 0.0, "gpu_other_processes": None}
    assert busy_reasons(idle_cpu_run) == []  # a CPU backend's own threads are not "load"
    loaded = {**idle_cpu_run, "load_1m_max": 6.5, "own_cpu_cores": 0.7, "other_cpu_cores": 1.3}
    reasons = busy_reasons(loaded)
    assert "load average 5.8 on 2 core(s)" in reasons and "other processes used 1.3 of 2 core(s)" in reasons
    assert busy_reasons({**idle_cpu_run, "steal_share": 0.2}) == ["the hypervisor stole 20% of the CPU time"]
    gpu = busy_reasons({**idle_cpu_run, "gpu_other_processes": [{"pid": 7, "used_memory_gb": 3.0}]})
    assert gpu == ["1 other process(es) on the GPU (pid 7)"]


def test_other_gpu_processes_through_nvml_exclude_our_own(monkeypatch):
    import os

    procs = [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=None),
             types.SimpleNamespace(pid=4_000_011, usedGpuMemory=2_000_000_000)]
    fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                                 nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
                                 nvmlDeviceGetComputeRunningProcesses=lambda h: procs)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr("bench.machine.environment.nvml_device", lambda d: 0)
    assert host_load.gpu_other_processes("cuda:0", {os.getpid()}) == [{"pid": 4_000_011, "used_memory_gb": 2.0}]
    with LoadSampler("cuda:0", interval_s=0.05) as s:
        pass
    assert s.summary["gpu_other_processes"] == [{"pid": 4_000_011, "used_memory_gb": 2.0}]
    assert 0 < s.summary["host_probe_ms"] < 1000  # the host's speed in this process, before and after the pass
    assert "1 other process(es) on the GPU (pid 4000011)" in s.summary["busy"]


BURN = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass\n"


def _orphans(code: str, n: int) -> list[int]:
    """Return the pids of n processes running `code` that are not this process's descendants (their parent exited;
    their output goes nowhere, so run() returns while they still run)."""
    spawn = ("import subprocess, sys\n"
             f"ps = [subprocess.Popen([sys.executable, '-c', {code!r}], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range({n})]\n"
             "print(' '.join(str(p.pid) for p in ps), flush=True)\n")
    out = subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True, timeout=60)
    return [int(x) for x in out.stdout.split()]


def _wait_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    import os
    import time

    deadline = time.monotonic() + timeout_s
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_sampler_sees_other_processes_burning_cpu():
    pids = _orphans(BURN, 2)
    with LoadSampler("cpu", interval_s=0.2) as s:
        _wait_gone(pids)
    summary = s.summary
    assert summary["cores"] >= 1 and summary["steal_share"] is not None
    assert summary["own_cpu_cores"] < 0.3  # this process only waited
    # two busy processes for 1.5 s each: well above an idle machine's others. Not a whole core on average: the window
    # also holds their interpreters' start and the wait for their exit (0.989 of a core, once, on a 2-core CI VM)
    assert summary["other_cpu_cores"] >= 0.5


def _with_extra(records, **extra):
    return [dataclasses.replace(r, extra={**r.extra, **extra}) for r in records]


def test_busy_passes_warn_in_the_tables():
    recs = synthetic_records(workloads=(("w", 128, 128),), backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2),
                             trials=2, requests=4, telemetry=False)
    busy = {"busy": ["load average 5.8 on 2 core(s)"], "cores": 2}
    recs = [dataclasses.replace(r, extra={**r.extra, "host_load": busy}) if r.cell["max_batch_size"] == 2 and r.trial == 0
            else r for r in recs]
    data = report_data(recs)
    (table,) = speedup_table(data.frame).values()
    warnings = table.warnings
    assert len(warnings) == 1 and "hf/bf16/bs2" in warnings[0]
    assert "1 of 2 pass(es) measured on a busy machine (load average 5.8 on 2 core(s))" in warnings[0]
    headers, rows = render_rows(table)
    spread = headers.index("tok/s spread: runs / trials")
    assert not rows[0][spread].endswith("⚠") and rows[1][spread].endswith("⚠")
    assert "busy machine" in to_markdown({"w": table})


def test_large_trial_spread_warns_with_one_run():
    spread = run_spread([[100.0, 130.0, 80.0]], "output_throughput")
    assert spread.runs == 1 and spread.trial_cv > MAX_CV
    assert any("trials inside a run differ by" in w and f"limit {MAX_CV:.0%}" in w for w in spread.warnings)
    assert not any("trials inside" in w for w in run_spread([[100.0, 101.0, 99.0]]).warnings)
    recs = synthetic_records(workloads=(("w", 128, 128),), backends=("hf",), precisions=("bf16",), batch_sizes=(1,),
                             trials=3, requests=4, telemetry=False)
    tok = [100.0, 130.0, 80.0]
    recs = [dataclasses.replace(r, metrics={**r.metrics, "output_throughput": tok[r.trial]}) for r in recs]
    (table,) = speedup_table(report_data(recs).frame).values()
    assert any("trials inside a run differ by 24" in w for w in table.warnings)
    assert not any("1 run" in w for w in table.warnings)  # the one-run note is not a concern


def test_throughput_figure_has_error_bars():
    recs = synthetic_records(workloads=(("w", 128, 128),), backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2),
                             trials=3, requests=4, telemetry=False)
    cells = aggregate(report_data(recs).frame)
    fig = throughput_vs_batch(cells, "w")
    (line,) = [t for t in fig["data"] if t.get("mode") == "lines+markers"]
    assert line["error_y"]["array"] == pytest.approx(cells.output_throughput__std.tolist())
    assert all(v > 0 for v in line["error_y"]["array"])


def test_no_terminal_prints_a_line_per_finished_cell_and_warnings_once():
    out = io.StringIO()
    console = Console(file=out, width=60, soft_wrap=True)  # a file: no terminal
    assert not console.is_terminal
    label = "hf/bf16/bs1 [attn_implementation=sdpa, cache=static, compile=reduce-overhead] on sharegpt"
    with MatrixProgress(2, 0, console=console) as progress:
        progress.advance(label, "ok")
        progress.warn("busy", key="k")
        progress.warn("busy again", key="k")
        progress.advance("hf/fp32/bs1", "oom")
    lines = out.getvalue().splitlines()
    assert f"cell 1/2 ok: {label} (0:00 elapsed)" in lines  # one line, not wrapped at the console's width
    assert any(line.startswith("cell 2/2 oom: hf/fp32/bs1") for line in lines)
    assert sum("busy" in line for line in lines) == 1


def test_container_pids_do_not_make_this_process_another():
    listed = [{"pid": 900001, "used_memory_gb": 30.0}, {"pid": 900002, "used_memory_gb": 2.0}]
    # NVML's host pids, none of them ours and none visible here: the largest is this process
    assert host_load.others_on_gpu(listed, {42}, lambda pid: False) == [{"pid": 900002, "used_memory_gb": 2.0}]
    # our pid listed: exactly the others
    assert host_load.others_on_gpu(listed + [{"pid": 42, "used_memory_gb": 5.0}], {42}, lambda pid: False) == listed
    # every pid visible in our namespace and none ours: all are others
    assert host_load.others_on_gpu(listed, {42}, lambda pid: True) == listed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_workers_own_children_are_the_measurement_not_load():
    """A backend's helper processes (a tokenizer's, a compiler's workers) burn CPU for the measurement."""
    child = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        with LoadSampler("cpu", interval_s=0.2) as s:
            child.wait(timeout=30)
    finally:
        child.kill()
    assert s.summary["own_cpu_cores"] >= 0.3  # the child's second and a half of CPU, counted as ours


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_local_server_under_test_is_the_measurement_not_load():
    """An openai cell against `transformers serve` on this machine: the server's CPU is the cell's, not others'."""
    import socket

    with socket.socket() as sock:  # this process listening: found by its port, through /proc/net/tcp
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        import os

        assert host_load.listening_pids(f"http://127.0.0.1:{port}") == {os.getpid()}
        assert host_load.listening_pids(f"http://localhost:{port}/v1") == {os.getpid()}
    assert host_load.listening_pids(f"http://example.com:{port}") == set()  # a remote server: not this machine's
    assert host_load.listening_pids(None) == set()
    # a server that is no child of ours, listening and burning CPU while the pass runs (and serving on after it)
    server = ("import socket, sys, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              "open(sys.argv[1] + '.tmp', 'w').write(str(s.getsockname()[1])); __import__('os').rename(sys.argv[1] + "
              "'.tmp', sys.argv[1])\nt = time.time()\nwhile time.time() - t < 1.5: pass\n"
              "open(sys.argv[1] + '.burned', 'w').close()\ntime.sleep(60)\n")
    import signal
    import tempfile
    import time

    with tempfile.TemporaryDirectory() as d:
        port_file = f"{d}/port"
        spawn = ("import subprocess, sys\n"
                 f"p = subprocess.Popen([sys.executable, '-c', {server!r}, {port_file!r}], stdout=subprocess.DEVNULL, "
                 "stderr=subprocess.DEVNULL)\nprint(p.pid, flush=True)\n")  # its output not ours: run() returns at once
        (pid,) = [int(x) for x in subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True,
                                                 timeout=60).stdout.split()]
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(port_file):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            port = int(open(port_file).read())
            with LoadSampler("cpu", interval_s=0.2, server=f"http://127.0.0.1:{port}") as s:
                while not os.path.exists(port_file + ".burned"):
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
        finally:
            os.kill(pid, signal.SIGKILL)
    assert s.summary["server_pids"] == [pid]
    assert s.summary["own_cpu_cores"] >= 0.3  # the server's CPU is the measurement's


def test_others_competing_for_a_cpu_measurements_cores_is_a_busy_machine():
    """Under half a core of others already takes from a CPU backend that uses every core."""
    run = {"cores": 2, "load_1m_before": 2.0, "load_1m_max": 2.3, "own_cpu_cores": 1.8, "other_cpu_cores": 0.4,
           "steal_share": 0.0, "gpu_other_processes": None}
    assert busy_reasons(run) == ["other processes used 0.4 core(s) while the measurement used 1.8 of 2: they "
                                 "competed for the cores"]
    assert busy_reasons({**run, "other_cpu_cores": 0.1}) == []  # the system's own noise
    assert busy_reasons({**run, "own_cpu_cores": 1.0}) == []  # room to spare: a GPU cell's host thread


def test_bench_run_warns_when_a_cells_trials_spread_like_a_busy_machines():
    """37-54 % between the trials of one process: said on the console as the cell ends, not only in the report."""
    from bench.runner.matrix import trial_spread_warnings

    (w,) = trial_spread_warnings([21.7, 9.3, 30.1])
    assert "trials inside a run differ by" in w and "was the machine busy?" in w
    assert trial_spread_warnings([100.0, 101.0, 99.5]) == [] and trial_spread_warnings([100.0]) == []
