"""The driver of `bench parity --layers A B`: where two configurations of one model part, layer by layer.

A and B are overrides of one cell of the matrix, written as --only is (key=value pairs joined
by commas): axes (precision, max_batch_size, device, model: two model folders of one shape) or the
backend's options. The cell is the
one the selection holds, else the matrix's baseline cell (`parity_cells`). Both configurations
run in one session process (bench.accuracy.layers, started through bench.execution.launcher)
over the workload's first `prompts` prompts; `layer_parity` returns the table of per-layer errors
and the first diverging layer, written to <out>/<matrix>/layers-<A>-vs-<B>.json (and .md).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench.errors import BenchInputError

AXES = ("precision", "max_batch_size", "device", "model")
PATHS = ("both", "forward", "decode")  # which computations are hooked (bench.accuracy.layers)
LAYER_BACKENDS = ("hf",)  # a torch model whose modules take hooks (trtllm: bench/accuracy/trtllm.py, not wired)
SESSION = "bench.accuracy.layers"  # the session process's module (python -m)


# The longest prompt prefix a layers session captures: every layer's output of every token is kept in memory.
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class LayerSettings:
    """How `bench parity --layers` compares (its flags); None: bench.accuracy.layers' defaults."""

    prompts: int = 4
    tokens: int = 256
    jump_factor: float | None = None
    min_error: float | None = None
    timeout: float = 1800.0
    path: str = "both"  # forward (a cacheless forward), decode (the cell's own decode steps), or both
    decode_tokens: int = 16  # the decode path: each prompt's last N tokens fed as decode steps

    def checked(self) -> LayerSettings:
        """Return the settings with the defaults filled in; BenchInputError if one is out of range."""
        from bench.accuracy.layers import JUMP_FACTOR, MIN_ERROR
        from bench.checks import MAX_NUM_REQUESTS, check_number

        check_number(self.prompts, "--prompts", integer=True, minimum=1, maximum=MAX_NUM_REQUESTS,
                     hint="prompts of the workload (its first N); a workload holds at most MAX_NUM_REQUESTS")
        check_number(self.tokens, "--tokens", integer=True, minimum=2, maximum=MAX_TOKENS,
                     hint="tokens of each prompt (its first N)")
        check_number(self.decode_tokens, "--decode-tokens", integer=True, minimum=1, maximum=MAX_TOKENS,
                     hint="the decode path: each prompt's last N tokens fed as decode steps")
        check_number(self.timeout, "--timeout", above=0, hint="seconds before the layers session is killed")
        if self.path not in PATHS:
            raise BenchInputError(f"--path must be one of {', '.join(PATHS)}, got {self.path!r}")
        out = replace(self, jump_factor=JUMP_FACTOR if self.jump_factor is None else self.jump_factor,
                      min_error=MIN_ERROR if self.min_error is None else self.min_error)
        check_number(out.jump_factor, "--jump-factor", above=1,
                     hint="a jump is a relative error above this times every earlier layer's (default 4)")
        check_number(out.min_error, "--min-error", minimum=0, hint="a jump is a relative error above this (default 0.02)")
        return out


@dataclass(frozen=True)
class LayerParity:
    """What `bench parity --layers` found: the table (text, also written as .md) or why there is none."""

    text: str | None  # the Markdown of per-layer errors and the first diverging tensor (None: failed)
    result_file: Path
    error: str | None = None  # the session's failure, in words


def configured(cell, text: str):
    """Return `cell` with the overrides of `text` (key=value,...) applied and validated; BenchInputError if bad."""
    from bench.backends.registry import backend_config
    from bench.spec.narrow import coerce_cli_value, parse_pairs

    pairs = parse_pairs(text, "--layers") or {}
    if not pairs:
        raise BenchInputError("--layers wants two configurations such as precision=bf16 precision=int8wo")
    config = backend_config(cell.backend)
    axes = {k: coerce_cli_value(v) for k, v in pairs.items() if k in AXES}
    options = {k: coerce_cli_value(v) for k, v in pairs.items() if k not in AXES}
    if "precision" in axes:
        axes["precision"] = str(axes["precision"])
    if "model" in axes:
        from bench.models import resolve_model

        axes["model"] = str(pairs["model"])
        resolve_model(axes["model"])  # a folder without config.json, an unknown name: named, with the fix
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
        _same_shape(a.model, b.model)
    if a == b:
        raise BenchInputError(f"--layers A and B are the same configuration ({a_text!r}, {b_text!r}): change one")
    return a, b


SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size")


def _same_shape(a: str, b: str) -> None:
    """Raise BenchInputError unless models a and b have one shape: layer by layer needs the same tensors on both sides."""
    from bench.models import resolve_model

    ca, cb = resolve_model(a).config, resolve_model(b).config
    differ = [k for k in SHAPE_KEYS if ca.get(k) != cb.get(k)]
    if differ:
        raise BenchInputError(f"--layers model={a} and model={b} differ in shape ({', '.join(f'{k}: {ca.get(k)} vs {cb.get(k)}' for k in differ)}): "
                              "layer-by-layer errors need the same tensors on both sides (a fine-tune, a re-export, a "
                              "conversion of one model); compare different models with `bench accuracy`")


def layer_parity(matrix, a_text: str, b_text: str, settings: LayerSettings, out: Path) -> LayerParity:
    """Run A and B of the matrix's cell in one layers session; return the per-layer table or the failure."""
    from bench.accuracy.layers import LayerError, markdown
    from bench.execution.launcher import run_session
    from bench.execution.supervisor import session_preload
    from bench.workloads.workload import cached_workload

    settings = settings.checked()
    a, b = parity_cells(matrix, a_text, b_text)
    _, wl_file = cached_workload(a.workload, Path("workloads/cache"))
    name = f"layers-{_slug(a_text)}-vs-{_slug(b_text)}"
    out_dir = Path(out) / matrix.name
    out_dir.mkdir(parents=True, exist_ok=True)
    job = {"a": a.to_dict(), "b": b.to_dict(), "engines_dir": str(Path("engines").resolve()),
           "workload_file": str(Path(wl_file).resolve()), "prompts": settings.prompts, "tokens": settings.tokens,
           "jump_factor": settings.jump_factor, "min_error": settings.min_error, "path": settings.path,
           "decode_tokens": settings.decode_tokens}
    job_file, result_file, log = out_dir / f"{name}.job.json", out_dir / f"{name}.json", out_dir / f"{name}.log"
    job_file.write_text(json.dumps(job, indent=1))
    run = run_session([sys.executable, "-m", SESSION, str(job_file), str(result_file)], result_file, log,
                      timeout=settings.timeout, what="the session", preload=session_preload([a, b], SESSION))
    if run.status == "timeout":
        return LayerParity(None, result_file, run.error)
    if run.status != "ok":
        return LayerParity(None, result_file, f"the session exited with status {run.returncode}; log {log}")
    result = run.result
    if result.get("status") != "ok":
        return LayerParity(None, result_file, f"{result.get('status')}: {result.get('error', '')[:2000]}")
    paths = result.get("paths") or {"forward": result}
    what = {"forward": f"a cacheless forward over {result['tokens']} tokens of {result['prompts']} prompts",
            "decode": "each cell's own decode path (its cache, loop and prefill_len; batch 1), the last "
                      f"{settings.decode_tokens} tokens of {result['prompts']} prompts fed as decode steps"}
    text = (f"## layers of {a.model if a.model == b.model else a.model + ' vs ' + b.model}: A = {a_text} ({a.label}) vs "
            f"B = {b_text} ({b.label})\n\nfirst jump: relative error > {settings.min_error:g} and > "
            f"{settings.jump_factor:g}x every earlier tensor's" + (f"; {result['note']}" if result.get("note") else "") + "\n")
    for path, found in paths.items():
        rows = [LayerError(**r) for r in found["rows"]]
        text += (f"\n### {path}: {what[path]}\n\n" + markdown(rows, found["first_jump_index"])
                 + f"\nfirst diverging tensor ({path}): {found['first_jump'] or 'none (the error grows smoothly)'}\n")
    (out_dir / f"{name}.md").write_text(text)
    return LayerParity(text, result_file)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9=._-]+", "_", text)[:60]
