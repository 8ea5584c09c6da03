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

Non-finite logits (an fp16 overflow, a broken kernel) are counted per position (`nonfinite`)
and left out of the other figures, which are then computed over the finite positions only: a
cell with any is judged broken (bench.accuracy.verdict), and its record is stored like any other.

Generation parity compares greedy outputs: the rate of prompts whose first k tokens are
identical, the mean position where the cell's output first parts from the baseline's, and ROUGE
F-measures (Google's `rouge-score`, the implementation Hugging Face `evaluate` wraps and
TensorRT-LLM's summarize.py reports) in points (x100), two ways:

- on decoded text, as summarize.py computes it (`evaluate.load("rouge")`'s settings: rouge-score's
  default tokenizer, lowercased, split at anything but [a-z0-9], no stemmer; ROUGE-1/2/L/Lsum),
  except that a CJK character counts as a word of its own (`TextTokens`): the default tokenizer
  drops every non-ASCII character, so Chinese text would score 0 against anything;
- on token ids, each id a word: it needs no decoding, means the same for every tokenizer and
  counts exactly the tokens the models produced.

The reference report's -1 / +2 window is judged on the text ROUGE-1 of cell and baseline against
the reference answers, paired by prompt: `paired_bootstrap` gives the mean per-prompt difference
with its 95 % interval, and how many prompts the window would need to be decidable.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from bench.metrics import common_prefix

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
    Positions where the cell's logits hold a NaN or an infinity are counted (`nonfinite`) and dropped
    from the other tensors: one overflow must not turn every figure into NaN, nor pass unseen.
    """
    import torch

    cell = cell_logits.float()
    base_logits = base_logits.to(cell.device)  # a Reference's rows are on the CPU, a GPU cell's logits are not
    finite = torch.isfinite(cell).all(-1)
    keep = finite.nonzero()[:, 0] if not bool(finite.all()) else None
    if keep is not None:
        base_logits, cell, targets = base_logits[keep], cell[keep], targets.to(keep.device)[keep]
    b = torch.log_softmax(base_logits.float(), dim=-1)
    c = torch.log_softmax(cell, dim=-1)
    kl = (b.exp() * (b - c)).sum(-1).clamp_min(0.0)  # rounding can leave -1e-9 where p == q
    base_top = b.argmax(-1)
    agree = base_top == c.argmax(-1)
    top5 = (c.topk(min(5, c.shape[-1]), dim=-1).indices == base_top[:, None]).any(-1)
    t = targets.to(b.device)[:, None]
    return {"kl": kl.cpu(), "agree": agree.cpu(), "top5": top5.cpu(),
            "nll_base": -b.gather(-1, t)[:, 0].cpu(), "nll_cell": -c.gather(-1, t)[:, 0].cpu(),
            "nonfinite": torch.tensor([int((~finite).sum())])}


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
    kl_mean: float | None  # None only when no position was finite (nonfinite == tokens scored)
    kl_p99: float | None
    kl_max: float | None
    top1: float | None  # fraction of positions where the argmaxes agree
    top1_lower: float | None  # its 95 % Wilson lower bound
    top5: float | None  # fraction where the base's argmax is in the cell's top-5 (None: the cell gave fewer than 5)
    ppl_base: float | None
    ppl_cell: float | None
    delta_ppl: float | None
    nonfinite: int = 0  # positions whose cell logits hold a NaN or an infinity (left out of every figure above)

    def to_dict(self) -> dict:
        return asdict(self)


def token_parity(chunks: list[dict]) -> TokenParity:
    """Return the TokenParity of position_stats chunks (one per sequence), in their order."""
    import numpy as np
    import torch

    if not chunks:
        raise ValueError("no positions were scored")
    nonfinite = sum(int(c["nonfinite"].sum()) for c in chunks if "nonfinite" in c)
    cat = {k: torch.cat([c[k] for c in chunks]).double().numpy() for k in chunks[0] if k != "nonfinite"}
    n = int(cat["kl"].size)
    if n == 0:  # every position non-finite: nothing else can be said
        return TokenParity(tokens=0, kl_mean=None, kl_p99=None, kl_max=None, top1=None, top1_lower=None, top5=None,
                           ppl_base=None, ppl_cell=None, delta_ppl=None, nonfinite=nonfinite)
    agree = int(cat["agree"].sum())
    ppl_b, ppl_c = _ppl(cat["nll_base"]), _ppl(cat["nll_cell"])
    return TokenParity(
        tokens=n, kl_mean=float(cat["kl"].mean()), kl_p99=float(np.percentile(cat["kl"], 99)),
        kl_max=float(cat["kl"].max()), top1=agree / n, top1_lower=wilson_lower(agree, n),
        top5=float(cat["top5"].mean()) if "top5" in cat else None, ppl_base=ppl_b, ppl_cell=ppl_c,
        delta_ppl=ppl_c - ppl_b if ppl_b is not None and ppl_c is not None else None, nonfinite=nonfinite,
    )


def _ppl(nll) -> float | None:
    """Return exp(mean NLL), None past float range (a cell so wrong its perplexity overflows is judged by its KL)."""
    try:
        return float(math.exp(nll.mean()))
    except OverflowError:
        return None


class _IdTokens:
    """rouge-score tokenizer for token ids written as space-separated words (no lowercasing or stemming)."""

    @staticmethod
    def tokenize(text: str) -> list[str]:
        return text.split()


class TextTokens:
    """rouge-score's default tokenization (as Hugging Face evaluate runs it: no stemmer), with CJK characters kept.

    The default lowercases and splits at anything but [a-z0-9], which deletes every Chinese
    character: Chinese answers would all score 0. Here each CJK ideograph, kana or hangul syllable is a
    word of its own (character-level ROUGE, the usual choice for Chinese), and ASCII text tokenizes
    exactly as the default does.
    """

    PATTERN = None

    @classmethod
    def tokenize(cls, text: str) -> list[str]:
        import re

        if cls.PATTERN is None:
            cls.PATTERN = re.compile(r"[a-z0-9]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
        return cls.PATTERN.findall(text.lower())


ROUGE_KINDS = ("rouge1", "rouge2", "rougeL")


def _scorer(text: bool):
    try:
        from rouge_score import rouge_scorer
    except ModuleNotFoundError as exc:  # a declared dependency; a broken install says what to do
        raise RuntimeError("generation parity needs Google's rouge-score: `pip install rouge-score`") from exc
    kinds = [*ROUGE_KINDS, "rougeLsum"] if text else list(ROUGE_KINDS)
    return rouge_scorer.RougeScorer(kinds, tokenizer=TextTokens() if text else _IdTokens()), kinds


def rouge_per_prompt(candidates: list, references: list, text: bool = False) -> dict[str, list[float]]:
    """Return each prompt's ROUGE F-measures in points: {kind: [per prompt]}; candidates and references are
    token-id lists (each id a word) or, with text=True, decoded strings (summarize.py's way, ROUGE-Lsum too)."""
    if len(candidates) != len(references) or not candidates:
        raise ValueError("rouge needs one reference per candidate, and at least one")
    scorer, kinds = _scorer(text)
    out: dict[str, list[float]] = {k: [] for k in kinds}
    for cand, ref in zip(candidates, references, strict=True):
        target, prediction = (ref, cand) if text else (" ".join(map(str, ref)), " ".join(map(str, cand)))
        scores = scorer.score(target, prediction)  # score(target, prediction)
        for k in kinds:
            out[k].append(100.0 * scores[k].fmeasure)
    return out


def rouge(candidates: list, references: list, text: bool = False) -> dict:
    """Return mean ROUGE F-measures in points (x100) of candidates against references (see rouge_per_prompt)."""
    return {k: sum(v) / len(v) for k, v in rouge_per_prompt(candidates, references, text).items()}


BOOTSTRAP_RESAMPLES = 2000


def paired_bootstrap(cell: list[float], base: list[float], window: tuple[float, float], seed: int = 0) -> dict:
    """Return the mean per-prompt difference cell - base, its 95 % paired-bootstrap interval, and the window's verdict.

    decided: "inside" (the whole interval within the window), "outside" (the whole interval beyond
    one edge), or None (the interval straddles an edge: these prompts cannot decide). prompts_needed:
    how many prompts would shrink the interval (width ~ 1/sqrt(n)) to fit between the observed mean
    and the nearer edge, the figure to raise [accuracy] prompts to.
    """
    import numpy as np

    d = np.asarray(cell, dtype=float) - np.asarray(base, dtype=float)
    n = len(d)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))].mean(axis=1)
    lo, hi = (float(x) for x in np.percentile(means, [2.5, 97.5]))
    mean = float(d.mean())
    low, high = window
    decided = "inside" if low <= lo and hi <= high else "outside" if hi < low or lo > high else None
    half = max((hi - lo) / 2, 1e-12)
    room = min(abs(mean - low), abs(high - mean))  # how far the observed mean sits from the nearer edge
    needed = n if decided else (math.ceil(n * (half / room) ** 2) if room > 0 else None)
    return {"mean": mean, "low": lo, "high": hi, "prompts": n, "decided": decided, "prompts_needed": needed,
            "resamples": BOOTSTRAP_RESAMPLES}


def prefix_parity(cell: list[list[int]], base: list[list[int]], k: int) -> dict:
    """Return how alike two sets of greedy outputs start: identical-first-k rate (with the count it is a rate
    of) and the mean first-divergence position (the common prefix, capped at the shorter output)."""
    if len(cell) != len(base):
        raise ValueError("generation parity needs the same prompts on both sides")
    if not cell:
        raise ValueError("generation parity needs at least one prompt")
    same_k = sum(1 for a, b in zip(cell, base, strict=True) if len(a) >= k and len(b) >= k and a[:k] == b[:k])
    return {"prompts": len(cell), "prefix_k": k, "identical_prefix": same_k, "identical_prefix_rate": same_k / len(cell),
            "mean_common_prefix": sum(common_prefix(a, b) for a, b in zip(cell, base, strict=True)) / len(cell)}


def generation_parity(cell: list[list[int]], base: list[list[int]], references: list[list[int]], k: int,
                      decode=None, window: tuple[float, float] | None = None) -> dict:
    """Return prefix parity, ROUGE of cell vs base and of both vs the references (token ids), and, with `decode`
    (token ids -> text, the workload's tokenizer), the text ROUGE summarize.py computes and its paired window test."""
    out = prefix_parity(cell, base, k)
    refs = [r[: len(c)] for r, c in zip(references, cell, strict=True)]  # the answer's first tokens, as many as generated
    base_refs = [r[: len(b)] for r, b in zip(references, base, strict=True)]
    try:
        vs_ref, base_ref = rouge(cell, refs), rouge(base, base_refs)
        out.update(rouge_vs_base=rouge(cell, base), rouge_vs_reference=vs_ref, base_rouge_vs_reference=base_ref,
                   rouge1_delta_points=vs_ref["rouge1"] - base_ref["rouge1"])
        if decode is not None:
            texts = ([decode(c) for c in cell], [decode(b) for b in base], [decode(r) for r in refs],
                     [decode(r) for r in base_refs])
            cell_text, base_text = rouge_per_prompt(texts[0], texts[2], text=True), rouge_per_prompt(texts[1], texts[3], text=True)
            mean = {k: sum(v) / len(v) for k, v in cell_text.items()}
            base_mean = {k: sum(v) / len(v) for k, v in base_text.items()}
            out.update(text_rouge_vs_reference=mean, text_base_rouge_vs_reference=base_mean,
                       text_rouge_vs_base=rouge(texts[0], texts[1], text=True),
                       text_rouge1_delta_points=mean["rouge1"] - base_mean["rouge1"],
                       text_tokenizer="rouge-score's default (no stemmer), CJK characters as words")
            if window is not None:
                out["rouge1_window_test"] = paired_bootstrap(cell_text["rouge1"], base_text["rouge1"], window)
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
