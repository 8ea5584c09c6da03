"""Layer-by-layer parity of two configurations of one model: where their computations part (`bench parity --layers`).

The reference report's authors spent days bisecting by hand where their fp16 logits left HF's
(a RoPE applied twice, then SiLU on the wrong MLP branch). This hooks, on both models, the
embeddings, every decoder layer's output, the final norm and the logits (forward hooks on the
Hugging Face modules), runs the same tokens through both, and compares each tensor in float32:
max and mean absolute error, the mean error relative to the mean magnitude of A's tensor
(hidden states grow along the depth, so raw errors are not comparable between layers), and the
mean cosine similarity per token.

The first diverging layer is the first tensor whose relative error is above `min_error` and
more than `jump_factor` times the largest relative error of every tensor before it: rounding
differences grow smoothly through the layers; a wrong layer multiplies the error at once.

Two paths, each a table (`path` in the job: forward, decode or both):
- forward: one cacheless forward over each prompt (every position at once);
- decode: the cell's own runtime (bench.backends.hf.backend.HFLoaded.teacher_forced: its cache,
  its decode loop, its prefill_len), the prompt's last `decode_tokens` tokens fed one decode step at
  a time, every hook point captured at those steps only. A fault that lives in the cache or the
  loop (a cache that corrupts what it holds) shows here and not in a cacheless forward. Hooks
  cannot see inside a compiled graph, so a compiled cell's decode path runs eager here (said in the
  result): its compiled step's logits are what `bench accuracy` compares. Batch 1: a layer table
  localizes a fault; batching's numerics are in `bench accuracy`'s figures.

Runs in its own process (`python -m bench.accuracy.layers JOB RESULT`), as every session does.
For TensorRT-LLM, see bench.accuracy.trtllm (its 1.2.1 debug-tensor path; not run on hardware).
"""

from __future__ import annotations

import json
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

JUMP_FACTOR = 4.0
MIN_ERROR = 0.02


def hook_points(model) -> list[tuple[str, object]]:
    """Return [(name, module)] in forward order: embeddings, each decoder layer, the final norm, the LM head."""
    inner = model.model
    points = [("embeddings", inner.embed_tokens)]
    points += [(f"layer {i}", layer) for i, layer in enumerate(inner.layers)]
    points += [("final norm", inner.norm), ("logits", model.lm_head)]
    return points


def _hooked(model, seen: dict, only_steps: bool = False):
    """Register forward hooks that append each hook point's output (float32, CPU, [tokens, width]) to seen[name]
    (every hook point's list made now, in forward order); only_steps: keep only the calls of a one-token forward
    (decode steps), not the prefill's (whose lm_head also keeps one position). Return the handles."""
    state = {"step": not only_steps}
    for name, _ in hook_points(model):
        seen[name] = []

    def top(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        state["step"] = not only_steps or (ids is not None and ids.shape[-1] == 1)

    def keep(name):
        def hook(_module, _inputs, output):
            if state["step"]:
                out = output[0] if isinstance(output, (tuple, list)) else output
                seen[name].append(out.detach().float().reshape(-1, out.shape[-1]).cpu())

        return hook

    handles = [model.register_forward_pre_hook(top, with_kwargs=True)]
    return handles + [module.register_forward_hook(keep(name)) for name, module in hook_points(model)]


def capture(model, input_ids) -> dict[str, object]:
    """Return {name: float32 CPU tensor [tokens, width]} of every hook point for one sequence (a cacheless forward)."""
    import torch

    seen: dict[str, list] = {}
    handles = _hooked(model, seen)
    try:
        with torch.inference_mode():
            model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {name: torch.cat(parts) for name, parts in seen.items()}


def capture_decode(loaded, options: dict, prompt: list[int], decode_tokens: int) -> dict[str, object]:
    """Return {name: [decode_tokens, width]} of every hook point at the decode steps of the cell's own path:
    the prompt but its last decode_tokens fed as the prefill, those fed one step at a time (teacher forcing)."""
    import torch

    k = max(1, min(decode_tokens, len(prompt) - 1))
    seen: dict[str, list] = {}
    handles = _hooked(loaded.model, seen, only_steps=True)
    try:
        loaded.teacher_forced([(prompt[:-k], prompt[-k:])], 1, options, lambda *_: None)
    finally:
        for h in handles:
            h.remove()
    return {name: torch.cat(parts) for name, parts in seen.items()}


@dataclass
class LayerError:
    name: str
    max_abs: float
    mean_abs: float
    rel_error: float  # mean_abs / mean |A|
    cosine: float  # mean over tokens of cos(A_t, B_t)


def compare(a: list[dict], b: list[dict]) -> list[LayerError]:
    """Return one LayerError per hook point over all sequences (captures of A and of B, in the same order)."""
    import torch

    rows = []
    for name in a[0]:
        diff_sum = mag_sum = cos_sum = 0.0
        count = tokens = 0
        worst = 0.0
        for sa, sb in zip(a, b, strict=True):
            x, y = sa[name], sb[name]
            if x.shape != y.shape:
                raise ValueError(f"{name}: A has shape {tuple(x.shape)}, B {tuple(y.shape)}: not the same model shape")
            d = (x - y).abs()
            worst = max(worst, float(d.max()))
            diff_sum += float(d.sum())
            mag_sum += float(x.abs().sum())
            count += x.numel()
            cos_sum += float(torch.nn.functional.cosine_similarity(x, y, dim=-1, eps=1e-12).sum())
            tokens += x.shape[0]
        mean_abs = diff_sum / count
        rows.append(LayerError(name, worst, mean_abs, mean_abs / (mag_sum / count) if mag_sum else 0.0, cos_sum / tokens))
    return rows


def first_jump(rows: list[LayerError], jump_factor: float = JUMP_FACTOR, min_error: float = MIN_ERROR) -> int | None:
    """Return the index of the first row whose rel_error exceeds min_error and jump_factor x every earlier one."""
    before = 0.0
    for i, r in enumerate(rows):
        if r.rel_error > min_error and r.rel_error > jump_factor * before:
            return i
        before = max(before, r.rel_error)
    return None


def markdown(rows: list[LayerError], jump: int | None) -> str:
    """Return the per-layer table, the first diverging layer marked."""
    lines = ["| tensor | max abs error | mean abs error | relative error | cosine |", "|---|---:|---:|---:|---:|"]
    for i, r in enumerate(rows):
        mark = " **<- first jump**" if i == jump else ""
        lines.append(f"| {r.name}{mark} | {r.max_abs:.4g} | {r.mean_abs:.4g} | {r.rel_error:.4g} | {r.cosine:.6f} |")
    return "\n".join(lines) + "\n"


def eager_cell(cell_dict: dict) -> tuple[dict, bool]:
    """Return (the cell with compile off, whether it compiled): hooks run eager, a compiled step hides its layers."""
    opts = dict(cell_dict.get("options") or {})
    if opts.get("compile", "off") == "off":
        return cell_dict, False
    return {**cell_dict, "options": {**opts, "compile": "off", "compile_tuning": "default", "freeze_weights": "off"}}, True


def run_layers(job: dict) -> dict:
    """Return the per-layer comparison of job's cells A and B over the workload's first prompts, per path."""
    import torch

    from bench.accuracy.session import _load
    from bench.machine.environment import fingerprint
    from bench.workloads.workload import Workload

    workload = Workload.from_json(Path(job["workload_file"]).read_text())
    prompts = [list(r.prompt_ids)[: job["tokens"]] for r in workload.requests[: job["prompts"]]]
    paths = ("forward", "decode") if job.get("path", "both") == "both" else (job["path"],)
    captures: dict[str, list] = {path: [] for path in paths}
    eager_note = []
    for side in ("a", "b"):
        torch.manual_seed(0)
        cell, compiled = eager_cell(job[side])
        if compiled and "decode" in paths:
            eager_note.append(side.upper())
        _cell, loaded, _ = _load(cell, job["engines_dir"])
        try:
            if "forward" in paths:
                captures["forward"].append([capture(loaded.model, torch.tensor([p], device=loaded.device)) for p in prompts])
            if "decode" in paths:
                opts = {**cell["options"], "batching": "dataset"}
                captures["decode"].append([capture_decode(loaded, opts, p, job.get("decode_tokens", 16)) for p in prompts])
        finally:
            loaded.close()
    out: dict = {"status": "ok", "prompts": len(prompts), "tokens": sum(len(p) for p in prompts),
                 "environment": fingerprint(job["a"]["device"]), "paths": {}}
    for path in paths:
        rows = compare(*captures[path])
        jump = first_jump(rows, job["jump_factor"], job["min_error"])
        out["paths"][path] = {"rows": [asdict(r) for r in rows], "first_jump": rows[jump].name if jump is not None else None,
                              "first_jump_index": jump,
                              "positions": sum(next(iter(c.values())).shape[0] for c in captures[path][0])}
    if eager_note:
        out["note"] = (f"{' and '.join(eager_note)} compile: its decode path ran eager here (hooks cannot see inside a "
                       "compiled graph); its compiled step's logits are what bench accuracy compares")
    first = out["paths"][paths[0]]  # the top-level fields of a single-path result, as before
    out.update(rows=first["rows"], first_jump=first["first_jump"], first_jump_index=first["first_jump_index"])
    return out


def main(argv: list[str]) -> int:
    from bench.execution.launcher import die_with_parent
    from bench.machine.failures import classify_exception

    die_with_parent()  # started by bench.execution.launcher: no session outlives its parent
    job = json.loads(Path(argv[0]).read_text())
    try:
        result = run_layers(job)
    except Exception as exc:  # the parent reports it
        result = {"status": classify_exception(exc), "error": f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()[-3000:]}
    Path(argv[1]).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
