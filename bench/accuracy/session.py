"""The accuracy worker: one build key's cells in a fresh process (`python -m bench.accuracy.session JOB RESULT`).

The `bench accuracy` parent never touches the GPU; it writes a job file, starts this module
through bench.execution.launcher and reads the result file. Every model is loaded through its
backend's own build and load (for hf: bench.backends.hf.backend's HFLoaded, the speed run's), and
measured through its own runtime (bench.accuracy.runtime): the prefill, cache, compiled step,
decode loop and batch size that were timed.

A job has one of two modes, and names the accuracy workload (the speed run's first `prompts`
requests, continued by the same sampling where there are more), its reference answers and the
folder of the baseline's Reference (bench.accuracy.reference):

- "baseline": the baseline is loaded, measured through its runtime, and its Reference written
  (teacher-forced logits, greedy ids, noise floors, determinism); then the job's other cells,
  which share its build key, are measured against it with the same loaded model;
- "cells": the Reference is read, the job's cells (one build key: one load) are measured
  against it, each at its own max_batch_size and options; a trtllm cell through its own engine's
  context logits (bench.accuracy.trtllm), a served (openai) cell through its prompt logprobs
  (bench.accuracy.served), generation parity always.

The two models never share a process: Inductor's process-wide settings never clash, and a
session holds one model (the baseline's fp32 twin aside, while its floor is measured).

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

# What the zygote imports for a forked session besides the cells' runtimes (bench.execution.preload): rouge-score's
# scorer, which generation parity uses in every cell session, imports nltk and with it scipy.stats (0.8-1.3 s a
# session on the 2-core CPU VM, 2026-12-07), paid once per invocation instead.
PRELOAD = ("rouge_score.rouge_scorer",)


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


def _workloads(job: dict):
    """Return (the accuracy requests, {request id: answer ids} or None, {speed workload file: its requests})."""
    from bench.workloads.workload import Workload

    settings = job["settings"]
    requests = Workload.from_json(Path(job["workload_file"]).read_text()).requests[: settings["prompts"]]
    answers = json.loads(Path(job["answers_file"]).read_text())["answers"] if job.get("answers_file") else None
    speed = {f: Workload.from_json(Path(f).read_text()).requests for f in set(job["speed_workload_files"].values())}
    return requests, answers, speed


def run_captures(job: dict) -> dict:
    """Return {"cells": {cell_id: {"status", "folder", "measure_s"} or the cell's failure}, "environment", and the
    process's GPU peak}: an early session's work (job mode "capture", bench.accuracy.driver), which runs before its
    baseline's Reference exists. Each cell's teacher-forced logits and greedy tokens go through its own runtime as
    the timed process's capture does (bench.execution.accuracy_capture, its static cache first fixed as its speed run
    fixed it), into its capture folder; the cells' session scores them once the Reference is written."""
    import torch

    from bench.execution.accuracy_capture import capture
    from bench.machine.environment import fingerprint
    from bench.spec.cells import Cell

    _requests, _answers, speed = _workloads(job)
    cells = [Cell.from_dict(c) for c in job["cells"]]
    result: dict = {"cells": {}, "environment": fingerprint(cells[0].device)}
    torch.manual_seed(0)
    got = _guarded(lambda: dict(zip(("cell", "loaded", "load_s"), _load(cells[0].to_dict(), job["engines_dir"]),
                                    strict=True)))
    for cell in cells:
        if got["status"] != "ok":
            result["cells"][cell.cell_id] = got
            continue
        loaded, spec = got["loaded"], job["capture_specs"][cell.cell_id]
        spec = {**spec, "run": {**spec["run"], "load_s": got["load_s"] if cell is cells[0] else 0.0}}

        def measure(c=cell, spec=spec, loaded=loaded):
            loaded.fix_cache_len(speed[job["speed_workload_files"][c.cell_id]], c.max_batch_size, c.options_dict)
            meta = capture(loaded, c, spec)
            return {"folder": spec["folder"], "measure_s": meta["measure_s"]}

        result["cells"][cell.cell_id] = _guarded(measure)
    if got["status"] == "ok":
        got["loaded"].close()
    if str(cells[0].device).startswith("cuda") and torch.cuda.is_initialized():
        result["peak_memory_bytes"] = int(torch.cuda.max_memory_reserved(torch.device(cells[0].device)))
    return result


def run_session(job: dict) -> dict:
    """Return the session's figures: {"baseline": its own figures or None, "cells": {cell_id: figures}, "environment"}.

    A cell that fails (an out-of-memory included) is that cell's result; the others go on. In a
    baseline job, a failed baseline fails the job (nothing can be measured against it).
    """
    import torch

    from bench.accuracy.reference import Reference
    from bench.execution.compile_counts import compile_counters, counters_since
    from bench.machine.environment import fingerprint
    from bench.models import resolve_model
    from bench.spec.cells import Cell

    settings = job["settings"]
    requests, answers, speed = _workloads(job)
    speed_of = {cid: speed[f] for cid, f in job["speed_workload_files"].items()}
    folder = Path(job["reference_dir"])
    base_cell = Cell.from_dict(job["baseline"])
    shared = {"prompts": len(requests), "random_weights": resolve_model(base_cell.model).path is None}
    result: dict = {"baseline": None, "cells": {}, "environment": fingerprint(base_cell.device)}
    torch.manual_seed(0)
    loaded = None
    if job["mode"] == "baseline":
        from bench.accuracy.runtime import baseline_reference

        cell, loaded, load_s = _load(job["baseline"], job["engines_dir"])
        before = compile_counters()
        figures = baseline_reference(loaded, cell, requests, answers, settings, speed_of[cell.cell_id], folder)
        result["baseline"] = {"status": "ok", **figures, **shared, "load_s": {"baseline": load_s},
                              "compile": counters_since(before),
                              "reference_digest": digest([a for _, a in Reference.open(folder, check_digest=False).sequences])}
    reference = Reference.open(folder)
    refs = ([list(answers[r.id]) for r in requests] if answers is not None
            else [list(reference.meta["greedy_ids"][r.id]) for r in requests])
    cells = [Cell.from_dict(c) for c in job.get("cells", [])]
    captures = job.get("captures") or {}
    state = {"loaded": loaded, "load_s": 0.0, "failure": None}

    def model():
        """Return (the job's loaded model, its load seconds, or the load's failure): loaded once, when a cell first
        needs it (one build key a job); a job whose cells are all scored from captures loads nothing."""
        if state["loaded"] is None and state["failure"] is None:
            first = next(c for c in cells if c.backend == "hf")
            got = _guarded(lambda: dict(zip(("cell", "loaded", "load_s"), _load(first.to_dict(), job["engines_dir"]),
                                            strict=True)))
            if got["status"] == "ok":
                state.update(loaded=got["loaded"], load_s=got["load_s"])
            else:
                state["failure"] = got
        return state["loaded"], state["load_s"], state["failure"]

    for cell in cells:
        before = compile_counters()  # what this cell's measuring compiled (a compiled cell's shapes, warm or cold)
        figures = None
        if cell.cell_id in captures:
            figures = _guarded(lambda c=cell: _from_capture(c, job, reference, requests, refs, captures[c.cell_id]))
            if figures["status"] != "ok":  # not usable after all: measured here, the reason kept in the record
                note = figures["error"].splitlines()[0]
                figures = None
        if figures is None and cell.backend == "hf":
            m, load_s, failure = model()
            figures = failure or _guarded(lambda c=cell, m=m, s=load_s: _cell_figures(c, job, reference, requests, refs,
                                                                                     speed_of[c.cell_id], m, s))
            if cell.cell_id in captures and figures["status"] == "ok":
                figures["capture_refused"] = note
        elif figures is None:
            measure = {"openai": _served_figures, "trtllm": _trtllm_figures}[cell.backend]
            figures = _guarded(lambda c=cell, m=measure: m(c, job, reference, requests, refs))
        if figures["status"] == "ok":
            figures.update(shared, compile=figures.get("compile", counters_since(before)),
                           reference=reference.meta["reference"], sequences=len(reference.sequences),
                           reference_digest=digest([a for _, a in reference.sequences]))
        result["cells"][cell.cell_id] = figures
    loaded = state["loaded"]
    if loaded is not None:
        loaded.close()
    if str(base_cell.device).startswith("cuda") and torch.cuda.is_initialized():
        # the process's allocator peak: what `bench accuracy --parallel` expects this session to hold next time
        result["peak_memory_bytes"] = int(torch.cuda.max_memory_reserved(torch.device(base_cell.device)))
    return result


def _decoder(cell):
    """Return token ids -> text with the cell's workload tokenizer (the text ROUGE), or None where it cannot decode."""
    from bench.workloads.tokenizers import load_tokenizer

    try:
        tok = load_tokenizer(cell.workload.tokenizer)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot load leaves the token-id ROUGE alone, said in the record
        return None
    undecodable = (KeyError, ValueError, IndexError, OverflowError, TypeError)

    def decode(ids) -> str:
        # A model's vocabulary can be larger than its tokenizer's (Qwen-7B: 151,936 rows, 151,851 ids tiktoken
        # decodes): a random-weight or broken model may emit an id no tokenizer can decode. Those ids are left
        # out of the text (the token-id ROUGE still counts them), never a failed session.
        ids = [int(i) for i in ids]
        try:
            return tok.decode(ids)
        except undecodable:
            kept = []
            for i in ids:
                try:
                    tok.decode([i])
                except undecodable:
                    continue
                kept.append(i)
            return tok.decode(kept)

    return decode


def _cell_figures(cell, job, reference, requests, refs, speed_requests, loaded, load_s: float) -> dict:
    """Return an hf cell's figures against the Reference, through its own runtime (the job's loaded model)."""
    from bench.accuracy.runtime import cell_figures

    settings = job["settings"]
    figures = cell_figures(loaded, cell, reference, requests, settings, speed_requests, refs, _decoder(cell),
                           tuple(settings["rouge_window"]))
    return {**figures, "greedy_digest": digest(figures["greedy"]), "load_s": {"cell": load_s}}


def _from_capture(cell, job, reference, requests, refs, folder: str) -> dict:
    """Return a cell's figures scored from its capture (bench.execution.accuracy_capture): the timed process's logits
    and greedy tokens, no model loaded here. BenchInputError (a failure of this cell) where the capture cannot be used."""
    from bench.accuracy.runtime import captured_figures
    from bench.execution.accuracy_capture import EARLY, Capture

    settings = job["settings"]
    capture = Capture.open(folder, cell.cell_id, settings)
    figures = captured_figures(capture, reference, requests, settings, refs, _decoder(cell), tuple(settings["rouge_window"]))
    run = capture.meta.get("run") or {}
    if run.get("made_by") == EARLY:  # an early session of this invocation (bench.accuracy.driver), not a timed process
        through = ("the cell's own runtime (its batch function), in a session of its own that ran before its baseline's "
                   "Reference was written, its logits and greedy tokens kept and scored here")
    else:
        through = ("its timed process: the loaded model, cache and decode path (compiled step and CUDA graphs where it "
                   f"has them) the run timed, after its trials (run {run.get('run_id', '?')}; bench run --accuracy-capture)")
    return {**figures, "greedy_digest": digest(figures["greedy"]), "load_s": {"cell": run.get("load_s", 0.0)},
            "compile": capture.meta.get("compile") or {}, "capture": {**run, "folder": str(folder)},
            "measured_through": through}


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


def reference_source(reference):
    """Return a logit source (prompt, answer) -> the baseline's saved logits of that sequence (bench.accuracy.capture)."""
    index = {(tuple(p), tuple(a)): i for i, (p, a) in enumerate(reference.sequences)}

    def source(prompt, answer):
        return reference.logits(index[(tuple(prompt), tuple(answer))])

    return source


def _trtllm_figures(cell, job, reference, requests, refs) -> dict:
    """Return a trtllm cell's figures against the Reference: its context logits (bench.accuracy.trtllm), greedy
    tokens twice, and which engine computed them (an engine of its own with gather_context_logits)."""
    from bench.accuracy.capture import compare_sources
    from bench.accuracy.figures import differing_tokens, generation_parity
    from bench.accuracy.trtllm import logits_cell, trtllm_greedy, trtllm_logits

    settings = job["settings"]
    n = settings["generate_tokens"]
    seqs, base_src = reference.sequences, reference_source(reference)
    prompts = [list(r.prompt_ids) for r in requests]
    base_out = [reference.meta["greedy_ids"][r.id] for r in requests]
    measured, engine_note = logits_cell(cell.to_dict())
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


def _served_figures(cell, job, reference, requests, refs) -> dict:
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
    from bench.workloads.tokenizers import load_tokenizer

    settings = job["settings"]
    seqs, base_src = reference.sequences, reference_source(reference)
    prompts = [list(r.prompt_ids) for r in requests]
    base_out = [reference.meta["greedy_ids"][r.id] for r in requests]
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
    work = run_captures if job["mode"] == "capture" else run_session
    result = _guarded(lambda: work(job))  # a failure before any cell (the baseline's load) fails them all
    Path(argv[1]).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
