"""Teacher-forced parity of a served cell through the server's prompt logprobs (OpenAI-compatible completions).

One non-streaming POST /v1/completions per sequence (whatever the cell's endpoint: chat completions
have no echo): the prompt is prompt + answer as token ids,
`echo: true` (the prompt comes back with its logprobs), `logprobs: TOP_K` (5), `max_tokens: 1`
(the one generated token is ignored), `temperature: 0`. Two reply layouts are read:

- vLLM's `choices[0].prompt_logprobs` (requested with the extension field `prompt_logprobs: 20`,
  and `return_tokens_as_token_ids: true` for the echo layout below): one entry per prompt token,
  None for the first, else {"<token id>": {"logprob", "rank", "decoded_token"}} holding the top-k
  and always the actual prompt token (vllm/entrypoints/openai/protocol.py CompletionResponseChoice
  .prompt_logprobs: list[dict[int, Logprob] | None]; CompletionRequest.prompt_logprobs,
  .return_tokens_as_token_ids, whose tokens read "token_id:<id>");
- the OpenAI legacy layout `choices[0].logprobs` = {tokens, token_logprobs, top_logprobs,
  text_offset} (OpenAI API reference, Completions: `echo` "Echo back the prompt in addition to the
  completion", `logprobs` "Include the log probabilities on the logprobs most likely output tokens
  ... The maximum value for logprobs is 5"; vLLM's CompletionLogProbs is the same shape), with
  token_logprobs[0] = None. Its top_logprobs are keyed by token *text*: a text names a token id
  when exactly one id of the workload's tokenizer decodes to it ("token_id:<id>" names it
  directly); a text naming none or several is left in the lumped remainder (counted), and a
  top-1 text naming none counts as a top-1 disagreement (counted).

The request is tried in that order: with vLLM's extension fields; without them (a server that
refuses unknown fields, as OpenAI's and transformers serve's do); then with the prompt as text,
used only if the server's echoed tokens are exactly ours. A reply with neither layout (transformers
serve 5.x lists echo and logprobs among the fields it ignores: transformers/cli/serving/completion.py
UNUSED_LEGACY_COMPLETION_FIELDS) means generation parity only, and the record says that the server
returned no prompt logprobs: detected from the reply, never assumed.

What is exact and what is not is bench.accuracy.figures.topk_position_stats' business: the
reference token's logprob (perplexity, delta-PPL) and top-1 are exact; KL is a lower bound over
the top-k with the rest lumped.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

# Logprobs asked per position. OpenAI's legacy completions cap `logprobs` at 5; vLLM caps both fields at its
# max_logprobs (default 20: vllm/config ModelConfig.max_logprobs), and a larger k tightens the KL bound (less mass lumped).
TOP_K = 5
PROMPT_TOP_K = 20
NO_LOGPROBS = "generation parity only: the server returned no prompt logprobs"


def approximation(k: int) -> str:
    """Return what is exact and what is approximate in a served cell's teacher-forced figures, for top-k."""
    return (f"KL over the server's top-{k} tokens (and the reference token where it adds it) with the remaining "
            "probability mass lumped into one bucket: a lower bound of the full KL; perplexity, delta-PPL and top-1 "
            "agreement are exact (the reference token's own logprob, the server's top-1)")


class NoPromptLogprobs(Exception):
    """The server gives no usable prompt logprobs; the message is the record's parity_reason."""


def post_json(url: str, body: dict, api_key: str | None, timeout: float) -> tuple[int, object]:
    """Return (HTTP status, parsed JSON or the raw text) of a POST."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class ServedLogprobs:
    """Per-position (target logprob, {token id: logprob}) of a server, found by trying the request layouts once."""

    def __init__(self, base_url: str, model: str, tokenizer, api_key: str | None = None, timeout: float = 600.0):
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model, self.tok, self.api_key, self.timeout = model, tokenizer, api_key, timeout
        self.variant: str | None = None  # the request layout that worked
        self.source: str | None = None  # "prompt_logprobs" or "echo logprobs"
        self.top_k = TOP_K  # how many of each position's named tokens are the server's top-k
        self.unresolved = 0  # named texts that map to no single token id (left in the remainder)
        self.unresolved_top1 = 0  # positions whose top-1 text names no single id (counted as disagreements)
        self._by_text: dict[str, int | None] | None = None

    def _body(self, variant: str, ids: list[int]) -> dict:
        body = {"model": self.model, "prompt": ids if variant != "text" else self.tok.decode(ids), "max_tokens": 1,
                "temperature": 0, "echo": True, "logprobs": TOP_K, "stream": False}
        if variant == "vllm":
            body.update(prompt_logprobs=PROMPT_TOP_K, return_tokens_as_token_ids=True)
        return body

    def positions(self, ids: list[int]) -> list[tuple[float, dict[int, float]] | None]:
        """Return one entry per token of ids (None for the first): what the server gives for it.

        NoPromptLogprobs (with the reason) when no layout gives them.
        """
        tried = [self.variant] if self.variant else ["vllm", "openai", "text"]
        failures = []
        for variant in tried:
            status, reply = post_json(self.url, self._body(variant, ids), self.api_key, self.timeout)
            if status != 200:
                failures.append(f"{variant}: HTTP {status} {str(reply)[:200]}")
                continue
            if not isinstance(reply, dict) or not reply.get("choices"):
                raise NoPromptLogprobs(f"generation parity only: the server's non-streaming completion is not OpenAI "
                                       f"JSON ({str(reply)[:200]!r})")
            parsed = self._parse(reply["choices"][0], ids, variant)
            if parsed is None:  # it answered, without prompt logprobs: another layout will not change that
                raise NoPromptLogprobs(NO_LOGPROBS + " (its choices[0] holds neither prompt_logprobs nor echoed "
                                                     "logprobs)")
            self.variant = variant
            return parsed
        raise NoPromptLogprobs("generation parity only: the server refused every prompt-logprobs request ("
                               + "; ".join(failures) + ")")

    def _parse(self, choice: dict, ids: list[int], variant: str):
        prompt_lp = choice.get("prompt_logprobs")
        if isinstance(prompt_lp, list) and len(prompt_lp) >= len(ids):
            self.source, self.top_k = "prompt_logprobs", PROMPT_TOP_K
            out = [None]
            for i in range(1, len(ids)):
                entry = prompt_lp[i] or {}
                named = {int(t): float(v["logprob"] if isinstance(v, dict) else v) for t, v in entry.items()}
                if ids[i] not in named:
                    raise NoPromptLogprobs(f"generation parity only: prompt_logprobs entry {i} lacks the prompt token "
                                           f"{ids[i]}: the server tokenized the prompt differently")
                out.append((named[ids[i]], named, max(named, key=named.get)))  # the top-k holds the top-1 (rank 1)
            return out
        lp = choice.get("logprobs")
        if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list) or not lp.get("top_logprobs"):
            return None
        tokens, values, tops = lp.get("tokens") or [], lp["token_logprobs"], lp["top_logprobs"]
        if len(values) < len(ids) or len(tops) < len(ids):
            return None
        echoed = [self._resolve(t) for t in tokens[: len(ids)]]
        if variant == "text" and echoed != list(ids):
            raise NoPromptLogprobs("generation parity only: the server takes text prompts only and tokenized them "
                                   "differently, so its prompt logprobs cannot be aligned with the reference tokens")
        self.source, self.top_k = "echo logprobs", TOP_K
        out = [None]
        for i in range(1, len(ids)):
            if not tops[i] or values[i] is None:
                raise NoPromptLogprobs(f"generation parity only: the server's echoed logprobs lack position {i} "
                                       "(token_logprobs or top_logprobs)")
            named: dict[int, float] = {}
            for text, v in tops[i].items():
                tid = self._resolve(text)
                if tid is None:
                    self.unresolved += 1
                else:
                    named[tid] = float(v)
            top_id = self._resolve(max(tops[i], key=tops[i].get))  # None: a text naming no single id
            if top_id is None:
                self.unresolved_top1 += 1
            named.setdefault(ids[i], float(values[i]))  # the reference token's logprob: exact
            out.append((float(values[i]), named, top_id))
        return out

    def _resolve(self, text: str) -> int | None:
        """Return the token id a reply's token text names: "token_id:N", or the one id decoding to it."""
        if text.startswith("token_id:") and text[9:].isdigit():
            return int(text[9:])
        if self._by_text is None:
            table: dict[str, int | None] = {}
            for i in range(self.tok.vocab_size):
                s = self.tok.decode([i])
                table[s] = None if s in table else i  # a text several ids decode to names none of them
            self._by_text = table
        return self._by_text.get(text)


def served_parity(base_src, served: ServedLogprobs, sequences) -> tuple[dict, dict]:
    """Return (TokenParity as a dict, how it was measured) of a server against the base's logit source."""
    import torch

    from bench.accuracy.figures import token_parity, topk_position_stats

    chunks = []
    for prompt, answer in sequences:
        ids = list(prompt) + list(answer)
        positions = served.positions(ids)[len(prompt):]  # the entries predicting each answer token
        chunks.append(topk_position_stats(base_src(prompt, answer), positions, torch.tensor(answer), served.top_k))
    k = served.top_k
    method = {"source": served.source, "request": served.variant, "top_k": k, "kl": "lower bound",
              "approximation": approximation(k), "unresolved_texts": served.unresolved,
              "unresolved_top1": served.unresolved_top1}
    return {**token_parity(chunks).to_dict(), "kl_method": f"top-{k} lumped (lower bound)"}, method
