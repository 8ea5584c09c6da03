"""Print the wall time and peak memory of `bench report` and `bench compare` on stores of 100,000 and
1,000,000 measurement records, run as a user runs them (a subprocess each, peak RSS of the child).

    python3 scripts/bench_scale.py [--records 100000 1000000] [--dir /tmp/bench-scale] [--keep] [--writer]

The stores are synthesized from one real record: a fake-backend matrix is run once (`bench run`,
20 ShareGPT-shaped requests), and its first record is copied into 2,500 cells (10 workloads x 2
precisions x 125 batch sizes) x 2 runs x 20 trials = 100,000 records per run context (issue #36's
shape), with the cell ids the harness would compute and every metric scaled per cell. 1,000,000
records are 10 run contexts of that matrix (ten nights). Measured, per size:

- `bench report STORE` cold (the store's columnar companion is built) and warm (it is read);
- `bench compare STORE HEAD` of two such stores (HEAD: the same cells, other run contexts), cold and warm;
- at 1,000,000: `bench report DIR` over a folder of the ten nightly stores (100,000 records each), cold and warm;
- the dashboard's size;
- with --writer: one more night appended to base.jsonl, then the end of the store's writer (what ends every
  `bench run`: the companion brought up to date), then the report that follows it.

Targets (issue #36): 1,000,000 records -> report < 30 s and compare < 30 s, each < 2 GB; 100,000 -> < 5 s.
Printed per command: wall time, CPU time (user + system) and peak RSS of the child process (/usr/bin/time).
The stores need 0.56 GB of disk a store at 100,000 records (two stores) and 5.6 GB at 1,000,000
(three: ~17 GB): they are deleted at the end unless --keep. Figures of a run: docs/measurements/2026-12-01-cpu-results-at-scale-writer.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CELLS = (10, 2, 125)  # workloads x precisions x batch sizes = 2,500 cells
RUNS, TRIALS = 2, 20


def first_record(store: Path) -> dict:
    """Return the first record of a store, read as bench reads every stored line."""
    from bench.results.jsonl import read_lines

    return next(read_lines(store)).record


def seed_record(work: Path) -> dict:
    """Return the first record of a real fake-backend run (one cell, one trial)."""

    store = work / "seed.jsonl"
    if store.exists():  # an earlier run's seed: the stores written from it stay valid
        return first_record(store)
    data = work / "sharegpt.json"
    data.write_text(json.dumps([{"id": f"r{i}", "conversations": [
        {"from": "human", "value": f"Question number {i}: " + "tell me about the weather " * (1 + i % 7)},
        {"from": "gpt", "value": "Here is a long answer about it. " * (2 + i % 5)}]} for i in range(40)]))
    matrix = work / "seed.toml"
    matrix.write_text(f'''name = "seed"
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16"]
max_batch_sizes = [1]
workloads = ["w"]
device = "cpu"
baseline = {{ backend = "fake", precision = "bf16", max_batch_size = 1 }}
[workload.w]
path = "{data}"
num_requests = 20
''')
    subprocess.run([sys.executable, "-m", "bench", "run", "--matrix", str(matrix), "--store", str(store), "--no-progress",
                    "--report-dir", str(work / "seed-report")], check=True, cwd=work, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return first_record(store)


def write_stores(seed: dict, paths: list[Path], contexts: int, tag: str, slowdown: float = 1.0, first: int = 0,
                 mode: str = "w") -> int:
    """Write `contexts` run contexts of the 2,500-cell matrix (the k-th night from `first` on, k-th started
    k days later), context k into paths[k % len(paths)]; return records. mode "a": appended to the stores."""
    from bench import CELL_ID_VERSION
    from bench.spec.cells import identity_options, short_hash

    samples = json.dumps(seed["samples"], separators=(",", ":"))
    base = {k: v for k, v in seed.items() if k != "samples"}
    handles = [open(p, mode) for p in paths]
    n = 0
    t0 = 1_790_000_000.0
    for k in range(first, first + contexts):
        fh = handles[k % len(paths)]
        ctx = dict(base["context"], run_id=f"{tag}-night{k:03d}", started_at=t0 + 86400 * k, commit=f"{k:040x}"[-40:])
        for w in range(CELLS[0]):
            for _p, precision in enumerate(("bf16", "int4")[:CELLS[1]]):
                for b in range(CELLS[2]):
                    cell = json.loads(json.dumps(base["cell"]))
                    cell.update(precision=precision, max_batch_size=b + 1)
                    cell["workload"]["name"] = f"w{w}"
                    ident = dict(cell, options=identity_options(cell["backend"], cell["options"]))
                    cell_id = short_hash({"schema_version": CELL_ID_VERSION, "cell": ident})
                    scale = (1 + 0.01 * b) * (1.9 if precision == "int4" else 1.0) / (slowdown if b % 10 == 0 else 1.0)
                    for run in range(RUNS):
                        for trial in range(TRIALS):
                            noise = 1 + 0.002 * ((run * 7 + trial * 3 + k) % 5 - 2)
                            metrics = {m: (v * scale * noise if isinstance(v, float) and "throughput" in m else
                                           v / (scale * noise) if isinstance(v, float) and m.endswith("_ms") else v)
                                       for m, v in base["metrics"].items()}
                            rec = dict(base, cell=cell, cell_id=cell_id, context=ctx, run=run, trial=trial,
                                       metrics=metrics, started_at=ctx["started_at"] + n % 100000)
                            line = json.dumps(rec, sort_keys=True, separators=(",", ":"))
                            fh.write(line[:-1] + ',"samples":' + samples + "}\n")
                            n += 1
    for fh in handles:
        fh.close()
    return n


def measure(args: list[str], cwd: Path) -> tuple[float, float, float, int]:
    """Return (wall s, CPU s (user + system), peak RSS GB, exit status) of one command in a fresh process.

    args: a `bench` command line, or ["-c", code] for Python code (the typed-record reader's figures).
    """
    t0 = time.perf_counter()
    cmd = [sys.executable, *(args if args[0] == "-c" else ["-m", "bench", *args])]
    proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", *cmd], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    rss_kb, user, system = proc.stderr.strip().splitlines()[-1].split()
    if proc.returncode not in (0, 1):
        print(proc.stderr[-2000:], file=sys.stderr)
    return wall, float(user) + float(system), int(rss_kb) / 1e6, proc.returncode


RECORDS_READER = {  # the same commands through the typed-record reader (the path before issue #36), for reference
    "report": "import warnings; warnings.simplefilter('ignore'); from bench.report.build import build_report; "
              "build_report(['base.jsonl'], 'rep-records', columnar=False)",
    "compare": "import warnings; warnings.simplefilter('ignore'); from bench.results.compare import compare_stores, "
               "to_markdown; to_markdown(compare_stores('base.jsonl', 'head.jsonl', columnar=False))",
}


WRITER = ("from bench.results.store import ResultStore\n"
          "with ResultStore('{store}').writer(): pass")  # what ends every `bench run`: the companion brought up to date


def measure_writer(seed: dict, d: Path, contexts: int) -> None:
    """Print what a nightly run's end costs and what its first report then costs: one night (100,000 records)
    appended to base.jsonl (its companion current), then ResultStore.writer's exit, then `bench report`.
    base.jsonl is cut back to its size before, after."""
    store = d / "base.jsonl"
    size = store.stat().st_size
    try:
        write_stores(seed, [store], 1, "base", first=contexts, mode="a")
        wall, cpu, rss, _ = measure(["-c", WRITER.format(store=store)], d)
        print(f"writer's end after one night appended (the new lines parsed into the companion): {wall:.1f} s wall, "
              f"{cpu:.1f} s CPU, peak RSS {rss:.2f} GB")
        wall, cpu, rss, rc = measure(["report", "base.jsonl", "--report-dir", "rep-writer"], d)
        print(f"bench report base.jsonl right after it: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.2f} GB (exit {rc})")
    finally:
        os.truncate(store, size)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--dir", default="/tmp/bench-scale")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic stores (a later run reuses them)")
    ap.add_argument("--generate-only", action="store_true", help="write the stores (implies --keep), measure nothing")
    ap.add_argument("--writer", action="store_true",
                    help="also time the store writer's end after a night is appended (base.jsonl is cut back after)")
    ap.add_argument("--records-reader", action="store_true",
                    help="at 100,000 records, also time report and compare through typed records (the path before #36)")
    args = ap.parse_args()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    seed = seed_record(work)
    print(f"seed record: {len(json.dumps(seed))} bytes, {len(seed['samples'])} samples")
    per_context = CELLS[0] * CELLS[1] * CELLS[2] * RUNS * TRIALS
    for total in args.records:
        contexts = max(1, total // per_context)
        d = work / f"n{total}"
        done = d / "written.json"  # the stores of an earlier --keep run are reused (their companions are dropped)
        if not done.exists() or json.loads(done.read_text()) != {"records": total, "seed": len(json.dumps(seed))}:
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            t0 = time.perf_counter()
            write_stores(seed, [d / "base.jsonl"], contexts, "base")
            write_stores(seed, [d / "head.jsonl"], contexts, "head", slowdown=1.2)
            if contexts > 1:
                (d / "nightly").mkdir()
                write_stores(seed, [d / "nightly" / f"night-{k:03d}.jsonl" for k in range(contexts)], contexts, "base")
            done.write_text(json.dumps({"records": total, "seed": len(json.dumps(seed))}))
            print(f"stores written in {time.perf_counter() - t0:.0f} s")
        for cache in d.rglob(".bench-cache"):
            shutil.rmtree(cache)
        size = (d / "base.jsonl").stat().st_size
        print(f"\n{contexts * per_context:,} records a store ({contexts} run context(s) of 2,500 cells x {RUNS} runs x "
              f"{TRIALS} trials): {size / 1e9:.2f} GB of JSON lines")
        if args.generate_only:
            continue
        runs = [("report", ["report", "base.jsonl", "--report-dir", "rep"]),
                ("compare", ["compare", "base.jsonl", "head.jsonl"])]
        if contexts > 1:
            runs.append(("report DIR", ["report", "nightly", "--report-dir", "rep-dir"]))
        for _label, cmd in runs:
            for state in ("cold", "warm"):
                wall, cpu, rss, rc = measure(cmd, d)
                print(f"bench {' '.join(cmd)}: {state}: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.2f} GB (exit {rc})")
        if args.records_reader and contexts == 1:
            for label, code in RECORDS_READER.items():
                wall, cpu, rss, rc = measure(["-c", code], d)
                print(f"{label} through typed records (columnar=False): {wall:.1f} s wall, {cpu:.1f} s CPU, "
                      f"peak RSS {rss:.2f} GB")
        dash = (d / "rep" / "dashboard.html").stat().st_size
        print(f"dashboard.html: {dash / 1e6:.1f} MB")
        if args.writer:
            measure_writer(seed, d, contexts)
        if not (args.keep or args.generate_only):
            shutil.rmtree(d)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
