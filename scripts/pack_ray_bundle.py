"""Pack Ray for a machine that cannot download it (the H200 lease): a pruned install plus the wheels Ray needs.

Ray's wheel (2.60, cp312 manylinux x86_64) is 76 MiB: more than the 64 MiB a device call may
carry. What `executor = "ray"` uses (ray core: raylet, GCS, the actor API, the dashboard
agent's Python code) is kept; the libraries the harness never imports (RLlib, Tune, Train,
Serve, Data, LLM, AIR, workflows), the Java jar and the dashboard's JavaScript build are
dropped, and the rest is packed with xz: about 30 MiB. Ray's pure-Python needs that the H200
image lacks (jsonschema and its three helpers) travel as wheels beside it.

Run here (pip reaches PyPI), in the repo root:

    echo /.raybundle/ >> .git/info/exclude
    python3 scripts/pack_ray_bundle.py --out .raybundle              # for Python 3.12, manylinux x86_64

and on the GPU machine (carry .raybundle), before `bench`:

    mkdir -p /tmp/site && tar xJf .raybundle/ray-*.tar.xz -C /tmp/site \\
      && python3 -m pip install -q --no-index --no-deps --target /tmp/site .raybundle/*.whl \\
      && export PYTHONPATH=/tmp/site:$PYTHONPATH
    python3 -m ray.scripts.scripts start --head --num-gpus 1 --include-dashboard=false --disable-usage-stats
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# Ray sub-packages the harness never imports (bench.execution.executors.ray_cluster uses ray core only).
PRUNE = ("jars", "rllib", "tune", "train", "serve", "data", "llm", "air", "workflow", "dashboard/client/build")
# Ray's requirements (ray-2.60.0 METADATA, no extras) missing from the H200 image (device KINDS.md), with theirs.
EXTRA_WHEELS = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def pip_download(names, dest: Path, python_version: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + list(names), check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".raybundle")
    ap.add_argument("--ray", default="2.60.0", help="Ray version (the driver and every node must run the same one)")
    ap.add_argument("--python-version", default="3.12")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pip_download([f"ray=={args.ray}"], tmp / "wheel", args.python_version)
        (wheel,) = (tmp / "wheel").glob("ray-*.whl")
        site = tmp / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site),
                        "--python-version", args.python_version, "--implementation", "cp", "--only-binary=:all:",
                        *sum((["--platform", p] for p in PLATFORMS), []), str(wheel)], check=True)
        for rel in PRUNE:
            shutil.rmtree(site / "ray" / rel, ignore_errors=True)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts name this machine's python
        bundle = out / f"{wheel.name.removesuffix('.whl')}-pruned.tar.xz"
        with tarfile.open(bundle, "w:xz", preset=6) as tar:
            for child in sorted(site.iterdir()):
                tar.add(child, arcname=child.name)
    pip_download(EXTRA_WHEELS, out, args.python_version)
    total = sum(f.stat().st_size for f in out.iterdir())
    for f in sorted(out.iterdir()):
        print(f"{f.stat().st_size / 2**20:7.2f} MiB  {f.name}")
    print(f"{total / 2**20:7.2f} MiB  in all (a device call carries at most 64 MiB, the working tree included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
