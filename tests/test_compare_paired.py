"""Two cells of one store compared round by round (bench.results.paired): `bench compare S S --base-only K=V
--head-only K=V`, paired where the cells took turns in one `bench run`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

from bench.cli import main
from bench.results import paired, stats
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix
from tests.support.folders import isolated
from tests.support.matrices import planted_matrix


def test_the_paired_test_judges_the_rounds_ratios_where_a_shared_drift_hides_the_change_from_two_samples():
    """By hand: a host drifting 40 % over four rounds, the head 10 % slower in each round (±1 %)."""
    base = [10.0, 12.0, 14.0, 11.0]
    head = [b * 1.1 * e for b, e in zip(base, [1.01, 0.99, 1.0, 1.0], strict=True)]
    d = np.log(head) - np.log(base)
    se = d.std(ddof=1) / math.sqrt(4)
    t = d.mean() / se
    rt = paired.paired_ratio_test(base, head, 0.99)
    assert rt.ratio == pytest.approx(math.exp(d.mean()))
    assert rt.p_value == pytest.approx(2 * stats.t_sf(abs(t), 3))
    half = stats.t_ppf(0.995, 3) * se
    assert (rt.low, rt.high) == (pytest.approx(math.exp(d.mean() - half)), pytest.approx(math.exp(d.mean() + half)))
    assert rt.significant and "df=3" in rt.method
    assert not stats.ratio_test(base, head, 0.99).significant  # as two independent samples: hidden by the drift
    assert paired.paired_ratio_test([1.0, 2.0], [1.5, 3.0]).p_value == 0.0  # zero spread of the ratios: exact
    assert paired.paired_ratio_test([1.0, 2.0], [1.0, 2.0]).p_value == 1.0
    for bad in (([1.0], [1.0]), ([1.0, 2.0], [1.0]), ([1.0, -2.0], [1.0, 2.0]), ([1.0, float("nan")], [1.0, 2.0])):
        with pytest.raises(ValueError):
            paired.paired_ratio_test(*bad)
    assert paired.paired_power_note(base, head, 0.05, 0.99) == ([], None)  # 4 rounds at this spread detect 5 %
    note, detects = paired.paired_power_note([1.0, 2.0, 3.0], [1.2, 1.9, 3.3], 0.05, 0.99)
    assert note and f"3 rounds detect only changes above {detects:.0%}" in note[0] and detects > 0.05


def _row(run_id: str, starts: dict[int, float], values: dict[int, float] | None = None):
    """A row as compare reads it: one context, one ok record per run (process), its start and its figure."""
    figures = values or {}

    def record(run: int, start: float | None):
        return NS(process_key=(run_id, run), started_at=start, metric=lambda m: figures.get(run, 1.0))

    recs = [record(run, start) for run, start in starts.items()]
    return NS(contexts=(NS(run_id=run_id),), context=NS(run_id=run_id), ok_records=recs)


def test_runs_are_paired_only_where_the_two_cells_took_turns_in_one_invocation():
    base = _row("r1", {0: 0.0, 1: 10.0, 2: 20.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    head = _row("r1", {0: 5.0, 1: 15.0, 2: 25.0}, {0: 1.1, 1: 2.2, 2: 3.3})
    rounds, why = paired.paired_runs(base, head)
    assert why is None and [(b[1], h[1]) for b, h in rounds] == [(0, 0), (1, 1), (2, 2)]
    assert paired.paired_values(base, head, rounds, "m") == ([1.0, 2.0, 3.0], [1.1, 2.2, 3.3])
    # one process measured both cells (one build key): a round's two cells in one process, still in turns
    same = _row("r1", {0: 1.0, 1: 11.0, 2: 21.0})
    assert paired.paired_runs(base, same)[0]
    # separate invocations: two samples, nothing to say
    assert paired.paired_runs(base, _row("r2", {0: 5.0, 1: 15.0, 2: 25.0})) == ([], None)
    # one invocation, but every base run before every head run: not in turns, and said
    rounds, why = paired.paired_runs(base, _row("r1", {0: 30.0, 1: 40.0, 2: 50.0}))
    assert rounds == [] and "did not take turns" in why
    rounds, why = paired.paired_runs(base, _row("r1", {0: 5.0, 1: 15.0}))
    assert rounds == [] and "not the same run indices" in why
    rounds, why = paired.paired_runs(base, _row("r1", {0: 5.0, 1: None, 2: 25.0}))
    assert rounds == [] and "start time is not stored" in why
    pooled = NS(**{**vars(head), "contexts": (NS(run_id="r1"), NS(run_id="r0"))})
    assert paired.paired_runs(base, pooled) == ([], None)


def test_a_stored_cell_matches_a_selection_by_axis_workload_option_and_alternatives():
    cell = {"backend": "hf", "precision": "bf16", "max_batch_size": 1, "workload": {"name": "syn"},
            "options": {"plant": "Qwen2MLP:2", "slowdown": 1.1}}
    assert paired.cell_matches(cell, {"plant": "Qwen2MLP:2", "max_batch_size": "1", "workload": "syn"})
    assert paired.cell_matches(cell, {"slowdown": "1.0|1.1", "backend": "hf"})
    assert not paired.cell_matches(cell, {"plant": "none"})
    assert not paired.cell_matches(cell, {"no_such_option": "x"})
    assert not paired.cell_matches({"options": "not a table"}, {"plant": "none"})


MATRIX = {
    "name": "ab", "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
    "max_batch_sizes": [1], "workloads": ["syn"], "trials": 1, "runs": 3, "warmup": 1, "timeout_s": 60,
    "options": {"noise": 0.01, "slowdown": [1.0, 1.25]},
    "workload": {"syn": {"source": "synthetic", "num_requests": 8, "input_len": 16, "output_len": 8}},
}


def test_two_cells_measured_in_turns_by_one_run_are_compared_round_by_round(tmp_path, capsys):
    """One `bench run` of a matrix holding both cells measures them in rounds; `bench compare S S --base-only
    slowdown=1.0 --head-only slowdown=1.25` matches them (slowdown ignored) and judges the rounds' ratios."""
    with isolated(tmp_path):
        store = Path("results/ab.jsonl")
        run_matrix(parse_matrix(MATRIX), store, engines_dir=Path("engines"), workload_cache=Path("wl"),
                   show_progress=False)
        args = ["compare", str(store), str(store), "--base-only", "slowdown=1.0", "--head-only", "slowdown=1.25",
                "--metrics", "tpot_median_ms,output_throughput", "--json", "ab.json"]
        assert main(args) == 1
        got = json.loads(Path("ab.json").read_text())
        rows = {r["metric"]: r for r in got["rows"]}
        assert set(rows) == {"tpot_median_ms", "output_throughput"}
        for r in rows.values():
            assert r["verdict"] == "regressed" and "paired: the two cells took turns" in r["note"], r
            assert r["paired"] is True and len(r["base_runs"]) == len(r["head_runs"]) == 3 and r["p_value"] < 0.01
        assert rows["tpot_median_ms"]["ratio"] == pytest.approx(1.25, rel=0.05)
        assert "rows noted paired: a paired t on the rounds' log ratios" in capsys.readouterr().out
        # a selection that matches nothing: refused before any statistics, naming the flag and what the store holds
        assert main(["compare", str(store), str(store), "--base-only", "slowdown=2.0", "--head-only",
                     "slowdown=1.25"]) == 2
        err = capsys.readouterr().err
        assert "--base-only slowdown=2.0 matches none of the 2 cell(s)" in err and "slowdown: 1.0, 1.25" in err


PLANTED_PAIR = planted_matrix("pair", ["none", "Linear:5"], runs=4, baseline="none")


@pytest.mark.slow
def test_a_cell_and_its_planted_twin_share_each_rounds_process_and_are_compared_in_it(tmp_path, monkeypatch):
    """A plant is set per pass, not built (bench.backends.hf.corrupt.replant), so a cell and its planted twin share a
    build key and one worker process a round: `bench run` measures both in each process, one after the other, and
    each profiles its window there; `bench compare S S --base-only plant=none --head-only plant=...` pairs them by
    round, and `--profile` attributes from those windows without a session of its own. On the GPU hosts a host-bound
    step moved 19-27 % between processes; in one process the pair shares the host's speed.

    Linear:5 (every matmul five times: about 4x the step here, in a few more operators, so quick to profile) and 4
    rounds (at 95 % the paired test needs the rounds' mean log ratio above 3.2 standard errors): this 2-core VM with a
    second test session beside it moved the baseline's step 22.9-42.7 ms across rounds, which hid Linear:3's +90 %
    over 3 rounds and Qwen2MLP:100's +62 %; Qwen2MLP:300's 3000 operators a step took 8 s a window."""
    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    with isolated(tmp_path):
        Path("pair.toml").write_text(PLANTED_PAIR)
        assert main(["run", "--matrix", "pair.toml", "--no-progress", "--profile-window"]) == 0
        records = [json.loads(line) for line in Path("results/pair.jsonl").read_text().splitlines()]
        measured = [r for r in records if r["kind"] == "measurement" and r["status"] == "ok"]
        assert len(measured) == 8
        pids = {}
        for r in measured:
            pids.setdefault(r["run"], set()).add(r["environment"]["pid"])
        assert sorted(pids) == [0, 1, 2, 3] and all(len(p) == 1 for p in pids.values()), pids  # one process a round
        assert len(set.union(*pids.values())) == 4
        # each window timed right after its cell's trials (`timed_stage_s`), both profiled after the round's last trial:
        # a profiler slows what runs after it in its process, the other cell's trials and window timing included
        windows = [json.loads(line) for line in Path("profiles/pair.jsonl").read_text().splitlines()]
        assert len(windows) == 8 and all(w["extra"]["profile"]["timed_stage_s"] > 0 for w in windows)
        for run in range(4):
            last_trial = max(r["ended_at"] for r in measured if r["run"] == run)
            assert all(w["started_at"] >= last_trial for w in windows if w["run"] == run)
        args = ["compare", "results/pair.jsonl", "results/pair.jsonl", "--base-only", "plant=none", "--head-only",
                "plant=Linear:5", "--profile", "--confidence", "0.95", "--json", "pair.json"]
        assert main(args) == 1
        got = json.loads(Path("pair.json").read_text())
        tpot = next(r for r in got["rows"] if r["metric"] == "tpot_median_ms")
        assert tpot["verdict"] == "regressed" and tpot["paired"] is True, tpot
        assert got["profiled"] == []  # the timed processes' windows: no session profiled
        cell = got["attribution"]["attributions"][0]
        assert {w["from"] for w in cell["windows"].values()} == {"the timed processes"}
        # every matmul five times: qwen-tiny's 151,936-row lm_head is most of its CPU step, so it comes first
        assert cell["first"]["name"] == "lm_head" and cell["first_category"] == "gemm", cell["first"]


def test_paired_rounds_too_spread_to_judge_say_when_the_host_changed_speed_between_a_rounds_two_cells(tmp_path, capsys):
    """An H100 of 2026-12-07 (tests/data/h100-planted-one-process): the baseline and rotary-outside shared each round's
    process, but the host's speed moved between the two cells (the probe loop 1.30-2.43 ms inside one process), so the
    rounds' ratios spread and +20.8 % was not significant. The row now says why: the probe ratio of each round and
    whether the rounds' ratios followed it. A steady host, or rounds that do not follow, say so or nothing."""
    store = str(Path(__file__).parent / "data" / "h100-planted-one-process" / "call2-rotary.jsonl.gz")
    out = tmp_path / "c.json"
    assert main(["compare", store, store, "--base-only", "plant=none", "--head-only", "plant=Qwen2RotaryEmbedding:50",
                 "--metrics", "tpot_median_ms,output_throughput", "--json", str(out)]) == 0
    rows = {r["metric"]: r for r in json.loads(out.read_text())["rows"]}
    for r in rows.values():
        assert r["verdict"] == "not significant" and r["paired"], r
        assert ("host speed inside the rounds: the same Python loop took 0.61-1.68x as long in the head's passes as in "
                "the base's of the same round") in r["note"]
        assert "and the rounds' ratios went with it (rank correlation 1.00 over 5 rounds, p 0.0083)" in r["note"], r
    capsys.readouterr()

    def row(values):  # {round: (probe ms, tpot ms)} of one side, one record a round
        recs = [NS(process_key=("r", k), metric=lambda m, p=p, t=t: {"host_probe_ms": p, "tpot_median_ms": t}.get(m))
                for k, (p, t) in values.items()]
        return NS(ok_records=recs)

    rounds = [(("r", k), ("r", k)) for k in range(4)]
    base = row({k: (1.0, 20.0) for k in range(4)})
    steady = row({k: (1.02, 24.0 + k) for k in range(4)})
    assert paired.paired_host_note(base, steady, rounds, "tpot_median_ms", -1) == ""  # the host kept its speed
    unfollowed = row({0: (0.6, 30.0), 1: (1.7, 22.0), 2: (1.0, 26.0), 3: (1.3, 28.0)})
    note = paired.paired_host_note(base, unfollowed, rounds, "tpot_median_ms", -1)
    assert "took 0.60-1.70x as long" in note and "did not follow it beyond chance" in note
    followed = row({0: (0.6, 18.0), 1: (1.7, 40.0), 2: (1.0, 24.0), 3: (1.3, 30.0)})
    assert "went with it" in paired.paired_host_note(base, followed, rounds, "tpot_median_ms", -1)
    # a throughput: higher is better, so the slower round is the lower ratio
    tput = row({0: (0.6, 60.0), 1: (1.7, 20.0), 2: (1.0, 40.0), 3: (1.3, 30.0)})
    assert "went with it" in paired.paired_host_note(base, tput, rounds, "tpot_median_ms", +1)
    unprobed = row({k: (None, 24.0) for k in range(4)})
    assert paired.paired_host_note(base, unprobed, rounds, "tpot_median_ms", -1) == ""
    hostile = row({0: (float("inf"), 30.0), 1: (10**400, 22.0), 2: (-1.0, 26.0), 3: (1.3, 28.0)})
    assert paired.paired_host_note(base, hostile, rounds, "tpot_median_ms", -1) == ""  # one round left: no spread
