"""The Ray executor on a local Ray instance started by the test (ray.init(num_cpus=2)), with the fake backend."""

import _thread
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix
from bench.spec.narrow import narrow

ray = pytest.importorskip("ray")

MARK = "BENCH_RAY_TEST_MARK"  # in the Ray processes' environment: lets a test find their workers


@pytest.fixture(scope="module")
def local_ray():
    before = dict(os.environ)
    os.environ[MARK] = str(os.getpid())  # raylet and its workers inherit the environment at ray.init
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    # ray.init sets variables of its own (PYTHONBREAKPOINT, read at import): left set, every later test's workers would
    # differ from the zygote's environment and start as fresh processes (tests/test_zygote.py's own_zygote says so),
    # each paying torch's and transformers' imports again (the suite took 38 s longer on the 2-core machine).
    os.environ.clear()
    os.environ.update(before)


def matrix(**over):
    data = {"backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16", "int4"], "max_batch_sizes": [1],
            "workloads": ["w"], "device": "cpu", "executor": "ray", "trials": 1, "warmup": 0, "timeout_s": 300,
            "build_timeout_s": 300, "exclude": [{"precision": "int4", "wall_ms": 60000}],
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}}
    data.update(over)
    return parse_matrix(data)


def workers() -> list[int]:
    """Return the pids of live worker processes started under this test's Ray instance."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            env = (proc / "environ").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().split()[2]
        except OSError:
            continue
        if b"bench.execution.worker" in cmd and f"{MARK}={os.getpid()}".encode() in env and state != "Z":
            out.append(int(proc.name))
    return out


def wait(predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not predicate():
        time.sleep(0.1)
    return predicate()


def test_a_matrix_runs_on_ray_and_a_killed_actor_takes_only_its_cell(local_ray, tmp_path):
    # Group bf16 has three cells: the second sleeps a minute, and its actor is killed meanwhile. Group int4 (two
    # cells) runs beside it.
    m = matrix(options={"wall_ms": [100, 60000, 200]})
    store = tmp_path / "s.jsonl"
    result = {}
    runner = threading.Thread(target=lambda: result.update(summary=run_matrix(m, store, show_progress=False)))
    runner.start()

    def first_bf16():
        recs = list(ResultStore(store).records()) if store.exists() else []
        return next((r for r in recs if r["cell"]["precision"] == "bf16" and r["cell"]["options"]["wall_ms"] == 100), None)

    assert wait(lambda: first_bf16() or not runner.is_alive(), 240) and runner.is_alive(), "no first cell within 240 s"
    first = first_bf16()
    place = first["environment"]["placement"]
    assert place["executor"] == "ray" and place["node_id"] and place["host"]
    worker_pid = first["environment"]["pid"]
    time.sleep(1.5)  # the worker is now inside the minute-long cell
    os.kill(place["actor_pid"], signal.SIGKILL)
    runner.join(timeout=300)
    assert not runner.is_alive()
    recs = list(ResultStore(store).records())
    by_cell = {(r["cell"]["precision"], r["cell"]["options"]["wall_ms"]): r for r in recs}
    assert len(recs) == 5 == len(by_cell)  # every cell once: nothing measured twice into the store
    killed = by_cell[("bf16", 60000)]
    assert killed["status"] == "error" and "Ray actor" in killed["error"] and place["host"] in killed["error"]
    assert all(r["status"] == "ok" for k, r in by_cell.items() if k != ("bf16", 60000))
    # the third cell ran in a fresh actor after the death
    assert by_cell[("bf16", 200)]["environment"]["placement"]["actor_pid"] != place["actor_pid"]
    assert wait(lambda: not Path(f"/proc/{worker_pid}").exists() or worker_pid not in workers(), 10)
    assert result["summary"].statuses == {"ok": 4, "error": 1}
    # A re-run resumes: what is stored is not measured again (the slow cell is left out here: it takes a minute).
    again = run_matrix(narrow(m, only={"wall_ms": "100|200"}), store, show_progress=False)
    assert again.statuses == {} and again.skipped == 4


def test_ctrl_c_stops_every_worker_on_ray(local_ray, tmp_path):
    m = matrix(options={"wall_ms": 60000}, exclude=[])

    def interrupt_when_both_run():
        if wait(lambda: len(workers()) >= 2, 240):
            time.sleep(0.5)
        _thread.interrupt_main()  # Ctrl-C in the main thread, where run_matrix runs

    # A test run started in the background by a non-interactive shell inherits SIGINT ignored, and
    # interrupt_main then does nothing: give this process Python's own handler, as a terminal would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_when_both_run, daemon=True).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run_matrix(m, tmp_path / "s.jsonl", show_progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 200  # stopped, not waited for (each cell sleeps a minute)
    assert wait(lambda: workers() == [], 20), workers()
    assert not (tmp_path / "s.jsonl").exists() or list(ResultStore(tmp_path / "s.jsonl").records()) == []
