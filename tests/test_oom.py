"""OOM boundary search: the search logic with a pure fake probe, then bench oom end to end with
the fake backend in real worker subprocesses."""

import math
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchInputError
from bench.machine.memory_cap import check_cap
from bench.oom.search import (
    ProbeFailed,
    ProbeOutcome,
    frontier_markdown,
    frontier_rows,
    probe_budget,
    probe_lengths,
    search_boundary,
)
from bench.results import query
from bench.results.store import ResultStore


def limit_probe(boundary, flaky=(), fail_status=None):
    """A probe that fits up to `boundary`; sizes in `flaky` fail on their second probe."""
    seen = {}

    def probe(b):
        seen[b] = seen.get(b, 0) + 1
        if fail_status and b == fail_status[0]:
            return ProbeOutcome(b, fail_status[1], error="boom")
        ok = b <= boundary and not (b in flaky and seen[b] % 2 == 0)
        return ProbeOutcome(b, "ok" if ok else "oom", peak_memory_gb=float(b))
    return probe


@pytest.mark.parametrize("strategy", ["grow", "bisect"])
@pytest.mark.parametrize("lower,upper", [(1, 256), (1, 1000), (1, 7), (3, 50), (1, 1)])
def test_search_finds_every_boundary_within_budget(strategy, lower, upper):
    for boundary in range(lower - 1, upper + 2):
        b = search_boundary(limit_probe(boundary), lower, upper, strategy)
        if boundary < lower:
            assert (b.largest_fit, b.smallest_oom) == (None, lower)
        elif boundary >= upper:
            assert (b.largest_fit, b.smallest_oom) == (upper, None)
        else:
            assert (b.largest_fit, b.smallest_oom) == (boundary, boundary + 1)
        assert not b.flaky_sizes
        assert len(b.probes) <= probe_budget(lower, upper, strategy)
        if strategy == "bisect" and lower == 1:  # the target, exactly
            assert len(b.probes) <= math.ceil(math.log2(upper / lower)) + 2


def test_grow_is_cheap_when_the_boundary_is_low():
    # 7B on a 24 GB card at 2048/2048: the boundary is a handful of sequences.
    grow = search_boundary(limit_probe(6), 1, 1024, "grow")
    bisect = search_boundary(limit_probe(6), 1, 1024, "bisect")
    assert [p.batch_size for p in grow.probes] == [1, 2, 4, 8, 6, 7, 6]
    assert len(grow.probes) < len(bisect.probes) <= 12


def test_flaky_size_is_reported_not_hidden():
    b = search_boundary(limit_probe(10, flaky={10}), 1, 64, "grow")
    assert b.flaky_sizes == [10]
    assert [(p.batch_size, p.status) for p in b.probes if p.batch_size == 10] == [(10, "ok"), (10, "oom")]
    assert (b.largest_fit, b.smallest_oom) == (9, 10)


def test_flaky_lower_bound_leaves_nothing_that_fits():
    b = search_boundary(limit_probe(1, flaky={1}), 1, 8, "grow")
    assert b.flaky_sizes == [1] and b.largest_fit is None and b.smallest_oom == 1


def test_search_never_probes_above_a_failure():
    mixed = search_boundary(lambda s: ProbeOutcome(s, "oom" if s == 2 else ("ok" if s <= 5 else "oom")), 1, 8, "grow",
                            confirm=False)
    assert mixed.largest_fit == 1 and mixed.smallest_oom == 2 and [p.batch_size for p in mixed.probes] == [1, 2]


def probe_record(size, status, trial=0, kind="oom-probe", run_id="oom-1", env=None):
    from tests.support.records import make_record

    cell = {"backend": "hf", "model": "m", "precision": "bf16", "options": {}, "device": "cuda", "max_batch_size": size}
    rec = make_record(f"c{size}", trial, status, cell=cell, kind=kind, cap=24.0, run_id=run_id, env=env,
                      **({"peak_memory_gb": 10.0 + size} if status == "ok" else {}))
    rec.extra["probe"] = {"max_input_len": 8, "max_output_len": 8}
    return rec


def test_frontier_reports_non_monotonic_records():
    recs = [probe_record(4, "ok"), probe_record(8, "oom"), probe_record(6, "ok"), probe_record(7, "oom"),
            probe_record(12, "ok", run_id="oom-2"), probe_record(6, "oom", trial=1),
            probe_record(5, "ok", kind="measurement")]  # a full run, not a probe: ignored
    (row,) = frontier_rows(recs)
    assert (row["largest_fit"], row["smallest_oom"], row["flaky_sizes"]) == (4, 6, [6, 12])
    assert row["peak_memory_gb_at_fit"] == 14.0 and row["probes"] == 6 and row["runs"] == 2
    assert "| hf | bf16 | - | 8/8 | 24 | 4 | 6 (OOM) | 14.00 | 6 (2) | 6, 12 |" in frontier_markdown([row])
    # probes from another environment are another frontier, never mixed into this one
    other = [probe_record(16, "ok", env={"gpu_name": "NVIDIA A10", "torch": "2.9"})]
    rows = frontier_rows(recs + other)
    assert len(rows) == 2 and "| environment |" in frontier_markdown(rows) and "NVIDIA A10 2.9" in frontier_markdown(rows)


def test_an_error_probe_stops_the_search_with_the_evidence():
    with pytest.raises(ProbeFailed) as info:
        search_boundary(limit_probe(100, fail_status=(4, "error")), 1, 64, "grow")
    assert info.value.outcome.status == "error" and [p.batch_size for p in info.value.boundary.probes] == [1, 2, 4]


@pytest.mark.parametrize("lower,upper,strategy", [(0, 8, "grow"), (-1, 8, "grow"), (9, 8, "grow"), (1, 8.5, "grow"),
                                                  (1, 8, "gallop"), (True, 8, "grow")])
def test_bad_bounds_are_refused(lower, upper, strategy):
    with pytest.raises(BenchInputError):
        search_boundary(limit_probe(3), lower, upper, strategy)


def test_probe_lengths_reach_the_final_length():
    assert probe_lengths(1024, 1024, 4) == (2044, 4)
    assert probe_lengths(16, 2, 4) == (16, 2)  # output shorter than the probe: the full run itself
    with pytest.raises(BenchInputError):
        probe_lengths(0, 16)


def test_cap_checks_use_nvml_info():
    check_cap(None, ["cuda"])
    check_cap(8, ["cpu"])  # CPU: an address-space limit
    h200 = lambda i: {"gpu_count": 1, "gpu_name": "H200", "gpu_memory_bytes": 150_000_000_000}  # noqa: E731
    check_cap(24, ["cuda"], gpu_info=h200)
    with pytest.raises(BenchInputError, match="larger than"):
        check_cap(200, ["cuda:0"], gpu_info=h200)
    with pytest.raises(BenchInputError, match="no GPU"):
        check_cap(24, ["cuda"], gpu_info=lambda i: {"gpu_count": 0})
    for bad in (0, -1, "24", True):
        with pytest.raises(BenchInputError, match="positive"):
            check_cap(bad, ["cpu"])


def test_cpu_cap_is_an_address_space_limit():
    code = ("import os, resource; os.environ['BENCH_GPU_MEMORY_GB'] = '3'; from bench.machine.memory_cap import apply_cap; "
            "print(apply_cap('cpu')['address_space_limit_bytes'], resource.getrlimit(resource.RLIMIT_AS)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3000000000", "3000000000"]
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 3_000_000_000  # this process untouched


MATRIX = """
name = "fk"
backends = ["fake"]
model = "qwen-tiny"
device = "cpu"
precisions = ["bf16"]
max_batch_sizes = [1, 64]
workloads = ["w"]
timeout_s = 30
build_timeout_s = 30
[options]
memory_gb = 2.0
{extra}
[workload.w]
source = "synthetic"
input_len = 64
output_len = 64
num_requests = 4
"""


def run_cli(tmp_path, *args, extra=""):
    (tmp_path / "m.toml").write_text(MATRIX.format(extra=extra))
    return main(["oom", "--matrix", str(tmp_path / "m.toml"), "--store", str(tmp_path / "s.jsonl"), *args])


def test_bench_oom_end_to_end_with_the_fake_backend(tmp_path, capsys):
    # 1 GB weights + bs x 128 tokens x 512 KiB fits 2 GB up to bs 14.
    assert run_cli(tmp_path, "--lengths", "64x64") == 0
    recs = query.load([tmp_path / "s.jsonl"])
    assert all(r.kind == "oom-probe" and r.target["max_input_len"] == 64 for r in recs)
    assert len({r.context.run_id for r in recs}) == 1 and recs[0].context.command == "oom"
    by_size = {r.cell["max_batch_size"]: r for r in recs}
    assert by_size[14].status == "ok" and by_size[15].status == "oom"
    assert by_size[14].cell["workload"]["input_len"] == 124 and by_size[14].metric("peak_memory_gb") > 1.9
    rows = frontier_rows(recs)
    assert [(r["largest_fit"], r["smallest_oom"]) for r in rows] == [(14, 15)]
    out = capsys.readouterr().out
    assert "| fake | bf16 | memory_gb=2.0 | 64/64 | device | 14 | 15 (OOM) |" in out
    # its store's name: a second store (results/head-oom.jsonl) never overwrites the first one's table
    assert (tmp_path / "dashboards" / "s" / "oom-frontier.md").is_file()
    # A re-run reuses every stored probe.
    n = len(recs)
    assert run_cli(tmp_path, "--lengths", "64x64") == 0
    assert len(list(ResultStore(tmp_path / "s.jsonl").records())) == n


def test_cap_emulates_a_smaller_device_and_is_recorded(tmp_path):
    assert run_cli(tmp_path, "--lengths", "64x64", "--gpu-memory-gb", "1.5") == 0
    rows = frontier_rows(query.load([tmp_path / "s.jsonl"]))
    assert [(r["gpu_memory_gb"], r["largest_fit"]) for r in rows] == [(1.5, 7)]  # 1 + 7 x 64 MiB <= 1.5 GB
    assert "| 1.5 |" in frontier_markdown(rows)


def test_flaky_band_in_the_fake_backend_is_reported(tmp_path, capsys):
    assert run_cli(tmp_path, "--lengths", "64x64", extra="oom_flaky_band = 0.05") == 0
    rows = frontier_rows(query.load([tmp_path / "s.jsonl"]))
    assert rows[0]["flaky_sizes"] and rows[0]["largest_fit"] < min(rows[0]["flaky_sizes"])
    assert "FLAKY" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--lower", "8", "--upper", "2"], "inverted"),
    (["--lower", "0"], "positive"),
    (["--gpu-memory-gb", "-3"], "positive"),
    (["--lengths", "64by64"], "INPUTxOUTPUT"),
    (["--strategy", "random"], "strategy"),
])
def test_bad_input_exits_2_before_any_probe(tmp_path, capsys, args, message):
    assert run_cli(tmp_path, *args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()


def test_report_puts_probes_in_the_frontier_and_mixes_capped_with_uncapped_runs(tmp_path):
    """`bench report` on a store holding capped probes and an uncapped full run: frontier + speedups."""
    from bench.report.build import build_report
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import load_matrix

    assert run_cli(tmp_path, "--lengths", "64x64", "--gpu-memory-gb", "1.5") == 0
    matrix = load_matrix(tmp_path / "m.toml")
    run_matrix(matrix, tmp_path / "s.jsonl", show_progress=False)  # full runs, no cap
    paths = build_report([tmp_path / "s.jsonl"], tmp_path / "rep", {"backend": "fake", "precision": "bf16", "max_batch_size": 1})
    assert "| 1.5 | 7 | 8 (OOM) |" in paths["frontier"].read_text()
    table = paths["markdown"].read_text()
    assert "| fake | " in table and "| bf16 | 1 |" in table and "| bf16 | 64 |" in table
    assert "oom-probe" not in table  # probes are not speedup rows
    assert paths["dashboard"].stat().st_size > 0


def test_a_failed_probe_prints_the_first_line_of_its_error(tmp_path, capsys):
    """A probe that errs leaves its search undecided: the console names it in one line, not its traceback."""
    assert run_cli(tmp_path, "--lengths", "64x64", extra='fail = "error"') == 1
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "ended error" in x]
    assert line.endswith("probe at batch size 1 ended error: RuntimeError: fake backend: injected error (whole text in "
                         "the store)") and "Traceback" not in err
    (rec,) = query.load([tmp_path / "s.jsonl"])
    assert "Traceback" in rec.error  # the record keeps the whole text


def test_a_search_table_goes_beside_its_matrix_report_for_the_default_store_and_by_store_name_otherwise():
    from bench.results.jsonl import search_report_dir

    assert search_report_dir("results/fk-oom.jsonl", "fk", "oom") == Path("dashboards/fk")
    assert search_report_dir(Path("results/fk-capacity.jsonl"), "fk", "capacity") == Path("dashboards/fk")
    assert search_report_dir("results/head-oom.jsonl", "fk", "oom") == Path("dashboards/head-oom")
    assert search_report_dir("elsewhere/fk-oom.jsonl", "fk", "oom") == Path("dashboards/fk-oom")
