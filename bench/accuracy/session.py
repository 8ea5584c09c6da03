"""The accuracy worker: cells against their baseline in a fresh process (`python -m bench.accuracy.session JOB RESULT`).

The `bench accuracy` parent never touches the GPU; it writes a job file, runs this module in a
subprocess (as `bench profile` runs bench.profiling.session) and reads the result file. Both
models are loaded through their backend's own build and load (bench.backends.hf.backend's
HFLoaded for hf), so precision, quantization, attention and cache options are the cells'.

A job names one baseline and the cells to measure against it (all of one model and workload).
The baseline is loaded once; with measure_baseline, its own figures first: its noise floor
(bench.accuracy.capture.noise_floor), its perplexity on the reference answers and its
determinism. Then each cell is loaded, measured against the baseline and closed:

1. sequences: the workload's first `prompts` requests (the speed run's order), each prompt with
   its reference answer cut to `answer_tokens` (and to the workload's max_total_len); with no
   dataset answers, the baseline's own greedy continuation of `answer_tokens` tokens;
2. teacher-forced parity of the cell's logits against the baseline's (bench.accuracy.figures): an hf
   cell's in process, a trtllm cell's context logits (bench.accuracy.trtllm), a served (openai)
   cell's prompt logprobs (bench.accuracy.served; none returned: generation parity only);
3. generation parity: `generate_tokens` greedy tokens of each prompt from both;
4. determinism: the cell's greedy tokens again, in the same process.

Failures are results, per cell: an out-of-memory is classified by bench.machine.failures and
written as status "oom", anything else as "error", with the traceback tail; the next cell goes on.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import traceback
from pathlib import Path


def _load(cell_dict: dict, engines_dir: str, torch_model: bool = True):
    from bench.backends.registry import backend_class
    from bench.spec.cells import Cell

    cell = Cell.from_dict(cell_dict)
    key = cell.build_key()
    backend = backend_class(key.backend)()
    t0 = time.perf_counter()
    loaded = backend.load(backend.build(key, Path(engines_dir)))
    if torch_model and getattr(loaded, "model", None) is None:
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
    """Return the session's figures: {"baseline": its own figures or None, "cells": {cell_id: figures}, ...}.

    The baseline is loaded once; its reference sequences and greedy outputs are computed once and
    every cell of the job is measured against them, loaded and closed in turn. A cell that fails
    (an out-of-memory included) is that cell's result; the others go on.
    """
    import torch

    from bench.accuracy.capture import greedy, hf_logits
    from bench.machine.environment import fingerprint
    from bench.models import resolve_model
    from bench.workloads.workload import Workload

    settings = job["settings"]
    workload = Workload.from_json(Path(job["workload_file"]).read_text())
    requests = workload.requests[: settings["prompts"]]
    answers = json.loads(Path(job["answers_file"]).read_text())["answers"] if job.get("answers_file") else None
    torch.manual_seed(0)
    base_cell, base, base_load_s = _load(job["baseline"], job["engines_dir"])
    n = settings["generate_tokens"]
    prompts = [list(r.prompt_ids) for r in requests]

    def base_greedy(ps):
        return greedy(base.model, ps, settings["answer_tokens"], base.pad_id, base.device)

    seqs, reference = sequences_for(requests, answers, settings, base_cell.workload.max_total_len, base_greedy)
    shared = {"reference": reference, "prompts": len(requests), "sequences": len(seqs),
              "reference_digest": digest([a for _, a in seqs]),
              "random_weights": resolve_model(base_cell.model).path is None}
    refs = [a for _, a in seqs] if reference == "baseline-greedy" else [list(answers[r.id]) for r in requests]
    base_src = hf_logits(base.model, base.device)
    base_out = greedy(base.model, prompts, n, base.pad_id, base.device, _gen_kwargs(base, n))
    result: dict = {"baseline": None, "cells": {}, "environment": fingerprint(base_cell.device),
                    "baseline_load_s": base_load_s}
    if job.get("measure_baseline"):
        result["baseline"] = _guarded(lambda: _baseline_figures(base, seqs, base_src, base_out, prompts, n))
        if result["baseline"]["status"] == "ok":
            result["baseline"].update(shared, load_s={"baseline": base_load_s})
    for cell_dict in job.get("cells", []):
        cell_id = _cell_id(cell_dict)
        figures = {"openai": _served_figures, "trtllm": _trtllm_figures}.get(cell_dict["backend"], _cell_figures)
        result["cells"][cell_id] = _guarded(lambda c=cell_dict, f=figures: f(c, job, seqs, base_src, base_out, prompts,
                                                                              refs, settings))
        if result["cells"][cell_id]["status"] == "ok":
            result["cells"][cell_id].update(shared)
            result["cells"][cell_id]["load_s"]["baseline"] = base_load_s
    return result


def _cell_id(cell_dict: dict) -> str:
    from bench.spec.cells import Cell

    return Cell.from_dict(cell_dict).cell_id


def _guarded(measure) -> dict:
    """Return {"status": "ok", **measure()}, or the failure (oom / error) with its traceback tail."""
    import gc

    from bench.machine.failures import classify_exception

    try:
        return {"status": "ok", **measure()}
    except Exception as exc:  # a failed cell is a result; the session goes on with the next one
        out = {"status": classify_exception(exc),
               "error": f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()[-3000:]}
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def _baseline_figures(base, seqs, base_src, base_out, prompts, n) -> dict:
    """Return the baseline's own figures: noise floor, perplexity on the reference, determinism."""
    from bench.accuracy.capture import base_perplexity, greedy, noise_floor
    from bench.accuracy.figures import differing_tokens

    t0 = time.perf_counter()
    out = {"floor": noise_floor(base.model, base.dtype, base.device, seqs),
           "parity": base_perplexity(base_src, seqs).to_dict()}
    second = greedy(base.model, prompts, n, base.pad_id, base.device, _gen_kwargs(base, n))
    out.update(determinism=differing_tokens(base_out, second), greedy=base_out, greedy_digest=digest(base_out),
               measure_s=time.perf_counter() - t0)
    return out


def _cell_figures(cell_dict, job, seqs, base_src, base_out, prompts, refs, settings) -> dict:
    """Return one cell's figures against the baseline (teacher-forced, generation, determinism); the cell is closed after."""
    import torch

    from bench.accuracy.capture import compare_sources, greedy, hf_logits
    from bench.accuracy.figures import differing_tokens, generation_parity

    n = settings["generate_tokens"]
    torch.manual_seed(0)
    _cell, loaded, load_s = _load(cell_dict, job["engines_dir"])
    try:
        t0 = time.perf_counter()
        parity = compare_sources(base_src, {"cell": hf_logits(loaded.model, loaded.device)}, seqs)["cell"].to_dict()
        first = greedy(loaded.model, prompts, n, loaded.pad_id, loaded.device, _gen_kwargs(loaded, n))
        second = greedy(loaded.model, prompts, n, loaded.pad_id, loaded.device, _gen_kwargs(loaded, n))
        return {"parity": parity, "generation": generation_parity(first, base_out, refs, settings["prefix_k"]),
                "determinism": differing_tokens(first, second), "greedy": first, "greedy_digest": digest(first),
                "load_s": {"cell": load_s}, "measure_s": time.perf_counter() - t0}
    finally:
        loaded.close()


def _trtllm_figures(cell_dict, job, seqs, base_src, base_out, prompts, refs, settings) -> dict:
    """Return a trtllm cell's figures against the baseline: its context logits (bench.accuracy.trtllm), greedy
    tokens twice, and which engine computed them (an engine of its own with gather_context_logits)."""
    from bench.accuracy.capture import compare_sources
    from bench.accuracy.figures import differing_tokens, generation_parity
    from bench.accuracy.trtllm import logits_cell, trtllm_greedy, trtllm_logits

    n = settings["generate_tokens"]
    measured, engine_note = logits_cell(cell_dict)
    _cell, loaded, load_s = _load(measured, job["engines_dir"], torch_model=False)
    try:
        t0 = time.perf_counter()
        parity = compare_sources(base_src, {"cell": trtllm_logits(loaded.llm, loaded.end_id)}, seqs)["cell"].to_dict()
        first = trtllm_greedy(loaded.llm, prompts, n, loaded.end_id)
        second = trtllm_greedy(loaded.llm, prompts, n, loaded.end_id)
        return {"parity": parity, "generation": generation_parity(first, base_out, refs, settings["prefix_k"]),
                "determinism": differing_tokens(first, second), "greedy": first, "greedy_digest": digest(first),
                "logits_source": "TensorRT-LLM context logits (SamplingParams.return_context_logits) of " + engine_note,
                "load_s": {"cell": load_s}, "measure_s": time.perf_counter() - t0}
    finally:
        loaded.close()


def _gen_kwargs(loaded, n: int) -> dict:
    """Return the cell's own generate settings (its cache implementation), as its measured runs use them."""
    gen = dict(loaded.generate_kwargs(n, None)) if hasattr(loaded, "generate_kwargs") else {}
    gen.pop("max_new_tokens", None)
    return gen


def _served_figures(cell_dict, job, seqs, base_src, base_out, prompts, refs, settings) -> dict:
    """Return a served (openai backend) cell's figures against the baseline: teacher-forced through its prompt
    logprobs where it returns them (bench.accuracy.served), generation parity and determinism always.

    The same prompts go to the server as greedy completions of generate_tokens tokens (token ids on
    the completions endpoint unless the cell's prompt option says text); the returned text is
    tokenized with the workload's tokenizer, and so are the baseline's greedy tokens once decoded:
    what differs is the generated text, not how a tokenizer splits it.
    """
    import asyncio
    import os

    from bench.accuracy.figures import differing_tokens, generation_parity
    from bench.accuracy.served import NoPromptLogprobs, ServedLogprobs, served_parity
    from bench.backends.openai.backend import probe_server
    from bench.serving.client import ClientConfig, ServeRequest, replay
    from bench.spec.cells import Cell
    from bench.workloads.tokenizers import load_tokenizer

    cell = Cell.from_dict(cell_dict)
    o = cell.options_dict
    n = settings["generate_tokens"]
    api_key = os.environ.get(o["api_key_env"]) or None
    model = probe_server(o["base_url"], o["model_name"], o["endpoint"], api_key)
    tok = load_tokenizer(cell.workload.tokenizer)
    t0 = time.perf_counter()
    out: dict = {"served_model": model}
    try:
        served = ServedLogprobs(o["base_url"], model, tok, api_key, float(o["timeout_s"]))
        parity, method = served_parity(base_src, served, seqs)
        out.update(mode="logprobs-top-k", parity=parity, parity_method=method,
                   parity_reason=f"teacher-forced through the server's {method['source']} (top-{method['top_k']}): "
                                 + method["approximation"])
    except NoPromptLogprobs as exc:
        out.update(mode="generation", parity=None, parity_reason=str(exc))
    as_text = o["endpoint"] == "chat" or o["prompt"] == "text"
    reqs = [ServeRequest(str(i), tok.decode(p) if as_text else list(p), len(p), n) for i, p in enumerate(prompts)]
    cfg = ClientConfig(o["base_url"], o["endpoint"], model, timeout_s=float(o["timeout_s"]),
                       ignore_eos=o["ignore_eos"] is True, min_tokens=o["min_tokens"] is True, include_usage=False,
                       api_key=api_key)

    def once() -> list[list[int]]:
        timings, stats = asyncio.run(replay(cfg, reqs, max_concurrency=GEN_CONCURRENCY))
        failed = [t.error for t in timings if t.error]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(reqs)} greedy requests failed; first: {failed[0]}")
        return [tok.encode(r.text)[:n] for r in stats.received]

    first, second = once(), once()
    # The server returns text: the baseline's greedy tokens go through the same decode + encode, so that only a
    # difference in the generated text counts (a tokenizer merges a repeated token pair whoever generated it).
    base_text = [tok.encode(tok.decode(list(b)))[:n] for b in base_out]
    out.update(generation=generation_parity(first, base_text, refs, settings["prefix_k"]),
               generation_compared="the server's text and the baseline's greedy tokens, both decoded and re-tokenized",
               determinism=differing_tokens(first, second), greedy=first, greedy_digest=digest(first),
               load_s={"cell": 0.0}, measure_s=time.perf_counter() - t0)
    return out


GEN_CONCURRENCY = 16  # greedy requests in flight to a server (as the in-process batches of 16)


def main(argv: list[str]) -> int:
    from bench.execution.launcher import die_with_parent

    die_with_parent()  # started by bench.execution.launcher: no session outlives its parent
    job = json.loads(Path(argv[0]).read_text())
    result = _guarded(lambda: run_session(job))  # a failure before any cell (the baseline's load) fails them all
    Path(argv[1]).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
