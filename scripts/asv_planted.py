"""Plant a 30% slowdown in a throwaway clone and check that asv catches it, and lets its undo pass.

    python -m scripts.asv_planted [--mode continuous|existing] [--factor 1.10] [--keep]

The clone (of this checkout's HEAD commit; uncommitted changes are not in it) gets two commits:
SLOW multiplies every duration of the fake backend's virtual clock by 1.3 (bench/backends/fake/backend.py,
the `k = opts["slowdown"]` line), UNDO reverts it. Then, on FakeCell (the whole harness on the
fake backend: matrix, worker subprocess, store, the suite's aggregation):

- `asv continuous HEAD SLOW` must exit 1 and mark every FakeCell value worse ("+");
- `asv continuous HEAD UNDO` must exit 0 with nothing marked.

--mode continuous (default) is the real loop: asv builds a wheel of each commit and installs it
in its own virtualenv (minutes: the first run creates the env with torch). --mode existing runs
the same check through scripts/asv_existing.py in this Python (no builds; seconds), which
also proves that script measures each commit's own code. Exit 0 when both checks pass.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "bench/backends/fake/backend.py"
ANCHOR = 'k = opts["slowdown"]'
SLOW = 'k = opts["slowdown"] * 1.3  # planted by scripts/asv_planted.py'


def plant(source: str) -> str:
    """Return fake.py's source with the 30% slowdown planted (exactly one anchor must match)."""
    if source.count(ANCHOR) != 1:
        raise RuntimeError(f"{TARGET} holds {source.count(ANCHOR)} copies of {ANCHOR!r}, expected 1: "
                           "update ANCHOR in scripts/asv_planted.py to the line that scales the fake clock")
    return source.replace(ANCHOR, SLOW)


def make_clone(dest: Path) -> dict[str, str]:
    """Return {'head', 'slow', 'undo'} commit ids after cloning this checkout to dest and committing."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True, text=True).stdout.strip()

    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    git("config", "user.email", "asv-planted@localhost")
    git("config", "user.name", "asv_planted")
    head = git("rev-parse", "HEAD")
    target = dest / TARGET
    target.write_text(plant(target.read_text()))
    git("commit", "--quiet", "-am", "planted: fake backend 30% slower")
    slow = git("rev-parse", "HEAD")
    git("revert", "--no-edit", slow)
    return {"head": head, "slow": slow, "undo": git("rev-parse", "HEAD")}


def asv_continuous(clone: Path, base: str, head: str, factor: float) -> tuple[int, str]:
    """Return (exit status, output) of `asv continuous` on FakeCell between two commits of the clone."""
    cmd = [sys.executable, "-m", "asv", "continuous", "--factor", str(factor), "--launch-method", "spawn",
           "--bench", r"^asv_cells\.FakeCell", base, head]
    proc = subprocess.run(cmd, cwd=clone, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def asv_existing(clone: Path, base: str, head: str, factor: float, results: Path) -> tuple[int, str]:
    """Return (exit status, output) of scripts/asv_existing.py on FakeCell for two commits of the clone."""
    cmd = [sys.executable, "-m", "scripts.asv_existing", base, head, "--repo", str(clone), "--factor", str(factor),
           "--bench", r"^asv_cells\.FakeCell", "--results", str(results / "results"), "--html", str(results / "html")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def table_lines(output: str) -> list[str]:
    """Return the FakeCell rows of asv's comparison table."""
    return [line for line in output.splitlines() if line.startswith("|") and "FakeCell" in line]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("continuous", "existing"), default="continuous")
    ap.add_argument("--factor", type=float, default=1.10)
    ap.add_argument("--workdir", type=Path, help="where the clone goes (default: a new temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the clone (and its .asv) afterwards")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-asv-planted-"))
    clone = work / "clone"
    commits = make_clone(clone)
    print(f"clone {clone}: HEAD {commits['head'][:8]}, SLOW {commits['slow'][:8]} (fake clock x1.3), "
          f"UNDO {commits['undo'][:8]} (revert)", flush=True)
    if args.mode == "continuous":
        subprocess.run([sys.executable, "-m", "asv", "machine", "--yes"], cwd=clone, check=True, capture_output=True)
    ok = True
    try:
        for name, expect in (("slow", 1), ("undo", 0)):
            t0 = time.perf_counter()
            if args.mode == "continuous":
                code, out = asv_continuous(clone, commits["head"], commits[name], args.factor)
            else:
                code, out = asv_existing(clone, commits["head"], commits[name], args.factor, work / name)
            rows = table_lines(out)
            worse = [r for r in rows if re.match(r"\|\s*\+", r)]
            # SLOW: every FakeCell value (2 tracks x 2 cells) worse; UNDO: none.
            passed = code == expect and len(worse) == (4 if expect else 0)
            ok &= passed
            label = "SLOW" if name == "slow" else "UNDO"
            print(f"\n$ asv {args.mode} HEAD {label} --factor {args.factor}  ({time.perf_counter() - t0:.0f} s)")
            # `asv continuous` lists only changed values; an empty table means nothing changed.
            print("\n".join(rows) if rows else "(asv lists no changed FakeCell value)")
            print(f"exit {code} (expected {expect}), {len(worse)} values marked worse: {'PASS' if passed else 'FAIL'}",
                  flush=True)
            if not passed:
                print(out[-6000:])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\nplanted-regression check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
