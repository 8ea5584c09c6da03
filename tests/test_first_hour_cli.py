"""What a new user reads on the console (issue 34): command descriptions, the last lines of `bench run`."""

import argparse
from pathlib import Path

import pytest

from bench.cli import build_parser
from bench.commands.run import statuses_text, written_text


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
