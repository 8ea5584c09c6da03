"""Hugging Face transformers backend: the baseline every speedup is measured against.

Requests are replayed in static batches of at most max_batch_size, left-padded. Generation
ignores EOS (random weights emit anything) and each request stops at exactly its requested
output length through a per-row stopping criterion; the batch runs until its longest request
is done, as a static-batching server would. Token times are taken without adding host
synchronisation: on CUDA each step records an event, read once after the batch.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench.backends.base import Backend, Loaded, Option, RequestTiming, RunOutput
from bench.errors import BenchInputError

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


class HFBackend(Backend):
    name = "hf"
    precisions = tuple(DTYPES)
    options = {
        "attn_implementation": Option("sdpa", ("eager", "sdpa"), help="transformers attention kernel"),
        "cache": Option("dynamic", ("dynamic", "static"), help="KV cache implementation"),
        "batching": Option("dataset", ("dataset", "sorted"), in_build_key=False, help="request order within batches"),
    }

    @classmethod
    def validate(cls, cell) -> None:
        super().validate(cell)
        if cell.device == "cpu" and cell.precision == "fp16":
            raise BenchInputError(
                "precision 'fp16' on device 'cpu' is not a configuration anyone deploys (slow, emulated "
                "kernels): use fp32 or bf16 on CPU, or run fp16 on a GPU (device = 'cuda')"
            )
        from bench.models import resolve_model

        ref = resolve_model(cell.model)
        archs = ref.config.get("architectures") or []
        if ref.config.get("model_type") is None:
            raise BenchInputError(f"model {cell.model!r}: config.json has no model_type, transformers cannot build it")
        if archs and not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs):
            raise BenchInputError(f"model {cell.model!r} is not a causal LM (architectures: {archs})")

    def build(self, key, engines_dir: Path) -> dict:
        # Nothing to compile ahead for eager/sdpa; the folder records the key for inspection.
        folder = engines_dir / key.key_hash
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "key.json").write_text(json.dumps(key.to_dict(), indent=1, sort_keys=True))
        return {"key": key.to_dict(), "folder": str(folder)}

    def load(self, artifact: dict) -> HFLoaded:
        return HFLoaded(artifact)


class HFLoaded(Loaded):
    def __init__(self, artifact: dict):
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        from bench.models import resolve_model

        key = artifact["key"]
        opts = key["options"]
        self.device = torch.device(key["device"])
        self.dtype = getattr(torch, DTYPES[key["precision"]])
        self.cache = opts["cache"]
        ref = resolve_model(key["model"])
        kwargs = {"attn_implementation": opts["attn_implementation"]}
        # transformers >= 4.56 calls it `dtype`; older releases only know `torch_dtype`.
        dtype_kw = "dtype" if _version(transformers.__version__) >= (4, 56) else "torch_dtype"
        kwargs[dtype_kw] = self.dtype
        if ref.path:
            self.model = AutoModelForCausalLM.from_pretrained(ref.path, **kwargs).to(self.device)
        else:
            config = AutoConfig.for_model(**ref.config)
            torch.manual_seed(0)
            with self.device:  # initialise the random weights directly on the device
                self.model = AutoModelForCausalLM.from_config(config, **kwargs)
        self.model.eval()
        gc = self.model.generation_config
        self.pad_id = gc.pad_token_id if gc.pad_token_id is not None else (gc.eos_token_id or 0)
        if isinstance(self.pad_id, list):
            self.pad_id = self.pad_id[0]
        # Exact output lengths: never stop at EOS (random weights would emit it anywhere).
        gc.eos_token_id = None
        gc.pad_token_id = self.pad_id
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _sync(self):
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, requests, max_batch_size: int, options: dict) -> RunOutput:
        import torch

        from bench.workload import batches

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        timings: list[RequestTiming] = []
        self._sync()
        started = time.perf_counter()
        for batch in batches(list(requests), max_batch_size, options["batching"]):
            timings.extend(self._run_batch(batch, torch))
        self._sync()
        ended = time.perf_counter()
        extra = {"num_parameters": self.num_parameters, "weight_bytes": self.weight_bytes}
        if self.device.type == "cuda":
            extra["peak_memory_bytes"] = torch.cuda.max_memory_allocated(self.device)
            extra["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(self.device)
        return RunOutput(timings, started, ended, extra)

    def _run_batch(self, batch, torch) -> list[RequestTiming]:
        from transformers import StoppingCriteria, StoppingCriteriaList

        prompt_len = max(r.input_len for r in batch)
        ids = torch.full((len(batch), prompt_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), prompt_len), dtype=torch.long)
        for i, r in enumerate(batch):  # left padding: the prompt ends where generation starts
            ids[i, prompt_len - r.input_len :] = torch.tensor(r.prompt_ids)
            mask[i, prompt_len - r.input_len :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        out_lens = [r.output_len for r in batch]
        max_new = max(out_lens)
        lens = torch.tensor(out_lens, device=self.device)
        # done_at[k]: which rows have their k tokens; precomputed so a step adds no host sync.
        done_at = [lens <= k for k in range(max_new + 1)]
        cuda = self.device.type == "cuda"
        marks: list = []

        class StepClock(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                if cuda:
                    ev = torch.cuda.Event(enable_timing=True)
                    ev.record()
                    marks.append(ev)
                else:
                    marks.append(time.perf_counter())
                return done_at[min(input_ids.shape[1] - prompt_len, max_new)]

        gen = {
            "max_new_tokens": max_new,
            "do_sample": False,
            "num_beams": 1,
            "pad_token_id": self.pad_id,
            "stopping_criteria": StoppingCriteriaList([StepClock()]),
        }
        if self.cache == "static":
            gen["cache_implementation"] = "static"
        self._sync()
        if cuda:
            start_ev = torch.cuda.Event(enable_timing=True)
            start_ev.record()
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, **gen)
        self._sync()
        end = time.perf_counter()
        if cuda:
            marks = [start + start_ev.elapsed_time(ev) / 1000.0 for ev in marks]
        generated = out.shape[1] - prompt_len
        timings = []
        for r in batch:
            got = min(r.output_len, generated, len(marks))
            timings.append(
                RequestTiming(
                    request_id=r.id,
                    input_len=r.input_len,
                    expected_output_len=r.output_len,
                    output_len=got,
                    start=start,
                    token_times=marks[:got],
                    end=marks[got - 1] if got else end,
                )
            )
        return timings

    def recover(self) -> None:
        import gc

        import torch

        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def close(self) -> None:
        del self.model
        self.recover()


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
