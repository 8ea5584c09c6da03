"""The one worker launcher (bench.execution.launcher): environment, process group, kill rule, logs, outcomes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.execution import launcher

ROOT = Path(__file__).resolve().parent.parent

# A session-style child: argv[1] is its result file; it writes what it was started with there.
WRITES_ITS_ENV = """
import json, os, sys
json.dump({k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONUNBUFFERED", "BENCH_PARENT_PID", "CAP", "EXTRA")}
          | {"pgid": os.getpgid(0), "pid": os.getpid()}, open(sys.argv[1], "w"))
print("said on stdout"); print("said on stderr", file=sys.stderr)
"""


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return status.read_text().split("State:")[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_a_session_gets_the_packages_path_its_own_group_and_dies_with_this_process(tmp_path, monkeypatch):
    monkeypatch.setenv("CAP", "7")
    result, log = tmp_path / "r.json", tmp_path / "s.log"
    out = launcher.run_session([sys.executable, "-c", WRITES_ITS_ENV, str(result)], result, log, timeout=60,
                               extra_env={"EXTRA": "x"}, drop_env=("CAP",))
    assert out.status == "ok" and out.returncode == 0 and out.error is None and out.log == log and out.wall_s > 0
    env = out.result
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT) and env["PYTHONUNBUFFERED"] == "1"
    assert env["BENCH_PARENT_PID"] == str(os.getpid()) and env["EXTRA"] == "x" and env["CAP"] is None
    assert env["pgid"] == env["pid"] != os.getpgid(0)  # a process group of its own: Ctrl-C reaches the parent only
    assert "said on stdout" in log.read_text() and "said on stderr" in log.read_text()
    # Under a profiler (ncu, nsys) the child's parent is the profiler: no parent pid to die with.
    wrapped = launcher.run_session([sys.executable, "-c", WRITES_ITS_ENV, str(result)], result, log, timeout=60,
                                   watch_parent=False)
    assert wrapped.result["BENCH_PARENT_PID"] is None


def test_a_death_is_judged_from_its_own_log_and_exit_status(tmp_path):
    result, log = tmp_path / "r.json", tmp_path / "s.log"
    result.write_text("{}")  # an earlier run's result must not pass for this one's
    oom = "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'); sys.exit(1)"
    out = launcher.run_session([sys.executable, "-c", oom], result, log, timeout=60, what="accuracy session")
    assert out.status == "oom" and out.result is None and out.returncode == 1
    assert out.error.startswith(f"accuracy session exited with status 1; log {log}:\n") and "CUDA out of memory" in out.error
    crash = launcher.run_session([sys.executable, "-c", "raise SystemExit(3)"], result, log, timeout=60)
    assert crash.status == "error" and "session exited with status 3" in crash.error
    assert "CUDA out of memory" not in log.read_text()  # a new log: nothing of the earlier process's output
    silent = launcher.run_session([sys.executable, "-c", "pass"], result, log, timeout=60)  # exit 0, no result
    assert silent.status == "error" and "exited with status 0" in silent.error


def test_a_timeout_kills_the_whole_group_not_only_the_child(tmp_path):
    """A wrapper (ncu) that started the session and waits: both die at the timeout."""
    pid_file = tmp_path / "grandchild.pid"
    wrapper = f"sleep 300 & echo $! > {pid_file}; wait"
    t0 = time.monotonic()
    out = launcher.run_session(["sh", "-c", wrapper], tmp_path / "r.json", tmp_path / "s.log", timeout=1,
                               what="profiling session")
    assert out.status == "timeout" and out.returncode is None and time.monotonic() - t0 < 30
    assert out.error == f"profiling session ran past 1 s; log {tmp_path / 's.log'}"
    time.sleep(0.2)
    assert not _alive(int(pid_file.read_text()))


def test_ctrl_c_while_a_session_runs_kills_its_group(tmp_path, monkeypatch):
    pid_file = tmp_path / "grandchild.pid"
    real_wait = subprocess.Popen.wait

    def interrupted(self, timeout=None):
        if timeout is not None and timeout > 100:  # the session's own wait: Ctrl-C arrives once it is running
            deadline = time.monotonic() + 30
            while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.05)
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launcher.run_session(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], tmp_path / "r.json",
                             tmp_path / "s.log", timeout=600)
    time.sleep(0.2)
    assert not _alive(int(pid_file.read_text()))


def test_a_log_is_new_even_where_an_orphan_still_writes_the_old_one(tmp_path):
    path = tmp_path / "session.log"
    orphan = open(path, "ab")  # an earlier session's process, still running
    with launcher.replace_log(path) as fh:
        orphan.write(b"kernel 1,182\n")
        orphan.flush()
        fh.write(b"this session\n")
    orphan.close()
    assert path.read_bytes() == b"this session\n"
    first, fh1 = launcher.new_log(tmp_path / "logs", "store-key")
    second, fh2 = launcher.new_log(tmp_path / "logs", "store-key")
    fh1.close(), fh2.close()
    assert first != second and first.name.startswith("store-key-") and first.suffix == ".log"


def test_a_child_dies_with_its_parent(tmp_path):
    """The parent killed with SIGKILL (nothing can clean up): the child it launched goes too (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    child = "from bench.execution.launcher import die_with_parent; import time; die_with_parent(); time.sleep(300)"
    parent = (f"import sys; from bench.execution import launcher\n"
              f"proc = launcher.start([sys.executable, '-c', {child!r}], open({str(tmp_path / 'c.log')!r}, 'xb'), "
              f"launcher.child_env())\nprint(proc.pid, flush=True)\nimport time; time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=launcher.child_env())
    child_pid = int(proc.stdout.readline())
    time.sleep(1.0)  # the child has asked for its signal
    assert _alive(child_pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child_pid)
