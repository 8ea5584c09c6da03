"""The printed text of `bench accuracy`'s records: one cell's figures against its baseline, and its verdict."""

from __future__ import annotations


def accuracy_text(cell, record) -> str:
    """Return the printed summary of one Accuracy record."""
    acc, m = record.accuracy, record.metrics or {}
    p = acc["parity"]
    ref = {"dataset": "the dataset's reference answers",
           "baseline-greedy": "the baseline's own greedy continuation (no reference answers in this workload)"}[acc["reference"]]
    base = acc.get("baseline")
    what = (f"{p['tokens']} teacher-forced tokens over {acc['sequences']} prompts" if p else
            f"{acc['prompts']} prompts, {acc.get('parity_reason')}")
    if p and acc.get("mode") == "logprobs-top-k":
        what += f" ({acc.get('parity_reason')})"
    if acc.get("logits_source"):
        what += f"; logits: {acc['logits_source']}"
    head = (f"## {cell.label}" + (f" vs baseline {_label(base)}" if base else " (baseline: noise floor)")
            + f"\n\n{what} ({acc.get('prompts_note')}); reference: {ref}"
            + (f"; measured through {acc['measured_through']}" if acc.get("measured_through") else ""))
    lines = [head]
    if base is None:
        lines.append(f"perplexity on the reference {_num(p['ppl_base'], '.3f')}")
        for f in (acc.get("floor") or {}).values():
            lines.append(f"noise floor, {f['what']}: KL mean {_num(f['kl_mean'])} (p99 {_num(f['kl_p99'])}), top-1 "
                         f"{_percent(f['top1'])} (lower {_percent(f['top1_lower'])}), top-5 {_percent(f['top5'])}")
        for f in (acc.get("generation_floor") or {}).values():
            lines.append(f"generation floor, {f['what']}: identical first {f['prefix_k']} tokens in {f['identical_prefix']} of "
                         f"{f['prompts']} prompts, mean first divergence at token {f['mean_common_prefix']:.1f}")
    else:
        if p:
            ratio = f"; {m['kl_floor_ratio']:.1f}x the floor" if m.get("kl_floor_ratio") is not None else "; no floor"
            top_ratio = f", {m['top1_floor_ratio']:.2f}x the floor's" if m.get("top1_floor_ratio") else ""
            lines.append(f"KL mean {_num(p['kl_mean'])} (p99 {_num(p['kl_p99'])}{ratio}) · top-1 {_percent(p['top1'])} "
                         f"(95 % lower bound {_percent(p['top1_lower'])}{top_ratio}) · base top-1 in cell top-5 "
                         f"{_percent(p['top5'])} · PPL {_num(p['ppl_base'], '.3f')} -> {_num(p['ppl_cell'], '.3f')} "
                         f"(delta {_num(p['delta_ppl'], '+.3f')})"
                         + (f" · {p['nonfinite']} positions with non-finite logits" if p.get("nonfinite") else ""))
        g = acc["generation"]
        rouge = ("ROUGE-1/2/L vs baseline " + "/".join(f"{g['rouge_vs_base'][k]:.1f}" for k in ("rouge1", "rouge2", "rougeL"))
                 + f" · ROUGE-1 vs reference {g['rouge_vs_reference']['rouge1']:.1f} (baseline "
                 f"{g['base_rouge_vs_reference']['rouge1']:.1f}, {g['rouge1_delta_points']:+.2f} points; token ids)"
                 if g.get("rouge_vs_base") else f"ROUGE not computed: {g.get('rouge_error')}")
        if g.get("text_rouge_vs_reference"):
            t = g.get("rouge1_window_test") or {}
            rouge += (f" · text ROUGE-1 vs reference {g['text_rouge_vs_reference']['rouge1']:.1f} (baseline "
                      f"{g['text_base_rouge_vs_reference']['rouge1']:.1f}, {g['text_rouge1_delta_points']:+.2f} points"
                      + (f", 95 % interval [{t['low']:+.2f}, {t['high']:+.2f}]" if t else "") + ")")
        lines.append(f"generation: identical first {g['prefix_k']} tokens {100 * g['identical_prefix_rate']:.0f} % of "
                     f"{g['prompts']} prompts, mean first divergence at token {g.get('mean_common_prefix', 0):.1f} · " + rouge)
    d = acc["determinism"]
    lines.append(f"determinism: {d['differing_tokens']} of {d['tokens']} greedy tokens differ between two passes in "
                 "one process" + (_across(acc["determinism_across_processes"]) if acc.get("determinism_across_processes") else ""))
    if acc.get("measure_s") is not None:
        from bench.execution.compile_counts import describe_compile

        load = sum((acc.get("load_s") or {}).values())
        if acc.get("capture", {}).get("made_by"):  # an early session of the accuracy step (bench.accuracy.early)
            lines.append(f"captured by an early session of its own, not waiting for its baseline's (model loaded in "
                         f"{load:.1f} s, measured in {acc['measure_s']:.1f} s), scored here against the baseline's "
                         f"Reference in {acc.get('score_s') or 0:.1f} s"
                         + describe_compile(acc.get("compile") or {}))
        elif acc.get("capture"):
            lines.append(f"captured in its timed process (run {acc['capture'].get('run_id', '?')}) in "
                         f"{acc['measure_s']:.1f} s after its trials, scored here in {acc.get('score_s') or 0:.1f} s"
                         + describe_compile(acc.get("compile") or {}))
        else:
            lines.append(f"session: model loaded in {load:.1f} s, this cell measured in {acc['measure_s']:.1f} s"
                         + describe_compile(acc.get("compile") or {}))
            phases = _phases(acc.get("phases_s"))
            if phases:
                lines.append(f"  time by phase: {phases}")
        if acc.get("capture_refused"):
            lines.append(f"its capture was not used ({acc['capture_refused']}): measured in the session")
        if acc.get("concurrent_sessions"):  # bench accuracy --parallel
            lines.append(f"{acc['concurrent_sessions']} other session(s) ran beside its session: these seconds are not "
                         "a solo time")
    if acc.get("rerun_alone"):
        lines.append(f"run again alone: {acc['rerun_alone'].get('reason')}")
    if acc.get("verdict"):
        from bench.accuracy.verdict import Verdict

        lines.append(Verdict(**acc["verdict"]).text())
    return "\n".join(lines) + "\n"


def session_ended(payload: tuple, base, session: dict, beside: int, again, since: float) -> str:
    """Return the console line of an accuracy session that ended, where sessions run side by side (`bench accuracy
    --parallel`): the verdicts print in plan order, this says what ran when (`since`: seconds since the step began),
    beside how many others, and what runs again alone (`again`: bench.accuracy.driver._again_alone's) or failed."""
    from bench.machine.failures import first_line

    mode, cells, _note = payload
    what = {"baseline": f"the baseline session of {base.label}",
            "capture": f"an early capture session ({len(cells)} cell(s) against {base.label})"}.get(
                mode, f"a session of {len(cells)} cell(s) against {base.label}")
    start, end = session.get("_started"), session.get("_ended")
    line = (f"accuracy +{since:.0f} s: {what} ended"
            + (f" after {end - start:.1f} s" if isinstance(start, float) and isinstance(end, float) else ""))
    if again is not None:
        return line + f"; {again[2]['reason']}"
    line += f", {beside} other session(s) beside it" if beside else ""
    if session.get("status", "ok") != "ok":
        line += f"; {session['status']}: {first_line(session.get('error'))}"
    return line


def _phases(phases) -> str:
    """Return a session's phases as text (bench.accuracy.runtime.Phases), longest first; '' where the record holds
    none, or no number (a record is untrusted input)."""
    from bench.checks import is_seconds

    if not isinstance(phases, dict):
        return ""
    good = [(str(k), float(v)) for k, v in phases.items() if is_seconds(v)]
    return ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in sorted(good, key=lambda kv: -kv[1]))


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "n/a" if x is None else format(x, fmt)


def _across(d: dict) -> str:
    return f"; {d['differing_tokens']} differ from the previous process's record ({d['previous_run_id']})"


def _label(cell: dict) -> str:
    from bench.spec.cells import cell_label

    return cell_label(cell["backend"], cell["precision"], cell["max_batch_size"])
