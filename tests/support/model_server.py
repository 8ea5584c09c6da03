"""An OpenAI-compatible completions server backed by a real Hugging Face model (tests only, loopback).

The paced test server (bench/serving/paced_server.py) emits synthetic text; this one serves a
model folder's own numbers, so an openai cell's accuracy figures are real: greedy completions
(streamed, exactly max_tokens tokens) and, for echo requests, the model's own prompt logprobs in
one of three server flavours:

- "vllm": accepts vLLM's extension fields; `prompt_logprobs: k` gives choices[0].prompt_logprobs
  ([None, {"<id>": {"logprob", "rank", "decoded_token"}}, ...], top-k plus the prompt token);
  `echo` + `logprobs: k` gives the legacy layout, tokens as "token_id:<id>" with
  `return_tokens_as_token_ids`;
- "openai": refuses unknown fields (HTTP 400, as OpenAI's API does) and answers echo + logprobs
  in the legacy layout with token texts (each id decoded alone);
- "none": as transformers serve 5.x: text prompts only (HTTP 400 for token ids), vLLM's fields
  refused (HTTP 422 "Unexpected fields"), echo and logprobs accepted and ignored (logprobs null).

`corrupt_layer` serves the model with bench.backends.hf.corrupt's fault applied.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.serving.paced_server import TestServer

FLAVORS = ("vllm", "openai", "none")


class ModelServer(TestServer):
    """The model server in a background thread (TestServer's loop and lifetime); a context manager."""

    def __init__(self, model_dir: Path, flavor: str = "vllm", corrupt_layer: int | None = None, name: str = "tiny"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}")
        super().__init__()
        self.flavor, self.name = flavor, name
        self.tok = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        if corrupt_layer is not None:
            from bench.backends.hf.corrupt import corrupt_layer as corrupt

            corrupt(self.model, corrupt_layer)
        self.requests: list[dict] = []

    async def _start(self) -> None:
        from aiohttp import web

        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    # --- the model's numbers ------------------------------------------------------------------

    def _prompt_logprobs(self, ids: list[int]):
        """Return [T, V] log-softmax of the logits predicting tokens 1..T-1 (row t-1 predicts token t)."""
        import torch

        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, :-1]
        return torch.log_softmax(logits.float(), dim=-1)

    def _greedy(self, ids: list[int], n: int) -> list[int]:
        import torch

        with torch.inference_mode():
            out = self.model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                      do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                      pad_token_id=self.tok.eos_token_id or 0)
        return out[0, len(ids):].tolist()

    def _text(self, i: int, as_ids: bool) -> str:
        return f"token_id:{i}" if as_ids else self.tok.decode([i])

    def _choice(self, body: dict, ids: list[int]) -> tuple[dict, list[int]]:
        generated = self._greedy(ids, max(1, int(body.get("max_tokens", 16))))
        choice = {"index": 0, "text": self.tok.decode(generated), "logprobs": None, "finish_reason": "length"}
        k = body.get("logprobs")
        want_prompt = self.flavor == "vllm" and body.get("prompt_logprobs") is not None
        if self.flavor == "none" or not (body.get("echo") and k is not None or want_prompt):
            return choice, generated
        lp = self._prompt_logprobs(ids)
        if want_prompt:
            kp = int(body["prompt_logprobs"])
            entries: list = [None]
            for t in range(1, len(ids)):
                row = lp[t - 1]
                top = row.topk(kp)
                named = {int(i): float(v) for i, v in zip(top.indices, top.values, strict=True)}
                named.setdefault(ids[t], float(row[ids[t]]))
                ranks = {i: int((row > row[i]).sum()) + 1 for i in named}
                entries.append({str(i): {"logprob": v, "rank": ranks[i], "decoded_token": self.tok.decode([i])}
                                for i, v in named.items()})
            choice["prompt_logprobs"] = entries
        if body.get("echo") and k is not None:
            as_ids = self.flavor == "vllm" and bool(body.get("return_tokens_as_token_ids"))
            tokens, values, tops = [], [], []
            for t, i in enumerate(ids):
                tokens.append(self._text(i, as_ids))
                if t == 0:
                    values.append(None)
                    tops.append(None)
                    continue
                row = lp[t - 1]
                values.append(float(row[i]))
                top = row.topk(int(k))
                tops.append({self._text(int(j), as_ids): float(v) for j, v in zip(top.indices, top.values, strict=True)})
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
                                  "text_offset": [0] * len(tokens)}
        return choice, generated

    # --- HTTP -------------------------------------------------------------------------------------

    def _app(self):
        from aiohttp import web

        async def models(request):
            return web.json_response({"object": "list", "data": [{"id": self.name, "object": "model"}]})

        async def completions(request):
            body = await request.json()
            self.requests.append(body)
            extras = sorted({"prompt_logprobs", "return_tokens_as_token_ids"} & set(body))
            if extras and self.flavor == "openai":
                return web.json_response({"error": {"message": f"Unrecognized request argument supplied: {extras[0]}"}},
                                         status=400)
            if extras and self.flavor == "none":
                return web.json_response({"detail": f"Unexpected fields in the request: {set(extras)}"}, status=422)
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                ids = self.tok.encode(prompt, add_special_tokens=False)
            elif self.flavor == "none":
                return web.json_response({"detail": "prompt must be a string."}, status=400)
            else:
                ids = [int(i) for i in prompt]
            choice, generated = self._choice(body, ids)
            if not body.get("stream"):
                return web.json_response({"id": "cmpl-model", "object": "text_completion", "created": 0,
                                          "model": self.name, "choices": [choice]})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for j in range(len(generated)):  # one event per generated token, its text decoded incrementally
                text = self.tok.decode(generated[: j + 1])[len(self.tok.decode(generated[:j])):]
                event = {"id": "cmpl-model", "object": "text_completion", "created": 0, "model": self.name,
                         "choices": [{"index": 0, "text": text, "logprobs": None,
                                      "finish_reason": "length" if j == len(generated) - 1 else None}]}
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", completions)
        return app

