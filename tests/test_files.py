"""The one file writer: the old content or the new, never half of either, and no temporary left behind."""

import os

import pytest

from bench.files import write_atomic


def test_write_atomic_replaces_content_and_creates_folders(tmp_path):
    path = tmp_path / "a" / "b" / "table.md"
    assert write_atomic(path, "first ö\n") == path
    write_atomic(str(path), "second\n")
    assert path.read_text(encoding="utf-8") == "second\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["table.md"]


def test_an_interrupted_write_keeps_the_old_file_and_removes_its_temporary(tmp_path, monkeypatch):
    path = tmp_path / "dashboard.html"
    write_atomic(path, "old")

    def fail(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["dashboard.html"]
