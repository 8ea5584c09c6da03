"""Models the harness can build: named configs (random weights), shipped models, or a local model directory.

Configs are data, not code. No weights are downloaded. Most named models are a Qwen2-architecture
config whose weights are randomly initialised, which is enough for speed, memory and kernel
measurements (they depend on shapes and dtypes, not on the values of the weights). A shipped
model (`qwen-tiny-trained`) is a small trained Hugging Face folder installed with the package
(bench/model_data/<name>/, built by scripts/build_tiny_trained.py): its manifest's SHA-256 of
every file is checked before it is used, so every machine computes with the same weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from bench.errors import BenchInputError, choices
from bench.files import file_sha256, user_path

# Qwen-7B-Chat's shape (hidden 4096, 32 layers, 32 heads without GQA, MLP 11008, vocab 151936,
# untied lm_head, qkv bias) expressed as a transformers Qwen2 config.
QWEN_7B_SHAPE = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "bos_token_id": 151643,
    "eos_token_id": 151643,
}

# Same architecture, CPU-sized: real Qwen vocabulary (so the lm_head and embedding costs and the
# tokenizer's ids are the real ones) with a tiny trunk. GQA (2 kv heads) keeps that path tested.
QWEN_TINY = {
    **QWEN_7B_SHAPE,
    "hidden_size": 128,
    "intermediate_size": 344,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}

NAMED_MODELS: dict[str, dict] = {"qwen-tiny": QWEN_TINY, "qwen-7b-shape": QWEN_7B_SHAPE}

# Trained models shipped as package data: name -> folder (config.json, model.safetensors, tokenizer
# files, generation_config.json, recipe.json, heldout.json, manifest.json). Each is also a tokenizer name.
MODEL_DATA = Path(__file__).parent / "model_data"
SHIPPED_MODELS: dict[str, Path] = {"qwen-tiny-trained": MODEL_DATA / "qwen-tiny-trained"}
MANIFEST = "manifest.json"
REBUILD_HINT = ("reinstall bench (`pip install --force-reinstall .`; in a clone, `git checkout -- {folder}`) or "
                "rebuild the folder with `python scripts/build_tiny_trained.py`")

# Qwen-7B-Chat's tokenizer (the workloads' 'qwen-7b-chat', bench/workloads/tokenizers.py): 151,643 BPE
# ranks + 208 special tokens. A model whose vocab_size is smaller cannot embed every id it produces.
QWEN_CHAT_TOKENIZER_IDS = 151851


def head_dim(config: dict) -> int:
    """Return the width of one attention head: the config's head_dim, else hidden_size / heads."""
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def kv_heads(config: dict) -> int:
    """Return the number of key/value heads (GQA), the attention heads when the config has none."""
    return config.get("num_key_value_heads") or config["num_attention_heads"]


def kv_bytes_per_token(config: dict, kv_dtype_bytes: int) -> int:
    """Return the KV-cache bytes one token occupies: 2 (K and V) x layers x kv heads x head dim x dtype."""
    return 2 * config["num_hidden_layers"] * kv_heads(config) * head_dim(config) * kv_dtype_bytes


@dataclass(frozen=True)
class ModelRef:
    """What a cell's `model` string resolves to: a named config or a local directory."""

    name: str
    config: dict  # the model config as a plain dict (config.json's content)
    path: str | None = None  # local directory with weights, or None for random weights

    @property
    def num_parameters(self) -> int:
        """Return the parameter count implied by the config (decoder-only, Qwen2-style)."""
        c = self.config
        h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        heads, kv, hd = c["num_attention_heads"], kv_heads(c), head_dim(c)
        attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
        attn_bias = (heads + 2 * kv) * hd
        mlp = 3 * h * c["intermediate_size"]
        per_layer = attn + attn_bias + mlp + 2 * h
        embed = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
        return layers * per_layer + embed + h


def model_names() -> list[str]:
    """Return every name `model` accepts besides a directory: the random-weight configs and the shipped models."""
    return [*NAMED_MODELS, *SHIPPED_MODELS]


def resolve_model(model: str) -> ModelRef:
    """Return the ModelRef for a named model, a shipped model or a local directory; BenchInputError otherwise."""
    if model in NAMED_MODELS:
        return ModelRef(name=model, config=dict(NAMED_MODELS[model]))
    if model in SHIPPED_MODELS:
        folder = shipped_folder(model)
        return ModelRef(name=model, config=_read_config(folder), path=str(folder))
    path = user_path(model, "model")
    if path.is_dir():
        return ModelRef(name=path.name, config=_read_config(path), path=str(path.resolve()))
    raise BenchInputError(
        f"unknown model {model!r}: use a named model ({choices(model_names())}) "
        "or the path of a local model directory containing config.json"
    )


def _read_config(path: Path) -> dict:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise BenchInputError(
            f"model directory {str(path)!r} has no config.json: point `model` at a Hugging Face "
            f"model directory (config.json + weights), or use a named model: {choices(model_names())}"
        )
    try:
        return json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchInputError(f"cannot read {config_file}: {exc}") from exc


def shipped_folder(name: str) -> Path:
    """Return the folder of shipped model `name` after checking every file against its manifest (BenchInputError if not)."""
    folder = SHIPPED_MODELS[name]
    files = sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    _verify(name, folder, tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    return folder


@lru_cache(maxsize=8)
def _verify(name: str, folder: Path, stats: tuple) -> None:
    """Check folder against its manifest once per state of its files (stats: name, size, mtime of each)."""
    hint = REBUILD_HINT.format(folder=_shown(folder))
    manifest = folder / MANIFEST
    try:
        listed = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchInputError(f"model {name!r}: cannot read {_shown(manifest)} ({exc}); {hint}") from None
    for file, want in sorted(listed.items()):
        path = folder / file
        if not path.is_file():
            raise BenchInputError(f"model {name!r}: {_shown(path)} is missing (listed in {MANIFEST}); {hint}")
        got = file_sha256(path)
        if got != want:
            raise BenchInputError(f"model {name!r}: {_shown(path)} does not match {MANIFEST} (sha256 {got[:16]}..., "
                                  f"expected {want[:16]}...): the folder is damaged or was edited; {hint}")


def _shown(path: Path) -> str:
    """Return path relative to the working directory where it lies under it (a clone), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def manifest_digest(folder: Path) -> str:
    """Return the digest that names a shipped folder: SHA-256 of its manifest's canonical file list."""
    listed = json.loads((folder / MANIFEST).read_text())["files"]
    return hashlib.sha256(json.dumps(listed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def tokenizer_folder(tokenizer: str) -> Path | None:
    """Return the folder holding the files of workload tokenizer `tokenizer` (a shipped model's, checked, or a local
    directory), or None where the name is no folder ('qwen-7b-chat', an unknown name)."""
    if tokenizer in SHIPPED_MODELS:
        return shipped_folder(tokenizer)
    path = user_path(tokenizer, "tokenizer")
    return path if path.is_dir() else None


def tokenizer_ids(tokenizer: str) -> int | None:
    """Return how many token ids workload tokenizer `tokenizer` can produce (largest id + 1), read from its files
    without loading it; None where the files do not say (no tokenizer.json or vocab.json)."""
    if tokenizer == "qwen-7b-chat":
        return QWEN_CHAT_TOKENIZER_IDS
    folder = tokenizer_folder(tokenizer)
    if folder is None:
        return None
    return _ids_in_files(folder)


@lru_cache(maxsize=16)
def _ids_in_files(folder: Path) -> int | None:
    ids: list[int] = []
    try:
        if (folder / "tokenizer.json").is_file():
            doc = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
            vocab = doc.get("model", {}).get("vocab", {})
            ids += list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))  # BPE/WordLevel | Unigram
            ids += [t["id"] for t in doc.get("added_tokens") or []]
        elif (folder / "vocab.json").is_file():
            ids += list(json.loads((folder / "vocab.json").read_text(encoding="utf-8")).values())
            if (folder / "added_tokens.json").is_file():
                ids += list(json.loads((folder / "added_tokens.json").read_text(encoding="utf-8")).values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # the tokenizer's own loader says what is wrong with its files, when the workload is built
    ints = [i for i in ids if isinstance(i, int)]
    return max(ints) + 1 if ints else None


def check_tokenizer_fits(model: str, tokenizer: str, where: str) -> None:
    """Raise BenchInputError if workload tokenizer `tokenizer` can produce ids past model `model`'s vocab_size."""
    vocab = resolve_model(model).config.get("vocab_size")
    ids = tokenizer_ids(tokenizer)
    if not isinstance(vocab, int) or ids is None or ids <= vocab:
        return
    own = model in SHIPPED_MODELS or (tokenizer_folder(model) is not None and tokenizer_ids(model) is not None)
    fix = (f"set tokenizer = {model!r} (the model's own)" if own else
           "give the workload the tokenizer this model was trained with (a local model directory)")
    raise BenchInputError(
        f"{where}: tokenizer {tokenizer!r} produces ids up to {ids - 1}, but model {model!r} has vocab_size {vocab}: "
        f"its embedding has no row for ids from {vocab} up, and the ids below mean other text to it; {fix}"
    )
