"""trtllm-bench's JSONL dataset format: export a workload to it, read requests from it.

One JSON object per line, as TensorRT-LLM's benchmarks/cpp/prepare_dataset.py prints it
(utils.print_dataset) and trtllm-bench's --dataset reads it:

    {"task_id":0,"input_ids":[...],"output_tokens":128}
    {"task_id":1,"prompt":"text ...","output_tokens":128}

Either input_ids or prompt (text, tokenized here with the workload's tokenizer). Extra keys
(media_paths, lora_request, ...) are ignored on import. Arrival times are not part of the
format: a trtllm-bench run sends requests at its own --concurrency / rate.
"""

from __future__ import annotations

import json

from bench.errors import BenchInputError


def to_trtllm_jsonl(workload) -> str:
    """Return the workload's requests as trtllm-bench JSONL (task_id = position, input_ids)."""
    lines = [
        json.dumps({"task_id": i, "input_ids": list(r.prompt_ids), "output_tokens": r.output_len}, separators=(",", ":"))
        for i, r in enumerate(workload.requests)
    ]
    return "\n".join(lines) + "\n"


def read_trtllm_jsonl(text: str, tok, where: str = "dataset") -> list:
    """Return the Requests in a trtllm-bench JSONL text; BenchInputError naming the bad line."""
    from bench.workloads.request import Request

    reqs = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise BenchInputError(f"{where} line {lineno} is not JSON ({exc}); each line must be one JSON object") from exc
        if not isinstance(obj, dict):
            raise BenchInputError(f"{where} line {lineno}: expected a JSON object, got {type(obj).__name__}")
        out = obj.get("output_tokens")
        if not isinstance(out, int) or isinstance(out, bool) or out <= 0:
            raise BenchInputError(f"{where} line {lineno}: output_tokens must be a positive integer, got {out!r}")
        ids = obj.get("input_ids")
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(t, int) and 0 <= t < tok.vocab_size for t in ids):
                raise BenchInputError(
                    f"{where} line {lineno}: input_ids must be a list of token ids in [0, {tok.vocab_size}) for "
                    f"tokenizer {tok.identity}; is the dataset for another model?"
                )
        elif isinstance(obj.get("prompt"), str):
            ids = tok.encode(obj["prompt"])
        else:
            raise BenchInputError(f"{where} line {lineno}: needs input_ids (a list of ints) or prompt (a string)")
        task_id = str(obj.get("task_id", lineno - 1))
        if task_id in seen:
            raise BenchInputError(f"{where} line {lineno}: task_id {task_id} appears twice; task ids must be unique")
        seen.add(task_id)
        reqs.append(Request(task_id, tuple(ids), out))
    if not reqs:
        raise BenchInputError(f"{where} holds no requests")
    return reqs
