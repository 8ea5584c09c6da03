"""One GPU through each executor: the local pool (devices = ["cuda:0"]) and Ray (a head started here).

Run from the repo root on a GPU machine (Ray from scripts/pack_ray_bundle.py on PYTHONPATH when
it cannot be installed):  python3 scripts/gpu_executors.py --out DIR

Each executor runs the same two small matrices into its own store: the fake backend on device
"cuda" (two build groups, the executor's protocol, no model) and one tiny hf cell (qwen-tiny,
bf16, 4 requests of 32 in / 32 out, batch 1, 2 trials). Writes to --out five files: results.json
and results.md (every record's status, the GPU it names: NVML index, UUID,
CUDA_VISIBLE_DEVICES, placement; the hf cell's output tok/s per executor), both stores, and
logs.tar.gz (every worker's log); engines and workloads stay in --work. Also checks that a
tensor_parallel_size larger than the pool is refused before anything runs.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOAD = {"w": {"source": "synthetic", "input_len": 32, "output_len": 32, "num_requests": 4}}


def matrices(executor: str) -> list:
    from bench.spec.matrix import parse_matrix

    place = {"devices": ["cuda:0"]} if executor == "local" else {"device": "cuda", "executor": "ray", "ray_address": "auto"}
    common = {"model": "qwen-tiny", "max_batch_sizes": [1], "workloads": ["w"], "workload": WORKLOAD, "trials": 2,
              "timeout_s": 300, "build_timeout_s": 600, **place}
    fake = parse_matrix({**common, "name": f"fake-{executor}", "backends": ["fake"], "precisions": ["bf16", "int4"],
                         "warmup": 0, "options": {"wall_ms": 200}})
    hf = parse_matrix({**common, "name": f"hf-{executor}", "backends": ["hf"], "precisions": ["bf16"], "warmup": 1})
    return [fake, hf]


def run(executor: str, work: Path) -> list[dict]:
    from bench.results.store import ResultStore
    from bench.runner.matrix import run_matrix

    store = work / f"{executor}.jsonl"
    for m in matrices(executor):
        t0 = time.perf_counter()
        summary = run_matrix(m, store, engines_dir=work / "engines", workload_cache=work / "workloads",
                             show_progress=False, redo=True)
        print(f"{executor}: {m.name}: {summary.statuses} in {time.perf_counter() - t0:.1f} s", flush=True)
    return list(ResultStore(store).records())


def ray_head(start: bool) -> None:
    cmd = [sys.executable, "-m", "ray.scripts.scripts"]
    cmd += (["start", "--head", "--num-gpus", "1", "--num-cpus", "4", "--include-dashboard=false",
             "--disable-usage-stats"] if start else ["stop", "--force"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    print(f"ray {'start' if start else 'stop'}: exit {proc.returncode}", flush=True)
    if proc.returncode and start:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])


def row(executor: str, r: dict) -> dict:
    env = r.get("environment") or {}
    place = env.get("placement") or {}
    return {"executor": executor, "backend": r["cell"]["backend"], "precision": r["cell"]["precision"],
            "trial": r["trial"], "status": r["status"], "error": (r.get("error") or "")[:300],
            "gpu_name": env.get("gpu_name"), "gpu_index": env.get("gpu_index"), "gpu_uuid": env.get("gpu_uuid"),
            "cuda_visible_devices": env.get("cuda_visible_devices"), "placement": place,
            "output_throughput": (r.get("metrics") or {}).get("output_throughput")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bench-gpu-executors"))
    ap.add_argument("--skip-ray", action="store_true")
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    from bench.errors import BenchInputError
    from bench.spec.matrix import parse_matrix

    rows, notes = [], []
    try:  # refused before anything runs: a tp=2 cell on a pool of one GPU
        parse_matrix({"backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1],
                      "workloads": ["w"], "workload": WORKLOAD, "devices": ["cuda:0"],
                      "options": {"tensor_parallel_size": 2}})
        notes.append("tp=2 on one GPU was NOT refused")
    except BenchInputError as exc:
        notes.append(f"tp=2 on one GPU refused: {exc}")
    rows += [row("local", r) for r in run("local", work)]
    if not args.skip_ray:
        try:
            ray_head(True)
            rows += [row("ray", r) for r in run("ray", work)]
        except Exception as exc:  # noqa: BLE001 - reported, the local figures still count
            notes.append(f"ray run failed: {type(exc).__name__}: {exc}")
        finally:
            ray_head(False)
    hf = {}
    for r in rows:
        if r["backend"] == "hf" and r["status"] == "ok":
            hf.setdefault(r["executor"], []).append(r["output_throughput"])
    result = {"rows": rows, "notes": notes, "hf_output_tok_s": hf,
              "same_gpu": len({r["gpu_uuid"] for r in rows if r["gpu_uuid"]}) == 1,
              "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE")}}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    lines = ["| executor | backend | precision | trial | status | gpu_index | gpu_uuid | CUDA_VISIBLE_DEVICES | placement | out tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        where = r["placement"].get("devices") or r["placement"].get("ray_gpu_ids")
        tput = f"{r['output_throughput']:.1f}" if r["output_throughput"] else ""
        lines.append(f"| {r['executor']} | {r['backend']} | {r['precision']} | {r['trial']} | {r['status']} | "
                     f"{r['gpu_index']} | {r['gpu_uuid']} | {r['cuda_visible_devices']} | {where} | {tput} |")
    lines += ["", *notes, f"hf output tok/s per executor: {hf}", f"one GPU named throughout: {result['same_gpu']}"]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    for store in work.glob("*.jsonl"):
        shutil.copy(store, out / store.name)
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        if (work / "logs").is_dir():
            tar.add(work / "logs", arcname="logs")
    print("\n".join(lines))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
