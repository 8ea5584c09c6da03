"""What a new user reads on the console (issue 34): command descriptions, the last lines of `bench run`."""

import argparse
from pathlib import Path

import pytest

from bench.cli import build_parser
from bench.runner.matrix import statuses_text
from bench.study.run import written_text


@pytest.mark.parametrize("command", ["run", "study", "profile", "presets", "oom", "compare"])
def test_commands_have_a_description(command):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    description = sub.choices[command].description
    assert description and len(description) > 60, f"`bench {command} --help` says nothing about what it does"


def test_run_summary_in_words_and_every_file_named():
    assert statuses_text({"ok": 24, "oom": 2}) == "24 ok, 2 oom"
    assert statuses_text({}) == "nothing new"
    d = Path("dashboards/m")
    paths = {k: d / n for k, n in (("markdown", "speedup.md"), ("csv", "speedup.csv"), ("html", "speedup.html"),
                                   ("dashboard", "dashboard.html"), ("report", "report.md"))}
    text = written_text({**paths, "warnings": ["x"]})
    for p in paths.values():
        assert str(p) in text
    assert "warnings" not in text and text.startswith("tables: ")


def test_report_prints_each_warning_once(tmp_path, capsys):
    import dataclasses

    from bench.cli import main
    from tests.support.synthetic import synthetic_records, write_store

    recs = synthetic_records(workloads=(("w", 128, 128),), backends=("hf",), precisions=("bf16",), batch_sizes=(1,),
                             trials=3, requests=4, telemetry=False)
    tok = [100.0, 130.0, 80.0]  # a 24 % spread: a table warning
    recs = [dataclasses.replace(r, metrics={**r.metrics, "output_throughput": tok[r.trial]}) for r in recs]
    write_store(tmp_path / "s.jsonl", recs)
    assert main(["report", str(tmp_path / "s.jsonl"), "--out", str(tmp_path / "d")]) == 0
    out, err = capsys.readouterr()
    assert (out + err).count("trials inside a run differ by") == 1
