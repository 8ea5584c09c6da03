"""One log per worker process; a death is classified from that process's own exit status and output."""

import os
from pathlib import Path

import pytest

from bench.execution import launcher
from bench.execution.launcher import oom_kill_evidence
from bench.execution.supervisor import GroupItem, GroupJob, supervise_group
from bench.spec.matrix import parse_matrix
from bench.workloads.workload import cached_workload

ROOT = Path(__file__).resolve().parent.parent
# Imported by every worker at start-up (PYTHONPATH): the first worker prints an OOM line, as a
# worker whose cell ran out of memory does, and leaves a flag so the later ones stay quiet.
SITECUSTOMIZE = """
import os, sys
flag = os.environ["BENCH_TEST_FLAG"]
if not os.path.exists(flag):
    open(flag, "w").close()
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
"""


def group(tiny_sharegpt, tmp_path, fail, sizes=(1, 4), env=None):
    m = parse_matrix({
        "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": list(sizes),
        "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0, "options": {"fail": fail},
        "workload": {"w": {"num_requests": 4, "path": str(tiny_sharegpt), "max_output_len": 8}},
    })
    _, wl_file = cached_workload(m.cells[0].workload, tmp_path / "cache")
    items = [GroupItem(c, [0], str(wl_file)) for c in m.cells]
    job = GroupJob(m.cells[0].build_key(), items, tmp_path / "engines", warmup=0, build_timeout_s=30,
                   cell_timeout_s=30, log_dir=tmp_path / "logs", log_prefix="store-key", env=env or {})
    events = []
    supervise_group(job, events.append)
    return m, job, {e["cell_id"]: e for e in events if e.get("event") == "result"}


def test_a_crash_after_another_worker_printed_an_oom_is_an_error(tiny_sharegpt, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "BENCH_TEST_FLAG": str(tmp_path / "flag")}
    m, job, results = group(tiny_sharegpt, tmp_path, "crash", env=env)
    first, second = (results[c.cell_id] for c in m.cells)
    # Each worker process wrote a file of its own; only the first one's holds the OOM line.
    assert len(job.logs) == 2 and len(set(job.logs)) == 2
    assert "CUDA out of memory" in job.logs[0].read_text()
    assert "CUDA out of memory" not in job.logs[1].read_text()
    assert first["status"] == "oom"  # that process itself reported an out-of-memory
    assert second["status"] == "error" and "status 3" in second["error"]
    assert str(job.logs[1]) in second["error"] and str(job.logs[0]) not in second["error"]
    # A later run of the same group starts new files, never appending to these.
    before = {p: p.read_bytes() for p in job.logs}
    group(tiny_sharegpt, tmp_path, "crash", sizes=(1,), env=env)
    assert all(p.read_bytes() == data for p, data in before.items())
    assert len(list((tmp_path / "logs").iterdir())) == 3


def test_a_sigkill_without_evidence_is_an_error(tiny_sharegpt, tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "oom_kill_counter", lambda: ("/cg/memory.events", 4))  # never rises
    m, job, results = group(tiny_sharegpt, tmp_path, "sigkill", sizes=(1,))
    rec = results[m.cells[0].cell_id]
    assert rec["status"] == "error" and "killed by SIGKILL" in rec["error"]
    assert "oom_kill in /cg/memory.events did not rise" in rec["error"] and str(job.logs[0]) in rec["error"]
    monkeypatch.setattr(launcher, "oom_kill_counter", lambda: None)  # nothing readable
    _, _, results = group(tiny_sharegpt, tmp_path, "sigkill", sizes=(1,))
    rec = next(iter(results.values()))
    assert rec["status"] == "error" and "no cgroup OOM-kill counter readable" in rec["error"]


def test_a_sigkill_while_the_oom_killer_acted_is_an_oom(tiny_sharegpt, tmp_path, monkeypatch):
    counts = iter([3, 5])  # at the worker's start, after its death
    monkeypatch.setattr(launcher, "oom_kill_counter", lambda: ("/cg/memory.events", next(counts)))
    m, _, results = group(tiny_sharegpt, tmp_path, "sigkill", sizes=(1,))
    rec = results[m.cells[0].cell_id]
    assert rec["status"] == "oom"
    assert "oom_kill in /cg/memory.events rose from 3 to 5" in rec["error"]


def test_oom_kill_evidence_needs_the_same_counter_to_rise():
    assert oom_kill_evidence(("/a", 1), ("/a", 2))
    assert oom_kill_evidence(("/a", 1), ("/a", 1)) is None
    assert oom_kill_evidence(("/a", 1), ("/b", 9)) is None
    assert oom_kill_evidence(None, ("/a", 1)) is None


def test_the_oom_kill_counter_reads_this_machines_cgroup():
    found = launcher.oom_kill_counter()
    if found is None:
        pytest.skip("no cgroup memory counters visible here")
    path, count = found
    assert Path(path).name in ("memory.events", "memory.oom_control") and count >= 0


def test_each_worker_log_says_which_phase_the_process_reached_and_how_long_each_took(tiny_sharegpt, tmp_path):
    """A worker killed by a time limit leaves no event; its log's timestamped phase lines say where it was."""
    m, job, results = group(tiny_sharegpt, tmp_path, "none", sizes=(1,))
    assert results[m.cells[0].cell_id]["status"] == "ok"
    phases = [line for line in job.logs[0].read_text().splitlines() if line.startswith("[bench worker ")]
    text = "\n".join(phases)
    assert "building" in phases[0] and "built in" in text and "loaded in" in text, text
    assert "warm-up (compilation and tuning happen here)" in text and "warm-up done in" in text, text
    assert phases[-1].endswith("trial 0"), text
