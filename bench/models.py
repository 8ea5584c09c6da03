"""Models the harness can build: named configs (random weights) or a local model directory.

Configs are data, not code. No weights are downloaded: a named model is a Qwen2-architecture
config whose weights are randomly initialised, which is enough for speed, memory and kernel
measurements (they depend on shapes and dtypes, not on the values of the weights).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchInputError, choices

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


def resolve_model(model: str) -> ModelRef:
    """Return the ModelRef for a named model or a local directory; BenchInputError otherwise."""
    if model in NAMED_MODELS:
        return ModelRef(name=model, config=dict(NAMED_MODELS[model]))
    path = Path(model).expanduser()
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise BenchInputError(
                f"model directory {str(path)!r} has no config.json: point `model` at a Hugging Face "
                f"model directory (config.json + weights), or use a named model: {choices(NAMED_MODELS)}"
            )
        try:
            config = json.loads(config_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise BenchInputError(f"cannot read {config_file}: {exc}") from exc
        return ModelRef(name=path.name, config=config, path=str(path.resolve()))
    raise BenchInputError(
        f"unknown model {model!r}: use a named model ({choices(NAMED_MODELS)}) "
        "or the path of a local model directory containing config.json"
    )
