"""`bench parity --layers A B`: where two configurations of one model part, layer by layer.

    bench parity --matrix m.toml --layers precision=bf16 precision=int8wo
    bench parity --preset h200-study --only max_batch_size=1 --layers attn_implementation=sdpa attn_implementation=eager

A and B are overrides of one cell of the matrix, written as --only is (key=value pairs joined
by commas): axes (precision, max_batch_size, device) or the backend's options. The cell is the
one --only selects, else the matrix's baseline cell. Both configurations run in one session
process (bench.accuracy.layers) over the workload's first --prompts prompts; the table of
per-layer errors and the first diverging layer are printed and written to
<out>/<matrix>/layers-<A>-vs-<B>.json (and .md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix, parse_pairs
from bench.errors import BenchInputError

AXES = ("precision", "max_batch_size", "device")
LAYER_BACKENDS = ("hf",)  # a torch model whose modules take hooks (trtllm: bench/accuracy/trtllm.py, not wired)


def register(sub) -> None:
    p = sub.add_parser("parity", help="per-layer errors between two configurations of one model, and the first "
                                      "layer where they jump (--layers A B)")
    add_matrix_arguments(p, "the cell both configurations start from (default: the matrix's baseline cell)")
    p.add_argument("--layers", nargs=2, metavar=("A", "B"), required=True,
                   help="two configurations as key=value overrides, e.g. precision=bf16 precision=int8wo")
    p.add_argument("--prompts", type=int, default=4, help="prompts of the workload to run (default 4)")
    p.add_argument("--tokens", type=int, default=256, help="tokens of each prompt (its first N; default 256)")
    p.add_argument("--jump-factor", type=float, default=None, help="a jump: relative error above this x every earlier one (default 4)")
    p.add_argument("--min-error", type=float, default=None, help="a jump: relative error above this (default 0.02)")
    p.add_argument("--out", default="parity", help="output folder (default parity/)")
    p.add_argument("--timeout", type=float, default=1800)
    p.set_defaults(func=cmd_parity, requests=None, trials=None)


def configured(cell, text: str):
    """Return `cell` with the overrides of `text` (key=value,...) applied and validated; BenchInputError if bad."""
    from bench.backends.registry import backend_config
    from bench.spec.narrow import coerce_cli_value

    pairs = parse_pairs(text, "--layers") or {}
    if not pairs:
        raise BenchInputError("--layers wants two configurations such as precision=bf16 precision=int8wo")
    config = backend_config(cell.backend)
    axes = {k: coerce_cli_value(v) for k, v in pairs.items() if k in AXES}
    options = {k: coerce_cli_value(v) for k, v in pairs.items() if k not in AXES}
    if "precision" in axes:
        axes["precision"] = str(axes["precision"])
    full = config.normalize_options({**cell.options_dict, **options})  # unknown keys: named, with the valid ones
    out = replace(cell, **axes, options=tuple(sorted(full.items())))
    config.validate(out)
    return out


def parity_cells(matrix, a_text: str, b_text: str) -> tuple:
    """Return (cell A, cell B) for the matrix's selected (or baseline) cell and the two overrides."""
    from bench.spec.baseline import _baseline_matches

    cells = list(matrix.cells)
    if len(cells) > 1:
        cells = [c for c in cells if _baseline_matches(c, matrix.baseline)]
    if len(cells) != 1:
        raise BenchInputError(f"--layers starts from one cell; the selection holds {len(matrix.cells)} and the "
                              f"baseline matches {len(cells)}: narrow with --only (e.g. --only max_batch_size=1,workload=...)")
    cell = cells[0]
    if cell.backend == "trtllm":
        raise BenchInputError(
            "bench parity --layers does not reach TensorRT-LLM: its per-layer path (bench/accuracy/trtllm.py "
            "layer_tensors, written against 1.2.1's GenerationSession debug tensors: an engine built with "
            "enable_debug_output, a session with debug_mode) is not wired to this command and has not run on "
            "hardware (docs/guide/accuracy.md). Compare hf configurations here (--only backend=hf), and a trtllm "
            "cell against its hf baseline with `bench accuracy` (KL and top-1 per position)")
    if cell.backend not in LAYER_BACKENDS:
        raise BenchInputError(f"bench parity --layers hooks torch modules in process: backend {cell.backend!r} has none "
                              f"(supported: {list(LAYER_BACKENDS)}); compare it with `bench accuracy` instead")
    a, b = configured(cell, a_text), configured(cell, b_text)
    if a.model != b.model:
        raise BenchInputError("--layers compares two configurations of one model: A and B name different models")
    if a == b:
        raise BenchInputError(f"--layers A and B are the same configuration ({a_text!r}, {b_text!r}): change one")
    return a, b


def cmd_parity(args) -> int:
    from bench.accuracy.layers import JUMP_FACTOR, MIN_ERROR, LayerError, markdown
    from bench.workloads.workload import cached_workload

    if args.prompts <= 0 or args.tokens <= 0:
        raise BenchInputError("--prompts and --tokens must be positive")
    matrix = load_selected_matrix(args)
    a, b = parity_cells(matrix, *args.layers)
    jump_factor = JUMP_FACTOR if args.jump_factor is None else args.jump_factor
    min_error = MIN_ERROR if args.min_error is None else args.min_error
    if jump_factor <= 1 or min_error < 0:
        raise BenchInputError("--jump-factor must be above 1 and --min-error non-negative")
    _, wl_file = cached_workload(a.workload, Path("workloads/cache"))
    name = f"layers-{_slug(args.layers[0])}-vs-{_slug(args.layers[1])}"
    out_dir = Path(args.out) / matrix.name
    out_dir.mkdir(parents=True, exist_ok=True)
    job = {"a": a.to_dict(), "b": b.to_dict(), "engines_dir": str(Path("engines").resolve()),
           "workload_file": str(Path(wl_file).resolve()), "prompts": args.prompts, "tokens": args.tokens,
           "jump_factor": jump_factor, "min_error": min_error}
    job_file, result_file, log = out_dir / f"{name}.job.json", out_dir / f"{name}.json", out_dir / f"{name}.log"
    job_file.write_text(json.dumps(job, indent=1))
    result_file.unlink(missing_ok=True)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        with open(log, "wb") as fh:
            proc = subprocess.run([sys.executable, "-m", "bench.accuracy.layers", str(job_file), str(result_file)],
                                  stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"bench parity: the session ran past {args.timeout} s; log {log}", file=sys.stderr)
        return 1
    if proc.returncode != 0 or not result_file.is_file():
        print(f"bench parity: the session exited with status {proc.returncode}; log {log}", file=sys.stderr)
        return 1
    result = json.loads(result_file.read_text())
    if result.get("status") != "ok":
        print(f"bench parity: {result.get('status')}: {result.get('error', '')[:2000]}", file=sys.stderr)
        return 1
    rows = [LayerError(**r) for r in result["rows"]]
    text = (f"## layers of {a.model}: A = {args.layers[0]} ({a.label}) vs B = {args.layers[1]} ({b.label})\n\n"
            f"{result['tokens']} tokens over {result['prompts']} prompts; first jump: relative error > {min_error:g} and "
            f"> {jump_factor:g}x every earlier tensor's\n\n" + markdown(rows, result["first_jump_index"])
            + f"\nfirst diverging tensor: {result['first_jump'] or 'none (the error grows smoothly)'}\n")
    (out_dir / f"{name}.md").write_text(text)
    print(text)
    print(f"parity: {result_file}", file=sys.stderr)
    return 0


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9=._-]+", "_", text)[:60]
