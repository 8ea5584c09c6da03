"""The accuracy worker: one cell against its baseline in a fresh process (`python -m bench.accuracy.session JOB RESULT`).

The `bench accuracy` parent never touches the GPU; it writes a job file, runs this module in a
subprocess (as `bench profile` runs bench.profiling.session) and reads the result file. Both
models are loaded through their backend's own build and load (bench.backends.hf.backend's
HFLoaded for hf), so precision, quantization, attention and cache options are the cells'.

A job without a baseline is the baseline's own session: its noise floor (bench.accuracy.capture
.noise_floor), its perplexity on the reference answers and its determinism. A job with a
baseline loads both and measures the cell against it:

1. sequences: the workload's first `prompts` requests (the speed run's order), each prompt with
   its reference answer cut to `answer_tokens` (and to the workload's max_total_len); with no
   dataset answers, the baseline's own greedy continuation of `answer_tokens` tokens;
2. teacher-forced parity of the cell's logits against the baseline's (bench.accuracy.figures);
3. generation parity: `generate_tokens` greedy tokens of each prompt from both;
4. determinism: the cell's greedy tokens again, in the same process.

Failures are results: an out-of-memory is classified by bench.machine.failures and written as
status "oom", anything else as "error", with the traceback tail.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import traceback
from pathlib import Path


def _load(cell_dict: dict, engines_dir: str):
    from bench.backends.registry import backend_class
    from bench.spec import Cell

    cell = Cell.from_dict(cell_dict)
    key = cell.build_key()
    backend = backend_class(key.backend)()
    t0 = time.perf_counter()
    loaded = backend.load(backend.build(key, Path(engines_dir)))
    if getattr(loaded, "model", None) is None:
        raise RuntimeError(f"backend {key.backend!r} exposes no torch model: its logits cannot be read in process")
    return cell, loaded, time.perf_counter() - t0


def digest(tokens: list[list[int]]) -> str:
    """Return a short digest of greedy outputs (a second process's record compares it)."""
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]


def sequences_for(requests, answers: dict | None, settings: dict, max_total_len: int, base_greedy=None
                  ) -> tuple[list[tuple[list[int], list[int]]], str]:
    """Return the (prompt, answer) pairs scored and the reference kind ("dataset" or "baseline-greedy")."""
    pairs = []
    if answers is not None:
        for r in requests:
            room = max_total_len - r.input_len
            answer = list(answers[r.id])[: min(settings["answer_tokens"], room)]
            if answer:
                pairs.append((list(r.prompt_ids), answer))
        return pairs, "dataset"
    prompts = [list(r.prompt_ids) for r in requests]
    return list(zip(prompts, base_greedy(prompts), strict=True)), "baseline-greedy"


def run_session(job: dict) -> dict:
    """Return the session's figures (see the module docstring)."""
    import torch

    from bench.accuracy.capture import (
        base_perplexity,
        compare_sources,
        greedy,
        hf_logits,
        noise_floor,
    )
    from bench.accuracy.figures import differing_tokens, generation_parity
    from bench.machine.environment import fingerprint
    from bench.models import resolve_model
    from bench.workloads.workload import Workload

    settings = job["settings"]
    workload = Workload.from_json(Path(job["workload_file"]).read_text())
    requests = workload.requests[: settings["prompts"]]
    answers = json.loads(Path(job["answers_file"]).read_text())["answers"] if job.get("answers_file") else None
    base_dict = job.get("baseline") or job["cell"]
    torch.manual_seed(0)
    base_cell, base, base_load_s = _load(base_dict, job["engines_dir"])
    is_baseline = job.get("baseline") is None
    result: dict = {"load_s": {"baseline": base_load_s}, "prompts": len(requests)}
    t0 = time.perf_counter()

    def base_greedy(prompts):
        return greedy(base.model, prompts, settings["answer_tokens"], base.pad_id, base.device)

    seqs, reference = sequences_for(requests, answers, settings, base_cell.workload.max_total_len, base_greedy)
    result.update(reference=reference, sequences=len(seqs), reference_digest=digest([a for _, a in seqs]))
    base_src = hf_logits(base.model, base.device)
    prompts = [list(r.prompt_ids) for r in requests]
    n = settings["generate_tokens"]
    if is_baseline:
        result["floor"] = noise_floor(base.model, base.dtype, base.device, seqs)
        result["parity"] = base_perplexity(base_src, seqs).to_dict()
        first = greedy(base.model, prompts, n, base.pad_id, base.device, _gen_kwargs(base, n))
        second = greedy(base.model, prompts, n, base.pad_id, base.device, _gen_kwargs(base, n))
    else:
        torch.manual_seed(0)
        cell, loaded, load_s = _load(job["cell"], job["engines_dir"])
        result["load_s"]["cell"] = load_s
        result["parity"] = compare_sources(base_src, {"cell": hf_logits(loaded.model, loaded.device)}, seqs)["cell"].to_dict()
        base_out = greedy(base.model, prompts, n, base.pad_id, base.device, _gen_kwargs(base, n))
        first = greedy(loaded.model, prompts, n, loaded.pad_id, loaded.device, _gen_kwargs(loaded, n))
        second = greedy(loaded.model, prompts, n, loaded.pad_id, loaded.device, _gen_kwargs(loaded, n))
        refs = [a for _, a in seqs] if reference == "baseline-greedy" else [list(answers[r.id]) for r in requests]
        result["generation"] = generation_parity(first, base_out, refs, settings["prefix_k"])
    result["determinism"] = differing_tokens(first, second)
    result["greedy"] = first
    result["greedy_digest"] = digest(first)
    result["measure_s"] = time.perf_counter() - t0
    result["random_weights"] = resolve_model(base_cell.model).path is None
    result["environment"] = fingerprint(base_cell.device)
    return result


def _gen_kwargs(loaded, n: int) -> dict:
    """Return the cell's own generate settings (its cache implementation), as its measured runs use them."""
    gen = dict(loaded.generate_kwargs(n, None)) if hasattr(loaded, "generate_kwargs") else {}
    gen.pop("max_new_tokens", None)
    return gen


def main(argv: list[str]) -> int:
    from bench.machine.failures import classify_exception

    job = json.loads(Path(argv[0]).read_text())
    try:
        result = {"status": "ok", **run_session(job)}
    except Exception as exc:  # every failure is a result the parent stores
        result = {"status": classify_exception(exc), "error": f"{type(exc).__name__}: {exc}\n"
                                                              + traceback.format_exc()[-3000:]}
    Path(argv[1]).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
