"""Accuracy through each cell's own runtime: the teacher-forced logits and greedy tokens of the code that was timed.

A loaded hf cell (bench.backends.hf.backend.HFLoaded) runs the speed run's batch function for
both: `teacher_forced` feeds the reference answers through its prefill (chunked by prefill_len),
its cache (static or dynamic), its compiled step and CUDA graphs, its decode loop, at its
max_batch_size with the speed run's padding and static cache length; `greedy` generates through
the same function. So a fault anywhere on that path (a decode loop that emits the wrong token, a
cache that corrupts what it holds, a compiled step that differs from eager) is in the figures.

`baseline_reference` measures the baseline and writes its Reference (bench.accuracy.reference):
teacher-forced logits, greedy ids by request, determinism, and two noise floors, each of the
numerics alone against the baseline's own runtime figures:
- teacher-forced (KL, top-1): the baseline's weights computed in the other float dtype (bf16 <->
  fp32), its attention in the other kernel (sdpa <-> eager), and its cacheless eager forward, each
  against the runtime logits;
- generation (identical first prefix_k greedy tokens): the other-dtype twin's greedy tokens, and a
  second runtime pass, against the first runtime pass.
`cell_figures` measures a cell against a Reference, in the cell's own process.
"""

from __future__ import annotations

import time

from bench.accuracy.figures import (
    differing_tokens,
    generation_parity,
    position_stats,
    prefix_parity,
    token_parity,
)


def sequences_for(requests, answers: dict | None, settings: dict, max_total_len: int, base_greedy=None
                  ) -> tuple[list[tuple[list[int], list[int]]], str]:
    """Return the (prompt, answer) pairs scored and the reference kind ("dataset" or "baseline-greedy")."""
    from bench.workloads.references import scored_sequences

    if answers is not None:
        return scored_sequences(requests, answers, settings["answer_tokens"], max_total_len), "dataset"
    greedy = base_greedy(requests)
    return [(list(r.prompt_ids), greedy[r.id]) for r in requests if greedy[r.id]], "baseline-greedy"


def _ordered(by_id: dict[str, list[int]], requests) -> list[list[int]]:
    return [by_id[r.id] for r in requests]


class Phases:
    """Seconds per phase of a session's measuring (a record's `phases_s`): where a session's time goes. On a GPU each
    phase ends with a synchronize, so work a phase queued is charged to it, not to the next."""

    def __init__(self, device):
        self.device = device if str(device).startswith("cuda") else None  # the session's own GPU, cuda:N included
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, name: str) -> None:
        """The phase `name` ended now (its seconds add up where a name repeats)."""
        if self.device is not None:
            import torch

            torch.cuda.synchronize(torch.device(self.device))
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._t
        self._t = now


def _runtime(loaded) -> None:
    if not hasattr(loaded, "teacher_forced") or not hasattr(loaded, "greedy"):
        raise RuntimeError(f"{type(loaded).__name__} has no teacher-forced decode through its own runtime "
                           "(teacher_forced, greedy): its accuracy cannot be measured on the path that was timed")


def baseline_reference(loaded, cell, requests, answers: dict | None, settings: dict, speed_requests, folder) -> dict:
    """Measure the baseline through its own runtime, write its Reference into `folder`; return its figures."""
    import gc

    from bench.accuracy.capture import (
        attention,
        floor_variants,
        greedy,
        greedy_batch,
        hf_logits,
    )
    from bench.accuracy.reference import TENSORS, write_meta
    from bench.execution.accuracy_capture import LogitsWriter

    _runtime(loaded)
    opts, size = cell.options_dict, cell.max_batch_size
    timed_len = _fix_cache(loaded, cell, speed_requests, requests, settings)
    t0 = time.perf_counter()
    phases = Phases(loaded.device)
    n = settings["generate_tokens"]
    seqs, kind = sequences_for(requests, answers, settings, cell.workload.max_total_len,
                               lambda reqs: loaded.greedy(reqs, size, opts, settings["answer_tokens"]))
    phases.mark("reference_answers")
    writer = LogitsWriter([len(a) for _, a in seqs])
    loaded.teacher_forced(seqs, size, opts, writer)
    fed = writer.fed()
    seqs = [(p, a[:k]) for (p, a), k in zip(seqs, fed, strict=True)]
    digest = writer.save(folder / TENSORS)
    phases.mark("teacher_forced")
    first = loaded.greedy(requests, size, opts, n)
    phases.mark("greedy")
    second = loaded.greedy(requests, size, opts, n)
    phases.mark("greedy_second_pass")
    base_out = _ordered(first, requests)
    prompts = [list(r.prompt_ids) for r in requests]

    def against_runtime(source) -> dict:
        import torch

        chunks = [position_stats(writer.rows[i][: len(a)], source(p, a), torch.tensor(a)) for i, (p, a) in enumerate(seqs)]
        return token_parity(chunks).to_dict()

    model = loaded.model
    floor: dict = {"cacheless": {"what": "its own cacheless eager forward (no cache, no padding, no compiled step)",
                                 **against_runtime(hf_logits(model, loaded.device))}}
    phases.mark("floor_cacheless")
    generation_floor: dict = {"second_pass": {"what": "a second pass through its runtime, same process",
                                              **prefix_parity(_ordered(second, requests), base_out, settings["prefix_k"])}}
    variants = floor_variants(model, loaded.dtype)
    phases.mark("floor_model_copies")
    for name, (what, twin) in variants.items():
        floor[name] = {"what": what, **against_runtime(hf_logits(twin, loaded.device))}
        phases.mark(f"floor_{name}")
        # In the baseline's own batches (its max_batch_size), fewer where its cache would not fit beside the two models.
        batch = greedy_batch(twin, prompts, n, size, _free_bytes(loaded.device))
        twin_out = greedy(twin, prompts, n, loaded.pad_id, loaded.device, batch=batch)
        phases.mark(f"generation_floor_{name}")
        # batch_cut_by_memory: the free memory decided the batch (and so the padding the twin's tokens saw); with other
        # sessions beside this one (bench accuracy --parallel) that is their memory too: the session runs again alone.
        generation_floor[name] = {"what": what + f" (greedy, model.generate, batches of {batch})",
                                  "batch_cut_by_memory": batch < max(1, size),
                                  **prefix_parity(twin_out, base_out, settings["prefix_k"])}
        del twin
        gc.collect()
    del variants
    current = model.config._attn_implementation
    other = "eager" if current != "eager" else "sdpa"
    with attention(model, other):
        floor["attention"] = {"what": f"attention {current} vs {other} (cacheless)", **against_runtime(hf_logits(model, loaded.device))}
    phases.mark("floor_attention")
    import torch

    self_parity = token_parity([position_stats(writer.rows[i][: len(a)], writer.rows[i][: len(a)], torch.tensor(a))
                                for i, (_, a) in enumerate(seqs)]).to_dict()
    figures = {"parity": self_parity, "floor": floor, "generation_floor": generation_floor,
               "determinism": differing_tokens(base_out, _ordered(second, requests)), "greedy": base_out,
               "greedy_ids": first, "reference": kind, "sequences": len(seqs), "answer_positions": sum(fed),
               "measure_s": time.perf_counter() - t0, "phases_s": phases.seconds, **_cache_figures(loaded, timed_len)}
    write_meta(folder, {"baseline": cell.to_dict(), "settings": settings, "sequences": seqs, "reference": kind,
                        "tensors_sha256": digest, "greedy_ids": first, "request_ids": [r.id for r in requests],
                        "floor": floor, "generation_floor": generation_floor})
    return figures


def cell_figures(loaded, cell, reference, requests, settings: dict, speed_requests, references: list[list[int]],
                 decode=None, window=None) -> dict:
    """Return a cell's figures against a baseline Reference, through the cell's own runtime.

    references: per request, the answer ids ROUGE is computed against (dataset answers, or the
    baseline's greedy continuation); decode: token ids -> text (the workload's tokenizer), for the
    text ROUGE the reference report computes; window: the ROUGE-1 window to test.
    """
    from bench.accuracy.reference import Scorer

    _runtime(loaded)
    opts, size = cell.options_dict, cell.max_batch_size
    timed_len = _fix_cache(loaded, cell, speed_requests, requests, settings)
    t0 = time.perf_counter()
    phases = Phases(loaded.device)
    scorer = Scorer(reference, hold=2 * size)
    fed = loaded.teacher_forced(reference.sequences, size, opts, scorer)
    parity = scorer.parity().to_dict()
    phases.mark("teacher_forced")
    n = settings["generate_tokens"]
    first = loaded.greedy(requests, size, opts, n)
    phases.mark("greedy")
    second = loaded.greedy(requests, size, opts, n)
    phases.mark("greedy_second_pass")
    return {**figures_from(parity, sum(fed), first, second, reference, requests, settings, references, decode, window),
            "measure_s": time.perf_counter() - t0, "phases_s": phases.seconds, **_cache_figures(loaded, timed_len)}


def captured_figures(capture, reference, requests, settings: dict, references: list[list[int]], decode=None,
                     window=None) -> dict:
    """Return a cell's figures against a baseline Reference from its capture (bench.execution.accuracy_capture): the
    logits and greedy tokens its timed process computed after its trials, scored here as cell_figures scores them.

    Each of the Reference's sequences is matched to the capture's by its prompt; the capture's answer must start
    with the Reference's (the baseline may have fed fewer positions), else the capture scored other text and is
    refused (BenchInputError: the cell is then measured in a session)."""
    import torch

    from bench.accuracy.figures import position_stats, token_parity
    from bench.errors import BenchInputError

    t0 = time.perf_counter()
    missing = [r.id for r in requests if r.id not in capture.meta["greedy_ids"]]
    if missing:
        raise BenchInputError(f"capture {capture.folder} has no greedy tokens of {len(missing)} of the session's prompts "
                              f"(first: {missing[0]!r}): the cell is measured in a session")
    captured = {tuple(p): (j, list(a)) for j, (p, a) in enumerate(capture.meta["sequences"])}
    chunks, positions = [], 0
    for i, (prompt, answer) in enumerate(reference.sequences):
        j, cap_answer = captured.get(tuple(prompt), (None, None))
        if j is None or cap_answer[: len(answer)] != list(answer):
            raise BenchInputError(f"capture {capture.folder} did not score the reference's sequence {i} (its prompt or "
                                  "answer differs): the cell is measured in a session")
        k = min(len(answer), capture.meta["fed"][j])
        if k:
            chunks.append(position_stats(reference.logits(i)[:k], capture.logits(j)[:k], torch.tensor(answer[:k])))
            positions += k
    first, second = capture.meta["greedy_ids"], capture.meta["greedy_ids_second"]
    meta = capture.meta
    cache = {"static_cache_len": meta.get("static_cache_len"),
             **({"timed_static_cache_len": meta["timed_static_cache_len"]}
                if meta.get("static_cache_len") != meta.get("timed_static_cache_len") else {})}
    return {**figures_from(token_parity(chunks).to_dict(), positions, first, second, reference, requests, settings,
                           references, decode, window),
            "measure_s": meta["measure_s"], "score_s": time.perf_counter() - t0, **cache}


def figures_from(parity: dict, positions: int, first: dict, second: dict, reference, requests, settings: dict,
                 references, decode, window) -> dict:
    """Return a cell's figures from its teacher-forced parity and its two greedy passes ({request id: ids})."""
    cell_out = _ordered(first, requests)
    base_ids = reference.meta["greedy_ids"]
    base_out = [base_ids[r.id] for r in requests]
    return {"parity": parity, "answer_positions": positions,
            "generation": generation_parity(cell_out, base_out, references, settings["prefix_k"], decode, window),
            "determinism": differing_tokens(cell_out, _ordered(second, requests)), "greedy": cell_out,
            "greedy_ids": first}


def _free_bytes(device) -> int | None:
    """Return the free memory of a CUDA device (torch's own cached blocks freed first), or None elsewhere."""
    import torch

    if not str(device).startswith("cuda"):
        return None
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(torch.device(device))[0]


def _fix_cache(loaded, cell, speed_requests, requests, settings: dict) -> int | None:
    """Fix the cell's static cache as its speed run did; grow it only where an accuracy prompt (one the speed run did
    not have) would leave no room: return the speed run's own length."""
    opts, size = cell.options_dict, cell.max_batch_size
    timed = loaded.fix_cache_len(speed_requests, size, opts)
    loaded.grow_cache_len(requests, size, opts, max(settings["answer_tokens"], settings["generate_tokens"]))
    return timed


def _cache_figures(loaded, timed_len: int | None) -> dict:
    """The static cache length the session ran at, and the timed pass's where they differ (said in the record)."""
    used = getattr(loaded, "cache_len", None)
    return {"static_cache_len": used, **({"timed_static_cache_len": timed_len} if used != timed_len else {})}


