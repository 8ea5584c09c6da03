"""The commit in a record is the project's own repository's, or unknown: never an enclosing checkout's."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

if shutil.which("git") is None:
    pytest.skip("git is not installed", allow_module_level=True)


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit_seen_by(project: Path) -> dict:
    """Return project_commit() as a fresh process importing the `bench` copied into `project` sees it."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_COMMIT", "BENCH_DIRTY")}
    env["PYTHONPATH"] = str(project)
    code = "import json, bench.machine.environment as e; print(json.dumps([e.__file__, e.project_commit()]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, check=True, capture_output=True, text=True)
    where, commit = json.loads(out.stdout)
    assert Path(where).resolve().is_relative_to(project.resolve())  # the copy, not this worktree's bench
    return commit


def new_repo(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "README").write_text("x\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "first")
    return git(path, "rev-parse", "HEAD")


def copy_package(project: Path) -> None:
    shutil.copytree(ROOT / "bench", project / "bench", ignore=shutil.ignore_patterns("__pycache__"))


def test_a_project_unpacked_inside_another_checkout_has_no_commit(tmp_path):
    outer = tmp_path / "outer"
    new_repo(outer)
    project = outer / "vendor" / "bench-tree"  # untracked inside the outer checkout
    copy_package(project)
    assert commit_seen_by(project) == {"commit": None, "dirty": None}


def test_the_projects_own_repository_gives_its_commit(tmp_path):
    project = tmp_path / "project"
    copy_package(project)
    head = new_repo(project)
    assert commit_seen_by(project) == {"commit": head, "dirty": False}
    (project / "README").write_text("changed\n")
    assert commit_seen_by(project) == {"commit": head, "dirty": True}


def test_bench_commit_still_overrides(monkeypatch):
    from bench.machine import environment

    monkeypatch.setenv("BENCH_COMMIT", "abc1234")
    monkeypatch.setenv("BENCH_DIRTY", "1")
    environment.project_commit.cache_clear()
    try:
        assert environment.project_commit() == {"commit": "abc1234", "dirty": True}
    finally:
        environment.project_commit.cache_clear()
