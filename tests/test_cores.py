"""The run setting `cores` (bench.machine.cores): each GPU cell's trials on the cores that probe fastest as they begin."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import BenchInputError
from bench.machine import cores as cores_mod
from bench.machine.cores import fastest, probe_cores
from bench.results.store import ResultStore
from bench.runner.matrix import invocation_digest, run_matrix
from bench.spec.narrow import narrow
from tests.support.matrices import fake_matrix

ROOT = Path(__file__).resolve().parent.parent


def matrix(tiny_sharegpt, **over):
    """The fake backend's matrix on a GPU device (the fake backend runs anywhere; only the setting's check knows)."""
    return fake_matrix(tiny_sharegpt, **{"device": "cuda", **over})


def test_the_cores_kept_are_those_within_the_margin_of_the_fastest():
    # the H100's two groups of vCPUs on 2026-12-07: 1.1-1.4 ms and 1.8-2.4 ms
    probes = {0: 1.21, 1: 2.10, 2: 1.30, 3: 1.19, 4: 2.33, 5: 1.45}
    assert fastest(probes) == [0, 2, 3]  # 1.45 > 1.2 x 1.19
    assert fastest(probes, within=1.25) == [0, 2, 3, 5]
    assert fastest({7: 2.0}) == [7]


def test_every_core_is_timed_and_the_threads_own_affinity_comes_back():
    mine = os.sched_getaffinity(0)
    probes = probe_cores(mine)
    assert set(probes) == mine and all(0 < ms < 1000 for ms in probes.values())
    assert os.sched_getaffinity(0) == mine


def test_pinning_reaches_every_thread_of_the_process():
    """A thread's affinity is its own (Linux): threads started before the pin (CUDA's, torch's, a sampler) are pinned
    too. In a child process, so that this one keeps its cores."""
    code = """
import os, threading
from bench.machine.cores import pin_process
stop = threading.Event()
t = threading.Thread(target=stop.wait); t.start()
core = min(os.sched_getaffinity(0))
pin_process({core})
masks = [sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir('/proc/self/task')]
stop.set(); t.join()
print(json.dumps({"masks": masks, "core": core}))
"""
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert len(seen["masks"]) >= 2 and all(m == [seen["core"]] for m in seen["masks"])


def test_the_default_pins_nothing_and_a_single_core_has_nothing_to_choose(monkeypatch):
    monkeypatch.setattr(cores_mod, "pin_process", lambda cores: pytest.fail("pinned"))
    assert cores_mod.apply("scheduled", {0, 1}) is None
    assert cores_mod.apply("fastest", {3}) == {"policy": "fastest", "pinned": [3], "probe_ms": {}}
    assert cores_mod.apply("fastest", None) == {"policy": "fastest", "pinned": [], "probe_ms": {}}


def test_cores_that_cannot_be_probed_leave_the_trials_as_scheduled_and_say_why(monkeypatch):
    """A core taken away since the worker started (a container's cpuset changed) fails sched_setaffinity: the trials
    run where the OS puts them, and the record says so, rather than the worker dying before its trials."""
    mine = os.sched_getaffinity(0)
    gone = max(mine) + 1000
    assert gone not in mine
    chosen = cores_mod.apply("fastest", mine | {gone})
    assert chosen["pinned"] == [] and chosen["error"].startswith("could not probe the cores:")
    assert os.sched_getaffinity(0) == mine  # the probing thread's own cores back


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to choose between")
def test_a_run_with_cores_fastest_records_what_each_cell_probed_and_pinned(tiny_sharegpt, tmp_path):
    m = narrow(matrix(tiny_sharegpt, cores="fastest"))
    store = tmp_path / "s.jsonl"
    assert run_matrix(m, store, show_progress=False).statuses == {"ok": 4}
    recs = list(ResultStore(store).records())
    allowed = {str(c) for c in os.sched_getaffinity(0)}
    for r in recs:
        chosen = r["extra"]["cores"]
        assert chosen["policy"] == "fastest" and set(chosen["probe_ms"]) == allowed
        best = min(chosen["probe_ms"].values())
        assert chosen["pinned"] == sorted(int(c) for c, ms in chosen["probe_ms"].items() if ms <= 1.2 * best)
        assert r["extra"]["host_load"]["host_probe_ms"] > 0  # the runs' probes, taken on the pinned cores
    # a run as the OS schedules it says nothing of cores, and is another invocation (never resumed into this one)
    plain = narrow(matrix(tiny_sharegpt))
    assert invocation_digest(plain) != invocation_digest(m)
    assert run_matrix(plain, tmp_path / "p.jsonl", show_progress=False).statuses == {"ok": 4}
    assert all("cores" not in r["extra"] for r in ResultStore(tmp_path / "p.jsonl").records())
    assert json.loads(json.dumps(recs[0]["extra"]["cores"])) == recs[0]["extra"]["cores"]


def test_the_setting_is_checked_before_any_work(tiny_sharegpt):
    with pytest.raises(BenchInputError, match="cores .*must be one of 'scheduled', 'fastest', got 'fast'"):
        matrix(tiny_sharegpt, cores="fast")
    cpu = matrix(tiny_sharegpt, device="cpu", cores="fastest")  # parsed: --only may keep GPU cells of a mixed matrix
    with pytest.raises(BenchInputError, match="compute on the CPU.*at 'scheduled' for them, or run them in a matrix of their own"):
        narrow(cpu)
    with pytest.raises(BenchInputError, match="compute on the CPU"):
        narrow(matrix(tiny_sharegpt, device="cpu"), cores="fastest")  # `bench run --cores fastest`
    assert narrow(matrix(tiny_sharegpt), cores="fastest").settings.cores == "fastest"


def test_a_worker_that_cannot_read_its_cores_measures_as_scheduled(tiny_sharegpt, tmp_path, monkeypatch):
    """Where the platform cannot say which cores a process may use (allowed_cores() is None), a cell asking for
    "fastest" is measured where the OS puts it and its records say nothing was pinned; the worker reaches every trial."""
    from bench.execution import worker
    from bench.workloads.workload import cached_workload

    monkeypatch.setattr(cores_mod, "allowed_cores", lambda: None)
    cell = narrow(matrix(tiny_sharegpt, cores="fastest")).cells[0]
    _, wl_file = cached_workload(cell.workload, tmp_path / "workloads")
    events = []
    worker.measure_group({"build_key": cell.build_key().to_dict(), "engines_dir": str(tmp_path / "engines"),
                          "settings": {"warmup": 0, "cores": "fastest"},
                          "cells": [{"cell": cell.to_dict(), "trials": [0, 1], "workload_file": str(wl_file)}]},
                         events.append)
    results = [e for e in events if e["event"] == "result"]
    assert [r["status"] for r in results] == ["ok", "ok"], results
    assert all(r["extra"]["cores"] == {"policy": "fastest", "pinned": [], "probe_ms": {}} for r in results)
