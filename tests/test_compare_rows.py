"""A `bench compare` row cannot contradict itself (issue 34): it shows the statistic its change is
computed from, says when the runs are too few to detect the change it looks for, and which side is unstable."""

import math

import pytest

from bench.results import stats
from bench.results.compare import Comparison, Side, compare_metric, to_markdown

# The row: base runs 174.9 / 166.8 / 248.8, head 185.1 / 187.8 (output tok/s).
BASE, HEAD = [174.9, 166.8, 248.8], [185.1, 187.8]


def _markdown(row):
    c = Comparison([row], [], Side("base"), Side("head"), 0.05, 0.99, "t", {})
    return next(line for line in to_markdown(c).splitlines() if row.label in line)


def test_the_row_shows_what_the_change_is_computed_from():
    row = compare_metric("hf/bf16/bs1", "output_throughput", BASE, HEAD, factor=0.05, confidence=0.99, test="t")
    geo_b = math.exp(sum(map(math.log, BASE)) / 3)
    geo_h = math.exp(sum(map(math.log, HEAD)) / 2)
    assert row.statistic == "geometric mean"
    assert row.base_value == pytest.approx(geo_b) and row.head_value == pytest.approx(geo_h)
    assert row.ratio == pytest.approx(geo_h / geo_b)  # the t-test's ratio is that of these two figures
    line = _markdown(row)
    assert f"{geo_b:.4g} (geomean of 3 runs: 174.9, 166.8, 248.8)" in line
    assert f"{geo_h:.4g} (geomean of 2 runs: 185.1, 187.8)" in line
    assert f"{(geo_h / geo_b - 1) * 100:+.1f}%" in line
    # what is shown gives the change shown: no median beside a change of geometric means
    assert "174.9 ±" not in line


def test_a_comparison_too_small_for_its_factor_says_so_and_names_the_unstable_side():
    row = compare_metric("hf/bf16/bs1", "output_throughput", BASE, HEAD, factor=0.05, confidence=0.99, test="t")
    assert row.verdict == stats.NOT_SIGNIFICANT
    assert "too few runs to detect a 5% change" in row.note and "runs a side would detect 5%" in row.note
    assert "unstable on the base side:" in row.note and "head side:" not in row.note
    # steady runs, large enough: no power note
    steady = compare_metric("c", "output_throughput", [100.0, 100.2, 99.9, 100.1], [100.1, 99.8, 100.0, 100.2],
                            factor=0.05, confidence=0.99, test="t")
    assert "too few runs" not in steady.note and "unstable" not in steady.note


def test_a_no_regression_headline_says_when_its_runs_could_not_see_the_change_looked_for():
    """An H100 of 2026-12-07: MLP twice, +12 % TPOT over 5 paired rounds that detect only changes above 37 %, headed
    "no regression in 7 judged rows": a gate reading it passed a real regression. The headline now says so."""
    from bench.results.attribution import Explanation
    from bench.study.compare import comparison_dict

    weak = compare_metric("hf/bf16/bs1", "output_throughput", BASE, HEAD, factor=0.05, confidence=0.99, test="t")
    steady = compare_metric("c", "output_throughput", [100.0, 100.2, 99.9, 100.1], [100.1, 99.8, 100.0, 100.2],
                            factor=0.05, confidence=0.99, test="t")
    assert weak.detects_only > 0.05 and steady.detects_only is None
    c = Comparison([weak, steady], [], Side("base"), Side("head"), 0.05, 0.99, "t", {}, Explanation())
    assert c.exit_status == 0  # the gate's verdict is unchanged; what it rests on is said
    assert c.headline() == (f"no regression in 2 judged rows (0 improvement(s)), 1 of them not significant with too "
                            f"few runs to detect a 5% change (they detect only changes above {weak.detects_only:.0%})")
    assert f"only changes above {weak.detects_only:.0%}" in weak.note  # the same figure as the row's note
    assert comparison_dict(c)["rows"][0]["detects_only"] == weak.detects_only
    steady_only = Comparison([steady], [], Side("base"), Side("head"), 0.05, 0.99, "t", {})
    assert steady_only.headline() == "no regression in 1 judged row (0 improvement(s))"


def test_detectable_change_and_runs_needed():
    sd = 0.02  # 2 % between runs
    r3 = stats.detectable_ratio(sd, 3, 3, 0.99)
    r10 = stats.detectable_ratio(sd, 10, 10, 0.99)
    assert r10 < r3 and r3 > 1.05  # 3 vs 3 runs at 2 % spread cannot see 5 % at 99 % confidence
    n = stats.runs_needed(sd, 0.05, 0.99)
    assert math.log(stats.detectable_ratio(sd, n, n, 0.99)) <= math.log1p(0.05)
    assert math.log(stats.detectable_ratio(sd, n - 1, n - 1, 0.99)) > math.log1p(0.05)
    # hand check against the normal approximation for large n: (z_.995 + z_.8) * sd * sqrt(2/n)
    assert math.log(stats.detectable_ratio(sd, 500, 500, 0.99)) == pytest.approx((2.5758 + 0.8416) * sd * math.sqrt(2 / 500), rel=0.01)


# ---- a withheld verdict does not pass a gate (issue 47.5) ----------------------------------------


def _tuned_store(tmp_path, name, cells):
    """Write a store of 3 runs x 2 trials per cell: {cell_id: (output tok/s, tuned digest)}."""
    from tests.support.records import make_record
    from tests.support.synthetic import write_store

    recs = []
    for cell_id, (value, digest) in cells.items():
        cell = {"backend": "fake", "model": "m", "precision": cell_id, "max_batch_size": 1, "device": "cpu",
                "options": {}, "workload": {"name": "w"}}
        extra = {"inductor": {"coordinate_descent_tuning": True, "tuned": {"kernels": 17, "digest": digest}}}
        recs += [make_record(cell_id, cell=cell, run=r, trial=t, run_id=name, output_throughput=value + r * 0.5,
                             extra=extra) for r in range(3) for t in range(2)]
    write_store(tmp_path / f"{name}.jsonl", recs)
    return str(tmp_path / f"{name}.jsonl")


def test_a_head_whose_tuned_kernels_differ_exits_4_and_the_headline_counts_it(tmp_path, capsys):
    """The issue's case: -82.6 % on a cell whose tuned kernels differ was 'kernels differ (was: regressed)' under a
    'no regression' headline, exit 0."""
    import json

    from bench.cli import main
    from bench.results.compare import NOT_JUDGED_EXIT

    base = _tuned_store(tmp_path, "base", {"bf16": (144.0, "c38cec28aa"), "int8": (200.0, "0035a36caa")})
    head = _tuned_store(tmp_path, "head", {"bf16": (25.0, "8a5e1145bb"), "int8": (200.0, "0035a36caa")})
    out = tmp_path / "c.json"
    code = main(["compare", base, head, "--metrics", "output_throughput", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == NOT_JUDGED_EXIT == 4
    headline = "no regression in 1 judged row (0 improvement(s)); 1 row not judged (1 kernels differ)"
    assert captured.out.startswith(f"## bench compare: {headline}\n")
    assert captured.err.rstrip().endswith(f"bench compare: {headline}")
    assert "| kernels differ | fake/bf16/bs1/w | output_throughput |" in captured.out and "-82." in captured.out
    got = json.loads(out.read_text())
    assert got["exit_status"] == 4 and got["not_judged"] == {"kernels differ": 1} and got["headline"] == headline

    # A regression keeps its priority: exit 1, and the rows not judged are still counted.
    slower = _tuned_store(tmp_path, "slower", {"bf16": (25.0, "8a5e1145bb"), "int8": (100.0, "0035a36caa")})
    assert main(["compare", base, slower, "--metrics", "output_throughput"]) == 1
    assert capsys.readouterr().out.startswith("## bench compare: 1 regression(s), 0 improvement(s) in 1 judged row; "
                                              "1 row not judged (1 kernels differ)")
    # Every row judged and none regressed: 0.
    same = _tuned_store(tmp_path, "same", {"bf16": (144.0, "c38cec28aa"), "int8": (200.0, "0035a36caa")})
    assert main(["compare", base, same, "--metrics", "output_throughput"]) == 0


def test_an_unstable_side_whose_host_speed_moved_says_so(tmp_path, capsys):
    """The noisy H100 of 2026-12-06: an idle host whose eager step moved 23-42 ms between processes. Where the runs'
    host probes (the same Python loop in each process) moved with them, the unstable note names the host's speed; a
    side whose probes agree, a side whose runs agree, or records from before the probe, get no such note."""
    from bench.cli import main
    from bench.results.records import new_context, new_record
    from bench.results.store import ResultStore
    from bench.spec.matrix import parse_matrix

    cell = parse_matrix({"name": "m", "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
                         "max_batch_sizes": [1], "workloads": ["syn"],
                         "workload": {"syn": {"source": "synthetic", "num_requests": 2, "input_len": 8,
                                              "output_len": 4}}}).cells[0]
    env = {"gpu_name": None, "torch": "2.13.0", "python": "3.11"}

    def store(name, tpots, probes):
        context = new_context("run", matrix="m", runs=len(tpots))
        with ResultStore(tmp_path / f"{name}.jsonl").writer() as s:
            for run, (tpot, probe) in enumerate(zip(tpots, probes, strict=True)):
                host = {} if probe is None else {"host_load": {"host_probe_ms": probe, "busy": []}}
                s.append(new_record("measurement", cell, {"status": "ok", "metrics": {"tpot_median_ms": tpot},
                                                          "extra": host, "started_at": 1.0, "ended_at": 2.0},
                                    context=context, run=run, environment=env))
        return str(tmp_path / f"{name}.jsonl")

    base = store("base", [29.1, 23.3, 40.2, 42.0, 24.3], [1.00, 0.80, 1.40, 1.45, 0.85])
    # the head's probes spread too, but its runs agree (a GPU-bound step): its host speed explains nothing
    head = store("head", [37.2, 39.0, 35.9, 38.9, 39.2], [1.30, 1.80, 1.28, 1.31, 1.30])
    md = tmp_path / "c.md"
    main(["compare", base, head, "--markdown", str(md)])
    line = next(x for x in md.read_text().splitlines() if "tpot_median_ms" in x)
    assert "unstable on the base side" in line
    assert "base side host speed: the same Python loop took 0.80-1.45 ms in the runs' processes (+81 %)" in line
    assert "head side host speed" not in line
    old = store("old", [29.1, 23.3, 40.2, 42.0, 24.3], [None] * 5)  # records from before the probe
    main(["compare", old, head, "--markdown", str(md)])
    line = next(x for x in md.read_text().splitlines() if "tpot_median_ms" in x)
    assert "unstable on the base side" in line and "host speed" not in line
    capsys.readouterr()
