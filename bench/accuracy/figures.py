"""The accuracy figures, each defined once: teacher-forced parity, generation parity, determinism.

Teacher-forced parity follows llama.cpp's `llama-perplexity --kl-divergence`: both models read
the same tokens (prompt + reference answer); at every answer position, p = softmax of the
base's logits and q = the cell's, both in float32:

- KL(p || q) = sum_v p_v (log p_v - log q_v), in nats; mean and 99th percentile over positions;
- top-1 agreement: argmax p == argmax q, with its 95 % Wilson score lower bound;
- top-5: the base's argmax is among the cell's five largest logits;
- perplexity of each on the reference answer: exp(mean negative log-likelihood of the answer
  token), and delta-perplexity = cell's - base's.

A served cell (an OpenAI-compatible server) gives, per position, only the log-probability of the
reference token and of its k most likely tokens (`topk_position_stats`). From those, exact: the
cell's perplexity and delta-perplexity (the reference token's own logprob), top-1 agreement (the
server's most likely token is given) and, for k >= 5, the base's top-1 in the cell's top-5.
Approximate: KL over the partition {each token the server named} + {all others, lumped}: with
p_rest = 1 - sum p over the named tokens and q_rest likewise, KL_k = sum_named p log(p/q) +
p_rest log(p_rest/q_rest). Merging tokens into one bucket never raises a KL (the log-sum
inequality), so KL_k is a lower bound of the full KL, tight when the named tokens hold most of
both distributions' mass.

Generation parity compares greedy outputs: the rate of prompts whose first k tokens are
identical, and ROUGE-1/2/L F-measures (Google's `rouge-score`, the implementation Hugging Face
`evaluate` wraps and summarize.py reports) in points (x100). ROUGE is computed on token ids,
each id a word: it needs no decoding, means the same for every tokenizer, and counts exactly the
tokens the models produced (decoded text would merge or split them). summarize.py scores
decoded words, so figures are comparable in kind, not in value.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# The z of a two-sided 95 % interval (the Wilson bound is its lower end).
Z95 = 1.959963984540054


def wilson_lower(successes: int, n: int, z: float = Z95) -> float:
    """Return the Wilson score interval's lower end for successes out of n (0 for n = 0)."""
    if n <= 0:
        return 0.0
    p = successes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def position_stats(base_logits, cell_logits, targets) -> dict:
    """Return per-position tensors (kl, top1 agree, base top-1 in cell top-5, both NLLs) for [T, V] logits.

    targets: [T] the token each position predicts (the reference answer's next token).
    Computed in float32, whatever the models' dtype.
    """
    import torch

    b = torch.log_softmax(base_logits.float(), dim=-1)
    c = torch.log_softmax(cell_logits.float(), dim=-1)
    kl = (b.exp() * (b - c)).sum(-1).clamp_min(0.0)  # rounding can leave -1e-9 where p == q
    base_top = b.argmax(-1)
    agree = base_top == c.argmax(-1)
    top5 = (c.topk(min(5, c.shape[-1]), dim=-1).indices == base_top[:, None]).any(-1)
    t = targets.to(b.device)[:, None]
    return {"kl": kl.cpu(), "agree": agree.cpu(), "top5": top5.cpu(),
            "nll_base": -b.gather(-1, t)[:, 0].cpu(), "nll_cell": -c.gather(-1, t)[:, 0].cpu()}


# Probability mass below which a lumped remainder counts as empty (rounding of the server's logprobs).
REST_EPS = 1e-9


def topk_position_stats(base_logits, served: list[tuple], targets, k: int) -> dict:
    """Return position_stats' tensors for a cell known only through top-k logprobs (a served cell).

    served: per position, (logprob of the target token, {token id: logprob} of the tokens the
    server named: its top-k, and the target where the server adds it[, the id of the server's
    most likely token, None when it cannot be named]). k: how many of the named are its top-k
    (the rest are extras such as the target). KL is the lumped lower bound of the module
    docstring; a top-1 that cannot be named counts as a disagreement; "top5" is left out when k < 5.
    """
    import torch

    b = torch.log_softmax(base_logits.float(), dim=-1)
    p_all = b.exp()
    kl, agree, top5, nll_cell = [], [], [], []
    base_top = b.argmax(-1)
    for t, (target_lp, named, *top) in enumerate(served):
        ids = torch.tensor(list(named), dtype=torch.long)
        q = torch.tensor([math.exp(v) for v in named.values()], dtype=torch.float64)
        p = p_all[t, ids].double()
        p_rest = max(0.0, 1.0 - float(p.sum()))
        q_rest = max(0.0, 1.0 - float(q.sum()))
        value = float((p * (p.clamp_min(1e-300).log() - q.clamp_min(1e-300).log())).sum())
        if p_rest > REST_EPS:
            value += p_rest * (math.log(p_rest) - math.log(max(q_rest, REST_EPS)))
        kl.append(max(0.0, value))
        ranked = sorted(named, key=named.get, reverse=True)[:k]
        top_id = top[0] if top else (ranked[0] if ranked else None)
        agree.append(top_id is not None and top_id == int(base_top[t]))
        top5.append(int(base_top[t]) in ranked[:5])
        nll_cell.append(-target_lp)
    t_ids = targets.to(b.device)[:, None]
    out = {"kl": torch.tensor(kl, dtype=torch.float64), "agree": torch.tensor(agree),
           "nll_base": -b.gather(-1, t_ids)[:, 0].cpu(), "nll_cell": torch.tensor(nll_cell, dtype=torch.float64)}
    if k >= 5:
        out["top5"] = torch.tensor(top5)
    return out


@dataclass(frozen=True)
class TokenParity:
    """Teacher-forced parity of one computation against the base over the same answer tokens."""

    tokens: int
    kl_mean: float
    kl_p99: float
    kl_max: float
    top1: float  # fraction of positions where the argmaxes agree
    top1_lower: float  # its 95 % Wilson lower bound
    top5: float | None  # fraction where the base's argmax is in the cell's top-5 (None: the cell gave fewer than 5)
    ppl_base: float
    ppl_cell: float
    delta_ppl: float

    def to_dict(self) -> dict:
        return asdict(self)


def token_parity(chunks: list[dict]) -> TokenParity:
    """Return the TokenParity of position_stats chunks (one per sequence), in their order."""
    import numpy as np
    import torch

    if not chunks:
        raise ValueError("no positions were scored")
    cat = {k: torch.cat([c[k] for c in chunks]).double().numpy() for k in chunks[0]}
    n = int(cat["kl"].size)
    agree = int(cat["agree"].sum())
    ppl_b, ppl_c = float(math.exp(cat["nll_base"].mean())), float(math.exp(cat["nll_cell"].mean()))
    return TokenParity(
        tokens=n, kl_mean=float(cat["kl"].mean()), kl_p99=float(np.percentile(cat["kl"], 99)),
        kl_max=float(cat["kl"].max()), top1=agree / n, top1_lower=wilson_lower(agree, n),
        top5=float(cat["top5"].mean()) if "top5" in cat else None, ppl_base=ppl_b, ppl_cell=ppl_c, delta_ppl=ppl_c - ppl_b,
    )


class _IdTokens:
    """rouge-score tokenizer for token ids written as space-separated words (no lowercasing or stemming)."""

    @staticmethod
    def tokenize(text: str) -> list[str]:
        return text.split()


def rouge(candidates: list[list[int]], references: list[list[int]]) -> dict:
    """Return mean ROUGE-1/2/L F-measures in points (x100) of candidates against references (token ids)."""
    try:
        from rouge_score import rouge_scorer
    except ModuleNotFoundError as exc:  # a declared dependency; a broken install says what to do
        raise RuntimeError("generation parity needs Google's rouge-score: `pip install rouge-score`") from exc
    if len(candidates) != len(references) or not candidates:
        raise ValueError("rouge needs one reference per candidate, and at least one")
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=_IdTokens())
    sums = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for cand, ref in zip(candidates, references, strict=True):
        scores = scorer.score(" ".join(map(str, ref)), " ".join(map(str, cand)))  # score(target, prediction)
        for k in sums:
            sums[k] += scores[k].fmeasure
    return {k: 100.0 * v / len(candidates) for k, v in sums.items()}


def common_prefix(a: list[int], b: list[int]) -> int:
    """Return how many leading tokens a and b share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def generation_parity(cell: list[list[int]], base: list[list[int]], references: list[list[int]], k: int) -> dict:
    """Return identical-first-k rate, mean common prefix, ROUGE of cell vs base and of both vs the references."""
    if len(cell) != len(base):
        raise ValueError("generation parity needs the same prompts on both sides")
    same_k = sum(1 for a, b in zip(cell, base, strict=True) if len(a) >= k and len(b) >= k and a[:k] == b[:k])
    refs = [r[: len(c)] for r, c in zip(references, cell, strict=True)]  # the answer's first tokens, as many as generated
    out = {"prompts": len(cell), "prefix_k": k, "identical_prefix_rate": same_k / len(cell),
           "mean_common_prefix": sum(common_prefix(a, b) for a, b in zip(cell, base, strict=True)) / len(cell)}
    try:
        vs_ref, base_ref = rouge(cell, refs), rouge(base, [r[: len(b)] for r, b in zip(references, base, strict=True)])
        out.update(rouge_vs_base=rouge(cell, base), rouge_vs_reference=vs_ref, base_rouge_vs_reference=base_ref,
                   rouge1_delta_points=vs_ref["rouge1"] - base_ref["rouge1"])
    except RuntimeError as exc:  # rouge-score missing (an offline GPU machine): the rest stands, and says why
        out.update(rouge_vs_base=None, rouge_vs_reference=None, base_rouge_vs_reference=None, rouge1_delta_points=None,
                   rouge_error=str(exc))
    return out


def differing_tokens(first: list[list[int]], second: list[list[int]]) -> dict:
    """Return how many greedy tokens (and prompts) differ between two runs of the same prompts, position by position."""
    if len(first) != len(second):
        raise ValueError("determinism compares runs of the same prompts")
    tokens = sum(sum(1 for x, y in zip(a, b, strict=False) if x != y) + abs(len(a) - len(b))
                 for a, b in zip(first, second, strict=True))
    prompts = sum(1 for a, b in zip(first, second, strict=True) if a != b)
    return {"differing_tokens": tokens, "differing_prompts": prompts, "tokens": sum(len(a) for a in first)}
