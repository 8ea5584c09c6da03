"""Measure two commits in one existing Python environment with asv, compare them, publish the site.

    python -m scripts.asv_existing BASE HEAD [--repo PATH_OR_BUNDLE] [--factor 1.05]
                                      [--bench REGEX] [--results DIR] [--html DIR] [--resume]

For a machine where asv must not build environments: a GPU box whose Python already has CUDA
torch (asv would install another torch per commit), with no internet. asv cannot install
commits into an existing environment (`asv continuous -E existing` refuses a commit range),
so this script does what `asv continuous` would, one commit at a time:

1. extracts each commit's tree from the repository (`--repo`: a git repository or a bundle
   made with `git bundle create FILE BASE HEAD`, for a copied tree without .git);
2. runs this checkout's suite against each tree (`asv run -E existing --set-commit-hash`, with
   BENCH_ASV_PROJECT naming the tree: benchmarks/__init__.py puts it first on the path, and
   the harness's worker processes inherit it), so both commits run the same benchmarks;
3. prints asv's comparison (asv compare's table) and exits 1 if a benchmark got worse by more
   than --factor or failed at HEAD (a value not measured is not a pass), 0 otherwise;
4. publishes the site (asv publish, made to work offline by scripts/asv_site.py).

Set BENCH_ASV_MATRIX=gpu on the GPU machine (docs/guide/regressions.md); the default is the CPU matrix.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def verdict(worsened: bool, improved: bool, failed_at_head: bool) -> tuple[str, int]:
    """Return (verdict, exit status): 1 if a value got worse, or if a benchmark failed at HEAD (a value
    that was not measured cannot pass: on the H200 a missing package once failed every benchmark on
    both sides, and the table said "no significant change")."""
    if failed_at_head:
        return "NOT JUDGED: benchmarks failed at HEAD (their errors are above)", 1
    if worsened:
        return "PERFORMANCE DECREASED", 1
    return ("improved" if improved else "no significant change"), 0


def load_conf(path: Path) -> dict:
    """Return asv.conf.json as a dict (asv's format allows // comment lines)."""
    lines = path.read_text().splitlines()
    return json.loads("\n".join(line for line in lines if not line.strip().startswith("//")))


def git(repo: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """Return the finished `git -C repo ARGS` (raises on failure)."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, **kwargs)


def resolve(repo: Path, name: str) -> str:
    """Return the full commit id of name in repo, or exit with a message naming the repository."""
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"error: {name!r} is not a commit in {repo} (with a copied tree, pass --repo a bundle "
                 "made by `git bundle create FILE BASE HEAD` on the machine that has the history)")
    return out.stdout.strip()


def extract(repo: Path, commit: str, dest: Path) -> Path:
    """Return dest after unpacking commit's tree there (git archive)."""
    dest.mkdir(parents=True)
    tar = git(repo, "archive", "--format=tar", commit).stdout
    with tempfile.TemporaryFile() as f:
        f.write(tar)
        f.seek(0)
        with tarfile.open(fileobj=f) as t:
            t.extractall(dest, filter="data")
    return dest


def run_asv(*args: str, env: dict | None = None, quiet: bool = False, ok: tuple = (0,)) -> int:
    """Return the exit status of `python -m asv ARGS` (printing through unless quiet); exit unless it is in ok."""
    proc = subprocess.run([sys.executable, "-m", "asv", *args], env=env, capture_output=quiet, text=True)
    if proc.returncode not in ok:
        sys.exit(f"error: asv {' '.join(args)} exited {proc.returncode}\n{proc.stdout or ''}{proc.stderr or ''}")
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("head")
    ap.add_argument("--repo", default=str(ROOT), help="git repository or bundle holding both commits (default: this checkout)")
    ap.add_argument("--factor", type=float, default=1.05, help="asv's factor: worse by more than this is a regression")
    ap.add_argument("--bench", "-b", help="regular expression of the benchmarks to run (default: all; a published "
                    "site then has a graph for every benchmark)")
    ap.add_argument("--results", default=None, help="asv results folder (default: the config's, .asv/results)")
    ap.add_argument("--html", default=None, help="published site folder (default: the config's, dashboards/asv)")
    ap.add_argument("--quick", action="store_true", help="asv --quick (one sample per benchmark; a check that it runs)")
    ap.add_argument("--resume", action="store_true",
                    help="skip benchmarks that already have a successful result for the commit in --results "
                         "(a second call after one that ran out of time)")
    args = ap.parse_args(argv)
    try:
        import asv  # noqa: F401
    except ImportError:
        sys.exit("error: asv is not installed in this Python (pip install asv; offline: docs/guide/regressions.md lists the wheels)")

    work = Path(tempfile.mkdtemp(prefix="bench-asv-existing-"))  # trees, config, bundle clone
    try:
        repo = Path(args.repo).resolve()
        if repo.is_file():  # a bundle: clone it to read commits and dates from
            subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "--quiet", str(repo), str(work / "repo")],
                           check=True)
            repo = work / "repo"
        commits = [resolve(repo, args.base), resolve(repo, args.head)]

        conf = load_conf(ROOT / "asv.conf.json")
        conf.update(repo=str(repo), benchmark_dir=str(ROOT / "benchmarks"),
                    results_dir=str(Path(args.results or ROOT / conf["results_dir"]).resolve()),
                    html_dir=str(Path(args.html or ROOT / conf["html_dir"]).resolve()),
                    env_dir=str(work / "env"))
        conf_path = work / "asv.conf.json"
        conf_path.write_text(json.dumps(conf, indent=1))
        run_asv("machine", "--yes", "--config", str(conf_path), quiet=True)
        failed: dict[str, bool] = {}
        for commit in commits:
            tree = extract(repo, commit, work / "trees" / commit)
            env = {**os.environ, "BENCH_ASV_PROJECT": str(tree), "BENCH_COMMIT": commit, "BENCH_DIRTY": "0"}
            print(f"== {commit[:8]}: benchmarks from {ROOT / 'benchmarks'}, bench from {tree}", flush=True)
            code = run_asv("run", "--config", str(conf_path), "-E", f"existing:{sys.executable}",
                           "--set-commit-hash", commit, "--launch-method", "spawn", "--show-stderr",
                           *(["--bench", args.bench] if args.bench else []), *(["--quick"] if args.quick else []),
                           *(["--skip-existing-successful"] if args.resume else []), env=env, ok=(0, 2))
            if code == 2:  # asv: some benchmarks failed; the comparison marks one failing only at HEAD with "!"
                print(f"note: some benchmarks failed at {commit[:8]} (their errors are above)", flush=True)
            failed[commit] = code == 2

        from asv.commands.compare import Compare
        from asv.config import Config
        from asv.machine import Machine

        # The table `asv compare` prints, and its verdict, which the command itself does not return.
        names = {c: f"{c[:8]} ({n})" for c, n in zip(commits, (args.base, args.head), strict=True)}
        worsened, improved = Compare.print_table(Config.load(str(conf_path)), commits[0], commits[1], factor=args.factor,
                                                 split=False, only_changed=False, sort="default", commit_names=names,
                                                 machine=Machine.get_unique_machine_name())
        text, code = verdict(worsened, improved, failed[commits[1]])
        print(f"\n{names[commits[0]]} -> {names[commits[1]]}: {text} (factor {args.factor})")
        run_asv("publish", "--config", str(conf_path))
        from scripts import asv_site

        print(f"site: {conf['html_dir']} ({len(asv_site.localize(conf['html_dir']))} CDN references made local)")
        return code
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
