"""The accuracy section of a report: every cell's latest `bench accuracy` record as one Markdown table.

The speedup tables show four accuracy columns beside each speed figure (bench.report.tables);
this section holds the rest of each record: the baseline, the reference, the token count, the
floor ratio, top-5, ROUGE, determinism in and across processes, and the verdict's reasons. A served
cell's KL from its top-k logprobs (bench.accuracy.served) is a lower bound and is marked ">=".
"""

from __future__ import annotations


def accuracy_markdown(latest: dict) -> str:
    """Return the Markdown table of {cell_id: Accuracy record} (bench.results.query.latest_accuracy)."""
    from bench.accuracy.verdict import RANDOM_WEIGHTS_NOTE
    from bench.spec.cells import cell_label

    head = ["cell", "baseline", "reference", "tokens", "KL mean (p99)", "x floor", "top-1 % (95 % low)", "top-5 %",
            "PPL base -> cell", "same first k", "ROUGE-L vs base", "greedy tokens differing (in / across processes)",
            "verdict"]
    rows = []
    random = False
    for rec in sorted(latest.values(), key=lambda r: (r.accuracy.get("baseline") is not None, r.label)):
        a, m = rec.accuracy, rec.metrics or {}
        random |= bool(a.get("random_weights"))
        base = a.get("baseline")
        g = a.get("generation") or {}
        across = a.get("determinism_across_processes")
        verdict = a.get("verdict") or {}
        rows.append([
            rec.label + _options(rec.cell), "(itself: noise floor)" if base is None else
            cell_label(base["backend"], base["precision"], base["max_batch_size"]) + _options(base),
            str(a.get("reference")), str(m.get("tokens", "generation parity only")),
            (_kl(m, a.get("parity") or {}) if m.get("kl_mean") is not None else _nonfinite(m)) if base is not None
            else _floor(a.get("floor")),
            (f"KL {m['kl_floor_ratio']:.1f}x, top-1 {m['top1_floor_ratio']:.2f}x" if m.get("top1_floor_ratio")
             else f"KL {m['kl_floor_ratio']:.1f}x") if m.get("kl_floor_ratio") is not None else "",
            f"{100 * m['top1']:.1f} ({100 * m['top1_lower']:.1f})" if base is not None and m.get("top1") is not None else "",
            f"{100 * m['top5']:.1f}" if base is not None and m.get("top5") is not None else "",
            f"{m['ppl_base']:.3f} -> {m['ppl_cell']:.3f}" if m.get("ppl_cell") is not None and m.get("ppl_base") is not None else "",
            f"{100 * g['identical_prefix_rate']:.0f} % (k={g['prefix_k']})" if g else "",
            f"{g['rouge_vs_base']['rougeL']:.1f}" if g.get("rouge_vs_base") else "",
            f"{m.get('determinism_differing_tokens')} / " + (str(across["differing_tokens"]) if across else "-"),
            (verdict.get("verdict") or "baseline") + (f": {'; '.join(verdict['reasons'])}" if verdict.get("reasons") else ""),
        ])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    if random:
        lines += ["", f"Verdicts on random weights: {RANDOM_WEIGHTS_NOTE}."]
    thresholds = next((r.accuracy["verdict"]["thresholds"] for r in latest.values() if r.accuracy.get("verdict")), None)
    if thresholds:
        lines += ["", "Thresholds: " + ", ".join(f"{k} = {v}" for k, v in thresholds.items())
                  + " (bench.spec.cells.AccuracySpec; docs/guide/accuracy.md gives their anchors)."]
    return "\n".join(lines) + "\n"


def _kl(m: dict, parity: dict) -> str:
    """Return 'mean (p99)'; a served cell's top-k KL is a lower bound, and reads so ('>= 0.17 (0.5) top-20')."""
    text = f"{m['kl_mean']:.3g} ({m['kl_p99']:.3g})"
    method = parity.get("kl_method")
    return f">= {text} {method.split(' lumped')[0]}" if method else text


def _nonfinite(m: dict) -> str:
    return f"{int(m['nonfinite'])} positions non-finite" if m.get("nonfinite") else ""


def _floor(floor: dict | None) -> str:
    if not floor:
        return ""
    return "floor: " + ", ".join(f"{f['what']} {f['kl_mean']:.3g}" for f in floor.values() if f.get("kl_mean") is not None)


def _options(cell: dict) -> str:
    from bench.spec.cells import identity_options

    opts = identity_options(cell.get("backend"), cell.get("options") or {})
    shown = {k: v for k, v in opts.items() if k in ("corrupt_layer", "fault", "compile", "quant_kernels",
                                                    "attn_implementation", "cache", "decode_loop", "prefill_len")
             and v not in ("off", "sdpa", "dynamic", "generate", "torchao", "none", -1, 0)}
    return f" [{', '.join(f'{k}={v}' for k, v in shown.items())}]" if shown else ""
