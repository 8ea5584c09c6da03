"""Reference answers of a workload's requests: the token ids `bench accuracy` scores teacher-forced.

A ShareGPT request's reference answer is its record's second turn, the text whose length set
the request's output length (bench.workloads.workload._sharegpt). The answers are kept out of
the workload file on purpose: the speed run hashes that file's requests (cell ids, content
hashes), and answers must not change either. They are stored beside it instead,
`<workload file stem>.answers.json`, tagged with the workload's content hash and tokenizer.

Synthetic workloads (random token ids) and frozen `file` workloads carry no answers: `None`,
and `bench accuracy` falls back to the baseline's own greedy continuation when the matrix's
[accuracy] reference allows it (docs/guide/accuracy.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.errors import BenchInputError
from bench.files import write_atomic
from bench.spec.cells import WorkloadSpec
from bench.workloads.workload import Workload

ANSWERS_FORMAT = 1


def answers_path(workload_file: str | Path) -> Path:
    """Return where the reference answers of a frozen workload file are kept (beside it)."""
    p = Path(workload_file)
    return p.with_name(p.stem + ".answers.json")


def accuracy_workload(spec: WorkloadSpec, settings, cache: Path = Path("workloads/cache")):
    """Return (the accuracy workload, its file, its answers or None) of a speed workload: its first `prompts` requests,
    or its requests and the next ones of the same sampling (seed, rules) where `prompts` is more. The one rule for the
    prompts `bench accuracy` scores, whether a session or the timed process (`bench run --accuracy-capture`) feeds them."""
    from dataclasses import replace

    from bench.workloads.workload import cached_workload

    if settings.prompts > spec.num_requests:
        spec = replace(spec, num_requests=settings.prompts)
    wl, wl_file = cached_workload(spec, cache)
    answers = None if settings.reference == "baseline-greedy" else reference_answers(spec, wl, wl_file)
    return wl, wl_file, answers


def scored_sequences(requests, answers: dict, answer_tokens: int, max_total_len: int) -> list[tuple[list[int], list[int]]]:
    """Return the (prompt, answer) pairs teacher-forced: each request's reference answer, cut to answer_tokens and to
    the room max_total_len leaves after its prompt; a request with no room is left out."""
    pairs = []
    for r in requests:
        answer = list(answers[r.id])[: min(answer_tokens, max_total_len - r.input_len)]
        if answer:
            pairs.append((list(r.prompt_ids), answer))
    return pairs


def has_answers(spec: WorkloadSpec) -> bool:
    """Return whether a workload of this spec has reference answers (its source carries them)."""
    return spec.source == "sharegpt"


def reference_answers(spec: WorkloadSpec, workload: Workload, workload_file: str | Path) -> dict[str, list[int]] | None:
    """Return {request id: answer token ids} of the workload's requests, or None if its source has none.

    Read from the file beside the workload when it matches the workload's content hash and
    tokenizer; otherwise re-read from the ShareGPT source and written there.
    """
    if not has_answers(spec):
        return None
    path = answers_path(workload_file)
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
            if (doc.get("format") == ANSWERS_FORMAT and doc.get("content_hash") == workload.content_hash
                    and doc.get("tokenizer") == workload.tokenizer):
                return {k: list(v) for k, v in doc["answers"].items()}
        except (OSError, ValueError, KeyError, AttributeError):
            pass  # a damaged file is rebuilt, never trusted
    answers = _read_answers(spec, workload)
    write_atomic(path, json.dumps({"format": ANSWERS_FORMAT, "content_hash": workload.content_hash,
                                   "tokenizer": workload.tokenizer, "answers": answers}, sort_keys=True))
    return answers


def _read_answers(spec: WorkloadSpec, workload: Workload) -> dict[str, list[int]]:
    from bench.workloads.sharegpt import read_first_turns
    from bench.workloads.tokenizers import load_tokenizer

    tok = load_tokenizer(spec.tokenizer)
    if tok.identity != workload.tokenizer:
        raise BenchInputError(f"workload {spec.name!r} was tokenized by {workload.tokenizer}, but its spec now loads "
                              f"{tok.identity}: rebuild the workload (delete its cache file) before measuring accuracy")
    pairs, _, _ = read_first_turns(spec.path)
    wanted = {r.id.split("~", 1)[0] for r in workload.requests}  # oversampled copies are "<id>~<n>"
    texts: dict[str, str] = {}
    for rec_id, _prompt, answer in pairs:
        if rec_id in wanted and rec_id not in texts:
            texts[rec_id] = answer
    out = {}
    for r in workload.requests:
        base = r.id.split("~", 1)[0]
        if base not in texts:
            raise BenchInputError(f"workload {spec.name!r}: request {r.id!r} is not in the ShareGPT source any more; "
                                  "rebuild the workload from the source it was sampled from")
        out[r.id] = tok.encode(texts[base])
    return out
