"""The verdict of one cell: aligned / degraded / broken, with the thresholds and the reasons that decided it.

Criteria (thresholds from the matrix's [accuracy] table, bench.spec.cells.AccuracySpec, where each
default names its anchor); the verdict is the worst one:

- broken: mean KL above kl_broken AND above floor_ratio_broken x the noise floor's KL (both:
  a KL the numerics alone produce is not the cell's fault; a ratio over a tiny floor is not harm);
- degraded: mean KL above kl_aligned AND above floor_ratio_aligned x the floor;
- degraded: the top-1 agreement's 95 % Wilson lower bound below (1 - top1_rtol) x the floor's
  top-1 agreement (vLLM's rtol rule; 1.0 when there is no floor);
- degraded: with real reference answers and at least rouge_min_prompts prompts, the cell's
  ROUGE-1 against them outside the baseline's + rouge_window points (the reference report's
  -1 / +2 rule); with fewer prompts the figure is printed and the verdict says it was not judged.

Without a floor the ratio conditions are left out (stated). On random weights the verdict is
about numerical fidelity only, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERDICTS = ("aligned", "degraded", "broken")
# A cell with generation parity only (a served cell) and no ROUGE rule to apply: nothing decided it.
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

    def text(self) -> str:
        """Return the verdict with its reasons and the thresholds it was judged by (one paragraph)."""
        t = self.thresholds
        lines = [f"verdict: {self.verdict}" + (f" ({'; '.join(self.reasons)})" if self.reasons else "")]
        lines.append(f"  thresholds: KL aligned <= {t['kl_aligned']:g} or <= {t['floor_ratio_aligned']:g}x floor; "
                     f"broken > {t['kl_broken']:g} and > {t['floor_ratio_broken']:g}x floor; top-1 lower bound >= "
                     f"(1 - {t['top1_rtol']:g}) x floor top-1; ROUGE-1 delta within {t['rouge_window']} points "
                     f"(from {t.get('rouge_min_prompts', 0)} prompts)")
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)


def floor_of(floor: dict | None) -> tuple[float | None, float | None]:
    """Return (KL, top-1) of a noise floor: the largest KL and smallest top-1 among its computations."""
    if not floor:
        return None, None
    parts = [v for v in floor.values() if isinstance(v, dict) and "kl_mean" in v]
    if not parts:
        return None, None
    return max(p["kl_mean"] for p in parts), min(p["top1"] for p in parts)


def judge(parity: dict | None, floor: dict | None, thresholds: dict, generation: dict | None = None,
          real_reference: bool = True, random_weights: bool = False) -> Verdict:
    """Return the Verdict of a cell's TokenParity dict (and generation parity) against the thresholds.

    parity None (generation parity only, a served cell): the ROUGE rule alone can decide; when it
    cannot either, the verdict is NOT_JUDGED, never "aligned".
    """
    floor_kl, floor_top1 = floor_of(floor)
    reasons: list[str] = []
    worst = 0
    if parity is None:
        reasons.append("no teacher-forced figures (generation parity only)")
        judged = _rouge_rule(generation, thresholds, real_reference, reasons)
        if judged is None:
            return Verdict(NOT_JUDGED, reasons, dict(thresholds), RANDOM_WEIGHTS_NOTE if random_weights else None)
        return Verdict(VERDICTS[judged], reasons, dict(thresholds), RANDOM_WEIGHTS_NOTE if random_weights else None)
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
    worst = max(worst, _rouge_rule(generation, thresholds, real_reference, reasons) or 0)
    if floor_kl is None:
        reasons.append("no noise floor: KL judged by its absolute thresholds only")
    if parity.get("kl_method"):  # a served cell's KL from its top-k logprobs: it can only understate the KL
        reasons.append(f"KL is {parity['kl_method']}")
    return Verdict(VERDICTS[worst], reasons, dict(thresholds), RANDOM_WEIGHTS_NOTE if random_weights else None)


def _rouge_rule(generation: dict | None, thresholds: dict, real_reference: bool, reasons: list[str]) -> int | None:
    """Return 1 (degraded) or 0 from the ROUGE window rule, or None when it does not apply (reason appended)."""
    if not generation:
        return None
    if not real_reference:
        reasons.append("ROUGE not judged: the reference is the baseline's own greedy output")
        return None
    if generation.get("rouge1_delta_points") is None:
        reasons.append(f"ROUGE not judged: {generation.get('rouge_error', 'not computed')}")
        return None
    if generation.get("prompts", 0) < thresholds.get("rouge_min_prompts", 0):
        reasons.append(f"ROUGE not judged: {generation['prompts']} prompts < rouge_min_prompts "
                       f"{thresholds['rouge_min_prompts']}")
        return None
    low, high = thresholds["rouge_window"]
    delta = generation["rouge1_delta_points"]
    if not low <= delta <= high:
        reasons.append(f"ROUGE-1 vs reference {delta:+.2f} points outside [{low:g}, {high:+g}]")
        return 1
    return 0
