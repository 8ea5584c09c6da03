"""One invocation, one run context: a new `bench run` never joins an earlier one's context; the same invocation,
interrupted, is resumed under its own run id; the progress counts each cell once and names each failure."""

import io
import json
import re

from rich.console import Console

from bench.cli import main
from bench.results import query
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix

MATRIX = """
name = "ctx"
backends = ["fake"]
model = "qwen-tiny"
device = "cpu"
precisions = ["bf16"]
max_batch_sizes = [1]
workloads = ["w"]
trials = 1
warmup = 0
runs = 1
timeout_s = 60

[workload.w]
source = "synthetic"
num_requests = 2
input_len = 8
output_len = 4
"""


def fake_matrix(**over):
    data = {"name": "ctx", "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
            "max_batch_sizes": [1], "workloads": ["w"], "trials": 1, "warmup": 0, "runs": 2, "timeout_s": 60,
            "build_timeout_s": 60,
            "workload": {"w": {"source": "synthetic", "num_requests": 2, "input_len": 8, "output_len": 4}}}
    data.update(over)
    return parse_matrix(data)


def console():
    """Return a console that is no terminal (one line per finished cell), and its text."""
    out = io.StringIO()
    return Console(file=out, width=400, soft_wrap=True), out


def run_ids(store):
    return {(r.context.run_id, r.run) for r in query.load([store])}


def test_more_runs_after_a_finished_invocation_is_a_new_run_whose_id_the_records_carry(tmp_path, capsys):
    (tmp_path / "m.toml").write_text(MATRIX)
    store = tmp_path / "s.jsonl"
    assert main(["run", "--matrix", "m.toml", "--store", str(store), "--runs", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    first = re.search(r"new run (\S+): 1 process\(es\) to measure\n", err).group(1)
    assert f"run id {first}" in err and run_ids(store) == {(first, 0)}

    # As a new user would: two runs after a one-run invocation. The old run is not appended to.
    assert main(["run", "--matrix", "m.toml", "--store", str(store), "--runs", "2", "--no-progress"]) == 0
    err = capsys.readouterr().err
    second = re.search(r"new run (\S+): 2 process\(es\) to measure \(run (\S+) is another invocation: runs 1 -> 2\)",
                       err)
    assert second and second.group(2) == first and second.group(1) != first
    assert f"run id {second.group(1)}" in err
    assert run_ids(store) == {(first, 0), (second.group(1), 0), (second.group(1), 1)}
    (row,) = query.select(query.load([store])).rows  # the row is the new run's two processes alone
    assert row.context.run_id == second.group(1) and {r.run for r in row.records} == {0, 1}

    # The same invocation again: nothing to measure, and no run id that no record carries.
    assert main(["run", "--matrix", "m.toml", "--store", str(store), "--runs", "2", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "nothing to measure: all 2 process(es) already stored" in err and "run id" not in err


def test_an_interrupted_invocation_is_resumed_under_its_own_id_and_a_changed_one_is_not(tmp_path):
    store = tmp_path / "s.jsonl"
    whole = run_matrix(fake_matrix(), store, show_progress=False)
    assert whole.statuses == {"ok": 2} and not whole.resumed
    # Interrupted after its first process: the store holds 1 of its 2.
    lines = [line for line in store.read_text().splitlines() if json.loads(line)["run"] == 0]
    store.write_text("\n".join(lines) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text(store.read_text())

    con, out = console()
    resumed = run_matrix(fake_matrix(), store, show_progress=False, console=con)
    assert f"resuming run {whole.run_id}: 1 of 2 processes stored" in out.getvalue()
    assert resumed.resumed and resumed.run_id == whole.run_id and resumed.statuses == {"ok": 1}
    assert run_ids(store) == {(whole.run_id, 0), (whole.run_id, 1)}

    # A changed setting (more trials per process) is another invocation: a new context, measured afresh.
    con, out = console()
    changed = run_matrix(fake_matrix(trials=2), other, show_progress=False, console=con)
    assert not changed.resumed and changed.run_id != whole.run_id
    assert (f"new run {changed.run_id}: 2 process(es) to measure (run {whole.run_id} is another invocation: "
            "trials 1 -> 2)") in out.getvalue()
    assert run_ids(other) == {(whole.run_id, 0), (changed.run_id, 0), (changed.run_id, 1)}


def test_progress_counts_each_cell_once_and_prints_each_failures_first_line(tmp_path):
    """A failed build fails every trial of its group's cells: each cell is still counted once, never `cell 3/2`."""
    m = fake_matrix(max_batch_sizes=[1, 4], trials=2, runs=1, options={"fail": "build-oom"})
    con, out = console()
    summary = run_matrix(m, tmp_path / "s.jsonl", console=con)
    assert summary.statuses == {"oom": 4}  # 2 cells x 2 trials, each an outcome
    counted = re.findall(r"^cell (\d+)/(\d+) (\w+): (.+?) \(\S+ elapsed\): (.*)$", out.getvalue(), re.M)
    assert [(i, n, status) for i, n, status, _, _ in counted] == [("1", "2", "oom"), ("2", "2", "oom")]
    first = query.load([tmp_path / "s.jsonl"])[0].error.splitlines()[0]
    assert all(line == first for *_, line in counted) and first.startswith("build/load: ")

    # Without the display (--no-progress), each failed cell still says why, in one line.
    con, out = console()
    run_matrix(m, tmp_path / "again.jsonl", console=con, show_progress=False)
    said = [line for line in out.getvalue().splitlines() if line.startswith("fake/")]
    assert len(said) == 2 and all(line.endswith(f": oom: {first}") for line in said)
