"""`bench capacity`: SLO parsing, the search on a fake probe, and the knee of a paced server through the workers."""

import subprocess
import sys

import pytest

from bench.capacity.search import (
    check_grid,
    judge,
    parse_slo,
    search_capacity,
    slo_metric,
)
from bench.errors import BenchInputError


def test_slo_strings():
    assert parse_slo("ttft_p99_ms=500, tpot_p50_ms=50") == {"ttft_p99_ms": 500.0, "tpot_p50_ms": 50.0}
    assert slo_metric("tpot_p50_ms") == "tpot_median_ms" and slo_metric("e2el_p90_ms") == "e2el_p90_ms"
    for bad, needle in (("ttft_p95_ms=500", "valid names"), ("ttft_p99_ms", "NAME=MS"), ("ttft_p99_ms=fast", "number"),
                        ("ttft_p99_ms=-1", "positive"), ("", "required"), ("tpot_p99_ms=1,tpot_p99_ms=2", "twice")):
        with pytest.raises(BenchInputError, match=needle):
            parse_slo(bad)


def test_grid_and_bounds():
    assert check_grid("request_rate", 1.0, 16.0, 0.5) == (0.5, 2, 32)
    assert check_grid("max_concurrency", 1, 64, None) == (1, 1, 64)
    for args, needle in ((("max_concurrency", 1, 8, 0.5), "integer"), (("request_rate", 4, 2, 1), "inverted"),
                         (("rate", 1, 2, 1), "unknown capacity axis")):
        with pytest.raises(BenchInputError, match=needle):
            check_grid(*args)


def knee_probe(knee, calls):
    """A probe whose p99 TTFT is 100 ms up to the knee and jumps past it (SLO 200 ms)."""
    def probe(value):
        calls.append(value)
        ttft = 100.0 if value <= knee else 1000.0
        return judge(value, [{"ttft_p99_ms": ttft, "request_throughput": value}], [], {"ttft_p99_ms": 200.0})
    return probe


@pytest.mark.parametrize("knee", [1, 5, 37, 64])
def test_integer_search_finds_the_knee_in_few_probes(knee):
    calls = []
    c = search_capacity(knee_probe(knee, calls), "max_concurrency", 1, 64, strategy="grow", slo={"ttft_p99_ms": 200.0})
    assert c.capacity == knee
    assert c.first_miss == (None if knee == 64 else knee + 1)
    assert len(calls) <= 2 * 6 + 1  # doublings to 64, then a bisection of the last gap


def test_rate_search_is_exact_to_its_tolerance():
    calls = []
    c = search_capacity(knee_probe(3.1, calls), "request_rate", 0.25, 16.0, tolerance=0.25)
    assert c.capacity == 3.0 and c.first_miss == 3.25  # 3.0 meets, 3.25 misses: within 0.25 of the knee
    assert calls[:5] == [0.25, 0.5, 1.0, 2.0, 4.0]  # bracketing by doubling


def test_judge_lets_the_worst_pass_decide_and_failures_miss():
    slo = {"ttft_p99_ms": 200.0}
    assert judge(1, [{"ttft_p99_ms": 150.0}, {"ttft_p99_ms": 190.0}], [], slo).meets
    r = judge(1, [{"ttft_p99_ms": 150.0}, {"ttft_p99_ms": 210.0}], [], slo)
    assert not r.meets and r.worst == {"ttft_p99_ms": 210.0} and r.violated == ("ttft_p99_ms",)
    assert not judge(1, [{"ttft_p99_ms": 150.0}], ["error: 3 of 8 requests failed"], slo).meets
    assert not judge(1, [{"ttft_p99_ms": None}], [], slo).meets  # a figure the pass lacks cannot meet a bound
    assert not judge(1, [], [], slo).meets


def test_a_capacity_decided_on_a_busy_machine_says_so_in_its_answer():
    """The first hour on a 2-core laptop: 'capacity: none' from a TPOT p90 of 113.7 ms measured under others' load."""
    from bench.capacity.search import Capacity, capacity_markdown

    slo = {"tpot_p90_ms": 30.0}
    busy = [("other processes used 1.4 of 2 core(s)",), ()]
    lower = judge(1, [{"tpot_p90_ms": 113.7}, {"tpot_p90_ms": 35.0}], [], slo, busy)
    assert lower.busy_passes == 1 and lower.busy == "other processes used 1.4 of 2 core(s)"
    c = Capacity("max_batch_size", slo, 1, 64, 1, "grow", None, 1, [lower])
    text = capacity_markdown(c, "fake/m/bf16 on w")
    answer = text.split("**capacity: none**", 1)[1].splitlines()
    assert answer[1].startswith("⚠ not a result: measured on a busy machine (max_batch_size 1: 1 of 2 pass(es) "
                                "(other processes used 1.4 of 2 core(s)))")
    assert "| 1 | 1 | no | 113.7 ✗ | 2 / 0 | ⚠ 1 of 2 |" in text
    # an idle machine: the answer stands alone; a busy probe that decides nothing does not taint it
    idle = judge(2, [{"tpot_p90_ms": 20.0}], [], slo, [()])
    far = judge(8, [{"tpot_p90_ms": 90.0}], [], slo, [("load average 3.1 on 2 core(s)",)])
    c = Capacity("max_batch_size", slo, 1, 64, 1, "grow", 2, 4, [idle, judge(4, [{"tpot_p90_ms": 40.0}], [], slo), far])
    assert c.busy_text() is None and "not a result" not in capacity_markdown(c, "x")


def test_bad_slo_exits_2_before_any_work(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "capacity", "--preset", "default", "--upper", "8",
                          "--slo", "ttft_p95_ms=500", "--store", str(tmp_path / "c.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "unknown bound 'ttft_p95_ms'" in out.stderr and not (tmp_path / "c.jsonl").exists()


def test_an_axis_the_backend_lacks_is_refused(tmp_path):
    from bench.capacity.probes import check_axis
    from bench.spec.matrix import parse_matrix

    m = parse_matrix({"backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1],
                      "workloads": ["w"], "device": "cpu",
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}})
    with pytest.raises(BenchInputError, match="max_batch_size"):
        check_axis(m.cells[0], "request_rate")


pytest.importorskip("aiohttp")


def test_the_search_finds_a_paced_servers_knee_through_the_workers(tmp_path):
    """A server whose ITL doubles past 4 streams in flight: capacity under TPOT p50 <= 15 ms is concurrency 4."""
    from rich.console import Console

    from bench.capacity.driver import capacity_matrix
    from bench.results import query
    from bench.results.records import CapacityProbe
    from bench.serving.paced_server import TestServer
    from bench.spec.matrix import parse_matrix

    with TestServer(ttft_s=0.01, itl_s=0.01, knee=4, load_slowdown=1.0) as srv:
        m = parse_matrix({
            "name": "cap", "backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"],
            "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0, "runs": 1,
            "timeout_s": 60, "build_timeout_s": 60,
            # 12 requests: past the knee most of them run slowed at every probe (5: 10 of 12, 8: 8 of 12), so the
            # median misses; the paced server's time is real, 24 took twice as long to say the same
            "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 12}},
            "options": {"base_url": srv.base_url},
        })
        slo = {"tpot_p50_ms": 15.0}
        missed, text = capacity_matrix(m, slo, "max_concurrency", 1, 8, None, "grow", tmp_path / "c.jsonl",
                                       Console(stderr=True, quiet=True), tmp_path / "report")
    assert missed == 0
    assert "capacity: max_concurrency = 4 requests in flight" in text, text
    records = [r for r in query.load([tmp_path / "c.jsonl"]) if isinstance(r, CapacityProbe)]
    values = [r.target["value"] for r in records]
    assert values == [1, 2, 4, 8, 6, 5], values  # grow, then bisect (4, 8)
    assert all(r.context.command == "capacity" and r.cell["options"]["max_concurrency"] == r.target["value"]
               for r in records)
    assert (tmp_path / "report" / "capacity.md").read_text() == text

    # `bench report` of the store rebuilds the same answer, bracket and probes from the records alone
    from bench.report.build import build_report

    build_report([tmp_path / "c.jsonl"], tmp_path / "stored")
    stored = (tmp_path / "stored" / "capacity.md").read_text()
    live = text.split("\n", 2)[2]  # without the invocation's heading
    assert "capacity: max_concurrency = 4 requests in flight** (bracket: 4 meets the SLO, 5 misses it; " \
           "resolution 1; grow)" in stored, stored
    rows = lambda md: [line.rsplit("|", 2)[0] for line in md.splitlines() if line.startswith("| ")]  # noqa: E731
    assert rows(stored) == rows(live)  # every probe's row, its seconds aside (not stored)
    assert "agree" not in stored and "did not reproduce" not in stored  # one search: nothing to compare


def test_an_in_process_backend_is_searched_along_max_batch_size(tmp_path):
    """The fake backend's decode step costs 10 + 0.5 x batch ms: TPOT <= 14.25 ms holds up to batch 8."""
    from rich.console import Console

    from bench.capacity.driver import capacity_matrix
    from bench.spec.matrix import parse_matrix

    m = parse_matrix({"name": "capfake", "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"],
                      "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0, "runs": 2,
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 32}}})
    missed, text = capacity_matrix(m, {"tpot_p99_ms": 14.25}, "max_batch_size", 1, 32, None, "grow",
                                   tmp_path / "c.jsonl", Console(stderr=True, quiet=True), tmp_path / "r")
    assert missed == 0 and "capacity: max_batch_size = 8 batch size" in text, text
    assert "| 2 / 0 |" in text  # each probe: two fresh processes (runs)


def test_the_report_says_whether_repeated_searches_agree(tmp_path):
    """Two searches of one configuration under one SLO are repeats: the report says they agree, or flags it."""
    from rich.console import Console

    from bench.capacity.driver import capacity_matrix
    from bench.report.build import build_report
    from bench.spec.matrix import parse_matrix

    m = parse_matrix({"name": "rep", "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"],
                      "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0, "runs": 1,
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 16}}})
    quiet = Console(stderr=True, quiet=True)
    slo = {"tpot_p99_ms": 14.25}  # the fake backend meets it up to batch 8
    for i, upper in enumerate((16, 16, 4)):  # the third search stops at 4: it answers 4, not 8
        capacity_matrix(m, slo, "max_batch_size", 4, upper, None, "grow", tmp_path / f"s{i}.jsonl", quiet,
                        tmp_path / f"r{i}")
    build_report([tmp_path / "s0.jsonl", tmp_path / "s1.jsonl"], tmp_path / "agree")
    agree = (tmp_path / "agree" / "capacity.md").read_text()
    assert "2 searches under tpot_p99_ms <= 14.25 agree on max_batch_size: 8 (run " in agree and "disagree" not in agree
    build_report([tmp_path / "s0.jsonl", tmp_path / "s2.jsonl"], tmp_path / "differ")
    differ = (tmp_path / "differ" / "capacity.md").read_text()
    assert "⚠ fake/qwen-tiny/bf16 on w: the 2 searches under tpot_p99_ms <= 14.25 disagree on max_batch_size: 8 (run " \
           in differ and "the capacity did not reproduce" in differ, differ
    assert "the upper bound 4 meets it too" in differ  # the third search's bracket, rebuilt from its stored settings
    page = (tmp_path / "differ" / "dashboard.html").read_text()  # a store of probes alone still gets its dashboard
    assert "Capacity under an SLO" in page and "the capacity did not reproduce" in page

    # another configuration (a faster decode step: another cell, the same heading) is not a repeat
    faster = parse_matrix({"name": "rep", "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"],
                           "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0,
                           "runs": 1, "options": {"fake": {"step_ms": 5.0}},
                           "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 16}}})
    capacity_matrix(faster, slo, "max_batch_size", 4, 16, None, "grow", tmp_path / "s3.jsonl", quiet, tmp_path / "r3")
    build_report([tmp_path / "s0.jsonl", tmp_path / "s3.jsonl"], tmp_path / "two-cells")
    two = (tmp_path / "two-cells" / "capacity.md").read_text()
    assert "max_batch_size = 16 batch size" in two and "agree" not in two and "did not reproduce" not in two, two


def test_a_failed_probe_prints_the_first_line_of_its_error(tmp_path):
    """Each probe whose passes failed is named on the console with its first error line, not a Python list."""
    import io

    from rich.console import Console

    from bench.capacity.driver import capacity_matrix
    from bench.spec.matrix import parse_matrix

    m = parse_matrix({"name": "capfail", "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"],
                      "max_batch_sizes": [1], "workloads": ["w"], "device": "cpu", "trials": 1, "warmup": 0,
                      "options": {"fail": "error"},
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 8, "num_requests": 4}}})
    out = io.StringIO()
    missed, text = capacity_matrix(m, {"tpot_p99_ms": 100.0}, "max_batch_size", 1, 4, None, "grow", tmp_path / "c.jsonl",
                                   Console(file=out, width=300), tmp_path / "r")
    assert missed == 1
    said = [line for line in out.getvalue().splitlines() if "pass(es) failed" in line]
    assert said and said[0].endswith("probe at max_batch_size 1: 1 pass(es) failed: error: RuntimeError: fake backend: "
                                     "injected error (whole text in the store)")
    assert "probe at 1 failed: error: RuntimeError: fake backend: injected error" in text and "['" not in text
