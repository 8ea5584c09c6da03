"""The verdict of one cell: aligned / degraded / broken, with the thresholds and the reasons that decided it.

Criteria (thresholds from the matrix's [accuracy] table, bench.spec.cells.AccuracySpec, where each
default names its anchor); the verdict is the worst one:

- broken: any position whose logits are not finite (NaN or an infinity: an fp16 overflow, a broken
  kernel): no figure computed around them can vouch for the cell;
- broken: mean KL above kl_broken AND above floor_ratio_broken x the noise floor's KL (both:
  a KL the numerics alone produce is not the cell's fault; a ratio over a tiny floor is not harm);
- degraded: mean KL above kl_aligned AND above floor_ratio_aligned x the floor;
- degraded: the top-1 agreement's 95 % Wilson lower bound below (1 - top1_rtol) x the floor's
  top-1 agreement (vLLM's rtol rule; 1.0 when there is no floor);
- generation parity against the baseline's own floor (the rate at which the baseline reproduces
  its own first prefix_k greedy tokens under numerics alone: computed in the other float dtype, in
  another process, a second time): the 95 % Wilson upper bound of the cell's identical-prefix rate
  below prefix_ratio_broken x that rate is broken, below (1 - top1_rtol) x it degraded. Teacher
  forcing cannot see a decode loop that emits the wrong token from the right logits; this rule can;
- degraded: with real reference answers, the cell's ROUGE-1 against them outside the baseline's +
  rouge_window points (the reference report's -1 / +2 rule), judged on decoded text with a paired
  bootstrap interval over prompts: the whole interval outside the window is degraded, the whole
  interval inside passes, an interval across an edge is "not decidable" (with the prompts it would
  need). Without text ROUGE, on token-id ROUGE from rouge_min_prompts prompts.

Where the figures cannot decide, the verdict says "not judged" and why, never "aligned" or
"degraded": a noise floor that is not finite or is itself above kl_aligned (the numerics alone move
the logits more than a cell may), or too few scored tokens for an identical cell to pass the top-1
rule (`min_tokens`; a finding of broken still stands). Without a floor the ratio conditions are left
out (stated). On random weights the verdict is about numerical fidelity only, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

VERDICTS = ("aligned", "degraded", "broken")
# What the figures could not decide (a served cell with generation parity only and no ROUGE rule to apply, a
# noise floor too large, too few tokens): the verdict then says so, never "aligned".
NOT_JUDGED = "not judged"
RANDOM_WEIGHTS_NOTE = "numerical fidelity only (random weights: KL and top-1 measure how closely the numerics agree, not task quality)"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reasons: list[str] = field(default_factory=list)
    thresholds: dict = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "reasons": list(self.reasons), "thresholds": dict(self.thresholds),
                "note": self.note}

    @property
    def judged(self) -> bool:
        return self.verdict in VERDICTS

    def text(self) -> str:
        """Return the verdict with its reasons and the thresholds it was judged by (one paragraph)."""
        t = self.thresholds
        lines = [f"verdict: {self.verdict}" + (f" ({'; '.join(self.reasons)})" if self.reasons else "")]
        lines.append(f"  thresholds: KL aligned <= {t['kl_aligned']:g} or <= {t['floor_ratio_aligned']:g}x floor; "
                     f"broken > {t['kl_broken']:g} and > {t['floor_ratio_broken']:g}x floor; top-1 lower bound >= "
                     f"(1 - {t['top1_rtol']:g}) x floor top-1; identical-prefix rate upper bound >= "
                     f"{t.get('prefix_ratio_broken', 0.5):g}x (broken) and (1 - {t['top1_rtol']:g})x (degraded) the floor's; "
                     f"ROUGE-1 delta within {t['rouge_window']} points")
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)


def wilson_upper(successes: int, n: int) -> float:
    """Return the 95 % Wilson score interval's upper end for successes out of n (1 for n = 0)."""
    from bench.accuracy.figures import wilson_lower

    return 1.0 - wilson_lower(n - successes, n) if n > 0 else 1.0


def min_tokens(floor_top1: float | None, top1_rtol: float) -> int:
    """Return the fewest scored tokens at which a cell identical to its baseline passes the top-1 rule.

    An identical cell agrees at every position: its Wilson lower bound is n / (n + z^2), which must
    reach (1 - top1_rtol) x the floor's top-1 (1.0 without a floor): n >= need z^2 / (1 - need).
    """
    from bench.accuracy.figures import Z95

    need = (1 - top1_rtol) * (floor_top1 if floor_top1 is not None else 1.0)
    return max(1, math.ceil(need * Z95 * Z95 / (1 - need) - 1e-9)) if need < 1 else 2**31


def floor_of(floor: dict | None) -> tuple[float | None, float | None]:
    """Return (KL, top-1) of a noise floor: the largest KL and smallest top-1 among its computations."""
    if not floor:
        return None, None
    parts = [v for v in floor.values() if isinstance(v, dict) and "kl_mean" in v]
    if not parts:
        return None, None
    kls = [p["kl_mean"] for p in parts]
    kl = math.nan if any(k is None or not math.isfinite(k) for k in kls) else max(kls)
    top1 = [p["top1"] for p in parts if p.get("top1") is not None]
    return kl, (min(top1) if top1 else None)


def floor_rate(generation_floor: dict | None) -> float | None:
    """Return the baseline's own identical-prefix rate under numerics alone: the lowest among its floor's parts."""
    rates = [v["identical_prefix_rate"] for v in (generation_floor or {}).values()
             if isinstance(v, dict) and v.get("identical_prefix_rate") is not None]
    return min(rates) if rates else None


def judge(parity: dict | None, floor: dict | None, thresholds: dict, generation: dict | None = None,
          real_reference: bool = True, random_weights: bool = False, generation_floor: dict | None = None) -> Verdict:
    """Return the Verdict of a cell's TokenParity dict (and generation parity) against the thresholds.

    parity None (generation parity only, a served cell): the generation and ROUGE rules alone can
    decide; when they cannot either, the verdict is NOT_JUDGED, never "aligned". generation_floor:
    {name: prefix parity dict} of the baseline against itself under numerics alone (floor_rate).
    """
    note = RANDOM_WEIGHTS_NOTE if random_weights else None
    floor_kl, floor_top1 = floor_of(floor)
    reasons: list[str] = []
    if parity is not None and parity.get("nonfinite"):
        reasons.append(f"{parity['nonfinite']} of {parity['nonfinite'] + (parity.get('tokens') or 0)} scored positions "
                       "have non-finite logits (NaN or inf)")
        return Verdict(VERDICTS[2], reasons, dict(thresholds), note)
    if floor_kl is not None and not (math.isfinite(floor_kl) and floor_kl <= thresholds["kl_aligned"]):
        reasons.append(f"noise floor too large: the baseline's own numerics move its logits by KL {floor_kl:.3g} "
                       f"(> kl_aligned {thresholds['kl_aligned']:g}), so no cell can be told apart from it")
        return Verdict(NOT_JUDGED, reasons, dict(thresholds), note)
    worst = 0
    generation_worst = _prefix_rule(generation, generation_floor, thresholds, reasons)
    if parity is None:
        reasons.append("no teacher-forced figures (generation parity only)")
        rouge = _rouge_rule(generation, thresholds, real_reference, reasons)
        judged = [x for x in (generation_worst, rouge) if x is not None]
        if not judged:
            return Verdict(NOT_JUDGED, reasons, dict(thresholds), note)
        return Verdict(VERDICTS[max(judged)], reasons, dict(thresholds), note)
    kl = parity["kl_mean"]
    ratio = kl / floor_kl if floor_kl else None
    ratio_text = f"{ratio:.1f}x floor {floor_kl:.3g}" if ratio is not None else "no floor"

    def over(limit_abs: float, limit_ratio: float) -> bool:
        return kl > limit_abs and (ratio is None or ratio > limit_ratio)

    if over(thresholds["kl_broken"], thresholds["floor_ratio_broken"]):
        worst = 2
        reasons.append(f"KL {kl:.3g} > {thresholds['kl_broken']:g} and {ratio_text}")
    elif over(thresholds["kl_aligned"], thresholds["floor_ratio_aligned"]):
        worst = max(worst, 1)
        reasons.append(f"KL {kl:.3g} > {thresholds['kl_aligned']:g} and {ratio_text}")
    need = (1 - thresholds["top1_rtol"]) * (floor_top1 if floor_top1 is not None else 1.0)
    if parity["top1_lower"] < need:
        worst = max(worst, 1)
        reasons.append(f"top-1 lower bound {100 * parity['top1_lower']:.1f} % < {100 * need:.1f} %")
    worst = max(worst, generation_worst or 0, _rouge_rule(generation, thresholds, real_reference, reasons) or 0)
    if floor_kl is None:
        reasons.append("no noise floor: KL judged by its absolute thresholds only")
    if parity.get("kl_method"):  # a served cell's KL from its top-k logprobs: it can only understate the KL
        reasons.append(f"KL is {parity['kl_method']}")
    tokens = parity.get("tokens")
    fewest = min_tokens(floor_top1, thresholds["top1_rtol"])
    if tokens is not None and tokens < fewest and worst < 2:
        reasons.insert(0, f"{tokens} tokens < {fewest}: too few scored tokens for a cell identical to its baseline to "
                          f"pass the top-1 rule (raise [accuracy] prompts or answer_tokens)")
        return Verdict(f"{NOT_JUDGED} (n tokens < {fewest})", reasons, dict(thresholds), note)
    return Verdict(VERDICTS[worst], reasons, dict(thresholds), note)


def _prefix_rule(generation: dict | None, generation_floor: dict | None, thresholds: dict, reasons: list[str]) -> int | None:
    """Return 2, 1 or 0 from the identical-prefix rule against the baseline's own floor rate, or None (reason appended)."""
    if not generation or generation.get("identical_prefix") is None:
        return None
    rate = floor_rate(generation_floor)
    if rate is None:
        reasons.append("generation parity not judged: no floor of the baseline's own identical-prefix rate")
        return None
    n, same = generation["prompts"], generation["identical_prefix"]
    upper = wilson_upper(same, n)
    text = (f"identical first {generation['prefix_k']} tokens in {same} of {n} prompts (upper bound "
            f"{100 * upper:.0f} %) vs the baseline's own {100 * rate:.0f} %")
    if upper < thresholds.get("prefix_ratio_broken", 0.5) * rate:
        reasons.append(text)
        return 2
    if upper < (1 - thresholds["top1_rtol"]) * rate:
        reasons.append(text)
        return 1
    return 0


def _rouge_rule(generation: dict | None, thresholds: dict, real_reference: bool, reasons: list[str]) -> int | None:
    """Return 1 (degraded) or 0 from the ROUGE window rule, or None when it does not apply (reason appended)."""
    if not generation:
        return None
    if not real_reference:
        reasons.append("ROUGE not judged: the reference is the baseline's own greedy output")
        return None
    low, high = thresholds["rouge_window"]
    test = generation.get("rouge1_window_test")
    if test is not None:
        interval = f"ROUGE-1 vs reference {test['mean']:+.2f} points [{test['low']:+.2f}, {test['high']:+.2f}] over {test['prompts']} prompts"
        if test["decided"] == "outside":
            reasons.append(f"{interval} outside [{low:g}, {high:+g}]")
            return 1
        if test["decided"] == "inside":
            return 0
        needed = f"; about {test['prompts_needed']} prompts would decide it" if test.get("prompts_needed") else ""
        reasons.append(f"ROUGE window not decidable: {interval} crosses an edge of [{low:g}, {high:+g}]{needed}")
        return None
    if generation.get("rouge1_delta_points") is None:
        if "rouge_vs_base" in generation or "rouge_error" in generation:
            reasons.append(f"ROUGE not judged: {generation.get('rouge_error', 'not computed')}")
        return None
    if generation.get("prompts", 0) < thresholds.get("rouge_min_prompts", 0):
        reasons.append(f"ROUGE not judged: {generation['prompts']} prompts < rouge_min_prompts "
                       f"{thresholds['rouge_min_prompts']}")
        return None
    delta = generation["rouge1_delta_points"]
    if not low <= delta <= high:
        reasons.append(f"ROUGE-1 vs reference {delta:+.2f} points outside [{low:g}, {high:+g}]")
        return 1
    return 0
