"""bench compare: planted regressions through real fake-backend runs, bad input, and the asv suite."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.cli import main
from bench.errors import BenchInputError
from bench.results.compare import compare_stores, to_markdown
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix
from tests.support import ROOT
from tests.support.folders import isolated

IGNORE = ["--ignore-option", "seed,slowdown"]


def fake_matrix(slowdown=1.0, seed=0, noise=0.01):
    return parse_matrix({
        "name": "fk", "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
        "max_batch_sizes": [1, 4], "workloads": ["syn"], "trials": 2, "runs": 3, "warmup": 1, "timeout_s": 60,
        "options": {"noise": noise, "slowdown": slowdown, "seed": seed},
        "workload": {"syn": {"source": "synthetic", "num_requests": 16, "input_len": 32, "output_len": 16}},
    })


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Three real stores of the fake backend (1% per-step noise): base, an identical re-run, 10% slower."""
    root = tmp_path_factory.mktemp("stores")
    out = {}
    with isolated(root):  # a test's environment: its workers fork from the suite's zygote (tests/support/folders.py)
        for name, slowdown, seed in (("base", 1.0, 1), ("same", 1.0, 2), ("slow", 1.1, 3)):
            path = root / f"{name}.jsonl"
            run_matrix(fake_matrix(slowdown, seed), path, engines_dir=root / "engines",
                       workload_cache=root / "wl", show_progress=False)
            out[name] = path
    return out


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_planted_10pct_slowdown_is_flagged_noise_is_not(stores, tmp_path, capsys):
    assert main(["compare", str(stores["base"]), str(stores["same"]), *IGNORE]) == 0
    assert "no regression" in capsys.readouterr().out
    md = tmp_path / "pr" / "comment.md"
    assert main(["compare", str(stores["base"]), str(stores["slow"]), *IGNORE, "--markdown", str(md)]) == 1
    text = md.read_text()
    assert text.startswith("## bench compare: 12 regression(s)")
    # both directions: throughput down ~9.1% and latency up ~10% are each a regression
    assert "| **regressed** | fake/bf16/bs1/syn | output_throughput |" in text and "-9.1%" in text
    assert "| **regressed** | fake/bf16/bs4/syn | e2el_median_ms |" in text
    # the reverse comparison is an improvement, not a regression
    assert main(["compare", str(stores["slow"]), str(stores["base"]), *IGNORE]) == 0
    assert "improvement" in capsys.readouterr().out


def test_factor_and_significance_both_needed(stores):
    c = compare_stores(stores["base"], stores["slow"], ignore_options=["seed", "slowdown"], factor=0.15)
    assert not c.regressions and {r.verdict for r in c.rows} >= {"unchanged"}


def test_two_commits_in_one_store(stores, tmp_path):
    recs = []
    for name, commit in (("base", "a" * 40), ("slow", "b" * 40)):
        for r in records(stores[name]):
            r["context"]["commit"] = commit
            r["cell"]["options"].pop("seed"), r["cell"]["options"].pop("slowdown")  # same cells, two commits
            r["cell_id"] = "c" + str(r["cell"]["max_batch_size"])
            recs.append(r)
    store = write(tmp_path / "both.jsonl", recs)
    assert main(["compare", str(store), str(store), "--base-commit", "aaaa", "--head-commit", "bbbbbb"]) == 1
    assert main(["compare", str(store), str(store), "--base-commit", "bbbb", "--head-commit", "aaaa"]) == 0
    with pytest.raises(BenchInputError, match="commits in that store: aaaaaaaaaaaa, bbbbbbbbbbbb"):
        compare_stores(store, store, base_commit="1234", head_commit="aaaa")


def test_no_cells_in_common_is_refused(stores, capsys):
    assert main(["compare", str(stores["base"]), str(stores["slow"])]) == 2  # seed/slowdown change cell_id
    err = capsys.readouterr().err
    assert "no cells in common" in err and "--ignore-option" in err


def test_newer_schema_is_refused(stores, tmp_path, capsys):
    recs = records(stores["slow"])
    recs[0]["schema_version"] = 99
    newer = write(tmp_path / "newer.jsonl", recs)
    assert main(["compare", str(stores["base"]), str(newer), *IGNORE]) == 2
    assert "newer than this harness" in capsys.readouterr().err


def test_missing_metric(stores, tmp_path, capsys):
    recs = records(stores["slow"])
    for r in recs:
        r["metrics"].pop("e2el_p99_ms")
    head = write(tmp_path / "head.jsonl", recs)
    # asked for explicitly: refused
    assert main(["compare", str(stores["base"]), str(head), *IGNORE, "--metrics", "e2el_p99_ms"]) == 2
    assert "e2el_p99_ms" in capsys.readouterr().err
    # among the defaults: reported per cell, with a warning, never silently passed
    c = compare_stores(stores["base"], head, ignore_options=["seed", "slowdown"])
    missing = [r for r in c.rows if r.verdict == "missing"]
    assert len(missing) == 2 and all("missing on the head side" in r.note for r in missing)
    assert any("e2el_p99_ms is missing" in w for w in c.warnings)
    # rows not judged are counted beside the regressions, which keep their priority in the exit status
    assert "; 2 rows not judged (2 missing on one side)" in c.headline() and c.exit_status == 1
    assert ":warning:" in to_markdown(c)
    with pytest.raises(BenchInputError, match="unknown metric 'tok_s'"):
        compare_stores(stores["base"], head, metrics=["tok_s"])


def test_environment_mismatch_refused_unless_allowed(stores, tmp_path):
    recs = records(stores["same"])
    for r in recs:
        r["environment"]["torch"] = "0.0.1"
    head = write(tmp_path / "other-env.jsonl", recs)
    with pytest.raises(BenchInputError, match="different environments.*torch"):
        compare_stores(stores["base"], head, ignore_options=["seed", "slowdown"])
    c = compare_stores(stores["base"], head, ignore_options=["seed", "slowdown"], allow_env_mismatch=True)
    assert not c.regressions and any("environments differ" in w for w in c.warnings)


def test_failed_cell_on_head_is_a_regression(stores, tmp_path):
    recs = [r for r in records(stores["same"]) if r["cell"]["max_batch_size"] == 1]
    recs.append({**recs[0], "cell": {**recs[0]["cell"], "max_batch_size": 4}, "status": "oom", "metrics": None,
                 "cell_id": next(r["cell_id"] for r in records(stores["same"]) if r["cell"]["max_batch_size"] == 4)})
    head = write(tmp_path / "oom.jsonl", recs)
    c = compare_stores(stores["base"], head, ignore_options=["seed", "slowdown"])
    assert [(r.metric, r.note) for r in c.regressions] == [("status", "ok on base, oom on head")]
    assert c.exit_status == 1


def test_mann_whitney_with_three_runs_cannot_judge(stores, capsys):
    assert main(["compare", str(stores["base"]), str(stores["slow"]), *IGNORE, "--test", "mannwhitney"]) == 4  # the table, not judged
    assert "smallest possible p is 0.1" in capsys.readouterr().err


def test_one_run_is_inconclusive_not_passed(stores, tmp_path):
    """One process on a side: its trials, however many, do not make a verdict."""
    one = write(tmp_path / "one.jsonl", [r for r in records(stores["slow"]) if r["run"] == 0])
    c = compare_stores(stores["base"], one, ignore_options=["seed", "slowdown"], metrics=["output_throughput"])
    assert c.exit_status == 4 and c.rows and all(r.verdict == "inconclusive" for r in c.rows)  # the table, not judged
    assert any("no metric could be judged" in w and "at least 2 runs" in w for w in c.warnings)
    assert c.headline().startswith("no verdict: 0 judged rows; ")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("asv") is None, reason="asv is not installed (pip install asv)")
def test_asv_suite_flags_planted_regression(tmp_path):
    """Run the real asv suite's FakeCell twice per case and let `asv compare` judge the results."""
    conf = json.loads("\n".join(line for line in (ROOT / "asv.conf.json").read_text().splitlines()
                                if not line.strip().startswith("//")))
    conf.update(repo=str(ROOT), benchmark_dir=str(ROOT / "benchmarks"), results_dir=str(tmp_path / "results"),
                env_dir=str(tmp_path / "env"), html_dir=str(tmp_path / "html"))
    conf_path = tmp_path / "asv.conf.json"
    conf_path.write_text(json.dumps(conf))
    env = {**os.environ, "HOME": str(tmp_path)}  # asv's machine file goes here, not in the user's home
    git = ["git", "-C", str(ROOT), "rev-list", "--first-parent", "--max-count=3", "HEAD"]
    commits = subprocess.run(git, capture_output=True, text=True, check=True).stdout.split()
    if len(commits) < 3:
        pytest.skip("needs three commits in the checkout to label three asv result sets")
    asv = [sys.executable, "-m", "asv"]
    subprocess.run([*asv, "machine", "--yes", "--config", str(conf_path)], env=env, check=True, capture_output=True)
    for commit, slowdown, noise in zip(commits, ("1.0", "1.0", "1.1"), ("0", "0.01", "0.01"), strict=True):
        run = subprocess.run([*asv, "run", "--config", str(conf_path), "-E", f"existing:{sys.executable}", "--quick",
                              "--set-commit-hash", commit, "-b", "FakeCell", "--launch-method", "spawn"],
                             env={**env, "BENCH_ASV_FAKE_SLOWDOWN": slowdown, "BENCH_ASV_FAKE_NOISE": noise},
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr

    def compare(a, b):
        out = subprocess.run([*asv, "compare", "--config", str(conf_path), "--factor", "1.05", "--split", a, b],
                             env=env, capture_output=True, text=True, check=True).stdout
        # asv marks a worse value with "+" in the first column of its table
        return [line.strip().lstrip("|").strip() for line in out.splitlines() if "FakeCell" in line]

    noisy = compare(commits[0], commits[1])  # 0% vs 1% per-step noise: not a regression
    assert noisy and not any(line.startswith("+") for line in noisy)
    slowed = compare(commits[0], commits[2])  # 10% slower: every FakeCell value is flagged
    worse = [line for line in slowed if line.startswith("+")]
    assert len(worse) == 4, "\n".join(slowed)


def test_labels_name_the_options_that_tell_two_cells_apart():
    """Two bs1 cells that differ only in cache get labels that say so; a cell alone keeps its short label."""
    from bench.results.records import distinct_labels
    from tests.support.records import make_record

    def cell(cache, bs=1):
        return {"backend": "hf", "model": "m", "precision": "bf16", "max_batch_size": bs, "device": "cpu",
                "options": {"cache": cache, "attn": "sdpa"}, "workload": {"name": "w"}}

    recs = {"d": make_record("d", cell=cell("dynamic")), "s": make_record("s", cell=cell("static")),
            "b": make_record("b", cell=cell("static", 8))}
    assert distinct_labels(recs) == {"d": "hf/bf16/bs1/w [cache=dynamic]", "s": "hf/bf16/bs1/w [cache=static]",
                                     "b": "hf/bf16/bs8/w"}
