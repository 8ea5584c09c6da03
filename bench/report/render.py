"""Speedup and history tables as text: their rows as strings, Markdown, HTML (every text escaped) and CSV,
and the environment note printed under them.

Takes bench.report.tables.SpeedupTable (and the history frames of bench.report.tables.history_table);
OOM and failures are spelled out, a speedup of a cell judged broken or degraded is never shown plain.
Pure functions: the report builder (bench.report.build) writes what they return.
"""

from __future__ import annotations

import html

import pandas as pd

from bench.report.bounds import sol_text
from bench.report.tables import (
    ACCURACY_COLUMNS,
    OPTIONAL,
    VERDICT_FLAGS,
    SpeedupTable,
    options_text,
)


def _num(value, std=None, fmt="{:.2f}") -> str:
    if value is None or pd.isna(value):
        return ""
    text = fmt.format(value)
    if std is not None and not pd.isna(std):
        text += " ± " + fmt.format(std)
    return text


def render_rows(speedups: SpeedupTable) -> tuple[list[str], list[list[str]]]:
    """Return (headers, rows of strings) of a speedup table; OOM and failures spelled out."""
    table = speedups.frame
    show_options = "options_varying" in table and bool(speedups.varying_options)
    show_model = "model" in table
    show_cap = "gpu_memory_gb" in table
    show_env = "environment" in table
    show_run = speedups.show_run and "run" in table
    show_lengths = any(c in table and pd.to_numeric(table[c], errors="coerce").notna().any()
                       for c in ("input_len_limit", "output_len_limit", "mean_input_len", "mean_output_len"))
    show_decode = "decode_throughput" in table and pd.to_numeric(table.decode_throughput, errors="coerce").notna().any()
    numbers = ["req/s", "output tok/s"] + (["generation tok/s"] if show_decode else []) + [
        "throughput speedup", "generation speedup"]
    headers = ["backend"] + (["model"] if show_model else []) + ["precision"] + (["options"] if show_options else []) + [
        "max_batch_size"] + (["GPU mem cap (GB)"] if show_cap else []) + (
        ["tokens in / out: mean (limit)"] if show_lengths else []) + numbers + [
        "runs × trials", "tok/s spread: runs / trials"]
    show_tuning = "tuning_builds" in table
    headers += ["tuning spread: builds (digests)"] if show_tuning else []
    extra = [(m, h, f) for m, h, f in OPTIONAL if m in table]
    show_acc = speedups.accuracy
    acc_headers = [h for _, h, _ in ACCURACY_COLUMNS] + ["accuracy"] if show_acc else []
    show_outputs = speedups.outputs
    if show_outputs:  # every row's timed outputs against the baseline's: free, beside the verdict
        acc_headers.append("timed outputs vs baseline")
    headers += acc_headers + [h for _, h, _ in extra] + (["environment"] if show_env else []) + (
        ["run"] if show_run else [])
    rows = []
    for r in table.to_dict("records"):
        head = [str(r["backend"])] + ([str(r["model"])] if show_model else []) + [str(r["precision"])]
        head += [str(r["options_varying"])] if show_options else []
        head.append(str(int(r["max_batch_size"])))
        if show_cap:
            head.append(_num(r["gpu_memory_gb"], None, "{:g}"))
        if show_lengths:
            head.append(lengths_text(r))
        tail = ([str(r["environment"] or "")] if show_env else []) + ([str(r.get("run") or "")] if show_run else [])
        acc = []
        if show_acc:
            acc = [_num(r.get(m), None, f) if m != "accuracy_top1" else _pct(r.get(m)) for m, _, f in ACCURACY_COLUMNS]
            acc.append(_verdict(r) or "not measured")
        if show_outputs:
            v = r.get("outputs_vs_baseline")
            acc.append(v if isinstance(v, str) else "")
        flag = VERDICT_FLAGS.get(_verdict(r) or "")
        if r["status"] != "ok":
            label = str(r["status"]).upper()
            rows.append(head + [label] * len(numbers) + ["", ""] + [""] * show_tuning + acc + [""] * len(extra) + tail)
            continue
        figures = [_num(r["request_throughput"], r["request_throughput__std"], "{:.3f}"),
                   _num(r["output_throughput"], r["output_throughput__std"], "{:.1f}")]
        if show_decode:
            figures.append(_num(r.get("decode_throughput"), r.get("decode_throughput__std"), "{:.1f}"))
        speedups = [speedup_text(r, "throughput_speedup"), speedup_text(r, "generation_speedup")]
        if flag:  # a speedup of a wrong (or degraded) cell is never shown plain
            speedups = [f"{x} {flag}" if x else x for x in speedups]
        rows.append(head + figures + speedups + [
            runs_text(r),
            spread_text(r.get("output_throughput__run_cv"), r.get("output_throughput__trial_cv"), r.get("runs"),
                        (bool(r.get("stability")) and not (r.get("tuning_builds") or 0) >= 2) or bool(r.get("busy"))),
        ] + ([tuning_text(r)] if show_tuning else []) + acc
            + [sol_text(r[m], f) if m == "sol_pct" else _num(r[m], None, f) for m, _, f in extra] + tail)
    return headers, rows


# What a speedup cell's marks mean, said under every table that has one.
UNSTABLE_MARK = "*"
ONE_RUN_TEXT = "(1 run)"


def speedup_text(r: dict, name: str) -> str:
    """Return a row's speedup as a table shows it: '7.39x [6.20-8.81]' (the interval of
    bench.results.stats.ratio_interval), '2.14x* (1 run)' where a side ran in one process (no interval),
    a * where the row's or the baseline's figures are unstable or were measured on a busy machine."""
    value = r.get(name)
    if value is None or pd.isna(value):
        return ""
    text = f"{value:.2f}x" + (UNSTABLE_MARK if r.get("speedup_unstable") is True else "")
    if r.get("is_baseline") is True:
        return text
    low, high = r.get(f"{name}_low"), r.get(f"{name}_high")
    if low is not None and high is not None and not pd.isna(low) and not pd.isna(high):
        return text + f" [{_bound(low)}-{_bound(high)}]"
    runs = r.get("speedup_runs")
    if runs is not None and not pd.isna(runs) and runs < 2:
        return text + " " + ONE_RUN_TEXT
    return text


def _bound(x: float) -> str:
    """Return an interval bound as the ratio is written (two decimals), whole above 100 (two runs give wide ones)."""
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def speedup_notes(table: SpeedupTable) -> list[str]:
    """Return the lines under a table that say what its speedups' marks mean (empty when no speedup has one); each
    mark in backticks, so Markdown shows it as written (a leading '* ' is a list item, '[x]: ' a link definition)."""
    from bench.results.stats import MAX_CV, MAX_RUN_CV, SPEEDUP_CONFIDENCE

    f = table.frame
    ok = f[f.status == "ok"] if "status" in f else f
    out = []
    if "speedup_unstable" in ok and ok.speedup_unstable.eq(True).any():
        who = (f"the baseline {table.baseline} is, so every speedup here is marked" if
               bool(ok.get("baseline_unstable", pd.Series(dtype=bool)).eq(True).any()) else "the ⚠ lines name which")
        out.append(f"`{UNSTABLE_MARK}`: a speedup whose row or baseline is unstable (runs differ by more than "
                   f"{MAX_RUN_CV:.0%}, or trials inside a run by more than {MAX_CV:.0%}) or was measured on a busy "
                   f"machine ({who}): not a result; measure it again on an idle machine")
    has_interval = any(f"{n}_low" in ok and ok[f"{n}_low"].notna().any() for n in ("throughput_speedup", "generation_speedup"))
    if has_interval:
        out.append(f"`[low-high]`: the {SPEEDUP_CONFIDENCE:.0%} interval of a speedup from both rows' spreads between "
                   "processes (delta method on the ratio of the run means: docs/guide/reports.md)")
    one_run = pd.to_numeric(ok.get("speedup_runs", pd.Series(dtype=float)), errors="coerce") < 2
    if (one_run & ~ok.get("is_baseline", pd.Series(False, index=ok.index)).eq(True)).any():
        out.append(f"`{ONE_RUN_TEXT}`: the row or the baseline ran in one process, so the spread between processes, "
                   "and a speedup's interval, are not measured (`--runs 2` or more gives them)")
    return out


def _accuracy_notes(table: SpeedupTable) -> list[str]:
    """Return the lines under a table with accuracy columns: what they are, and what random weights mean."""
    if not table.accuracy:
        return []
    from bench.accuracy.verdict import RANDOM_WEIGHTS_NOTE

    lines = ["Accuracy (`bench accuracy`, docs/guide/accuracy.md): KL(baseline || cell) per answer token, top-1 agreement and "
             "delta-perplexity against the baseline cell on the same prompts; a speedup marked ✗ or ! belongs to a cell "
             "judged broken or degraded.\n"]
    if table.random_weights:
        lines.append(f"Accuracy verdicts here are {RANDOM_WEIGHTS_NOTE}.\n")
    return lines


def _verdict(r: dict) -> str | None:
    """Return a row's accuracy verdict (None for a cell without an accuracy record: pandas holds NaN there)."""
    v = r.get("accuracy_verdict")
    return v if isinstance(v, str) else None


def _pct(value) -> str:
    return "" if value is None or pd.isna(value) else f"{100 * value:.1f}"


def lengths_text(r: dict) -> str:
    """Return a row's '412 (≤1024) / 31 (≤32)': mean input / output tokens and the workload's limits (exact lengths alone)."""
    def side(mean, limit) -> str:
        known = limit is not None and not pd.isna(limit)
        if r.get("lengths_exact") is True and known:
            return str(int(limit))
        text = "–" if mean is None or pd.isna(mean) else f"{mean:.0f}"
        return f"{text} (≤{int(limit)})" if known else text

    return f"{side(r.get('mean_input_len'), r.get('input_len_limit'))} / {side(r.get('mean_output_len'), r.get('output_len_limit'))}"


def runs_text(r: dict) -> str:
    """Return a row's runs × trials: '2 × 3'; '1 × 1 of 2 × 3, partial' when fewer complete runs than asked for;
    '(+1 partial run left out)' when partial runs beside complete ones are not in the figures."""
    runs, trials = int(r.get("runs") or 0), int(r.get("trials") or 0)
    text = f"{runs} × {_per_run(r)}"
    planned_runs, planned_trials = _int_or_none(r.get("planned_runs")), _int_or_none(r.get("planned_trials"))
    if planned_runs and planned_trials and (runs < planned_runs or trials < planned_runs * planned_trials):
        text += f" of {planned_runs} × {planned_trials}, partial"
    left = _int_or_none(r.get("left_out_runs"))
    if left:
        text += f" (+{left} partial run{'s' if left > 1 else ''} left out)"
    return text


def _int_or_none(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _per_run(r: dict) -> str:
    runs, trials = int(r.get("runs") or 0), int(r.get("trials") or 0)
    return str(trials // runs) if runs and trials % runs == 0 else f"{trials / runs:.1f}" if runs else "0"


def spread_text(run_cv, trial_cv, runs, unstable: bool = False) -> str:
    """Return '0.3% / 0.1%' (runs / trials), '— / 0.1%' with one run, a ⚠ when the figure is unstable (see the warnings)."""
    def pct(x):
        return "—" if x is None or pd.isna(x) else f"{100 * x:.1f}%"

    text = f"{pct(run_cv if runs and runs > 1 else None)} / {pct(trial_cv)}"
    return text + (" ⚠" if unstable else "")


def tuning_text(r: dict) -> str:
    """Return a row's '8.2% (3 builds, 3 digests) ⚠': the spread between its cold builds, '—' without several."""
    builds = r.get("tuning_builds")
    if builds is None or pd.isna(builds) or builds < 2:
        return "—"
    cv, digests = r.get("output_throughput__tuning_cv"), r.get("tuned_digests")
    text = f"{100 * cv:.1f}%" if cv is not None and not pd.isna(cv) else "—"
    text += f" ({int(builds)} builds" + (f", {int(digests)} digests)" if digests and not pd.isna(digests) else ")")
    return text + (" ⚠" if r.get("stability") else "")


def _title(workload: str, table: SpeedupTable) -> str:
    length = table.length
    shown = f" — {length}" if length and length not in workload else ""
    return f"{workload}{shown} (baseline: {table.baseline})"


def _markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
    return out


def to_markdown(tables: dict[str, SpeedupTable], environment: str = "",
                history: dict[str, pd.DataFrame] | None = None) -> str:
    """Return all speedup tables as Markdown, one section per workload, history and environment below."""
    parts = []
    for workload, table in tables.items():
        headers, rows = render_rows(table)
        parts.append(f"### {_title(workload, table)}\n")
        parts.extend(_markdown_table(headers, rows))
        parts.append("")
        for n in speedup_notes(table):
            parts.append(f"{n}\n")
        for w in table.warnings:
            parts.append(f"⚠ {w}\n")
        for n in table.notes:
            parts.append(f"Note: {n}\n")
        parts.extend(_accuracy_notes(table))
        h = (history or {}).get(workload)
        if h is not None and len(h):
            parts.append("Earlier runs of these cells (history: not in the figures above; `--pool` pools them):\n")
            parts.extend(_markdown_table(*history_rows(h)))
            parts.append("")
    if environment:
        parts.append(environment)
    return "\n".join(parts) + "\n"


def _html_table(headers: list[str], rows: list[list[str]], css: str) -> list[str]:
    e = html.escape
    # A wide table scrolls inside its own box, not the page.
    out = [f"<div class='scroll'><table class='{css}'><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers)
           + "</tr></thead><tbody>"]
    for row in rows:
        cls = " class='failed'" if any(c in ("OOM", "ERROR", "TIMEOUT", "UNSUPPORTED") for c in row) else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def to_html(tables: dict[str, SpeedupTable], environment: str = "",
            history: dict[str, pd.DataFrame] | None = None) -> str:
    """Return all speedup tables as an HTML fragment (every text escaped), history and environment below."""
    e = html.escape
    parts = []
    for workload, table in tables.items():
        headers, rows = render_rows(table)
        parts.append(f"<h3>{e(_title(workload, table))}</h3>")
        parts.extend(_html_table(headers, rows, "speedup"))
        for n in speedup_notes(table):
            parts.append(f"<p class='note'>{e(n)}</p>")
        if table.warnings:  # one box of this table's warnings, a line each
            parts.append("<ul class='warn'>" + "".join(f"<li>⚠ {e(w)}</li>" for w in table.warnings) + "</ul>")
        for n in table.notes:
            parts.append(f"<p class='note'>Note: {e(n)}</p>")
        h = (history or {}).get(workload)
        if h is not None and len(h):
            parts.append("<p class='note'>Earlier runs of these cells (history: not in the figures above; "
                         "<code>--pool</code> pools them):</p>")
            parts.extend(_html_table(*history_rows(h), "history"))
    if environment:
        lines = environment.splitlines()
        parts.append("<div class='env'><b>" + e(lines[0]) + "</b><ul>"
                     + "".join(f"<li>{e(x.lstrip('- '))}</li>" for x in lines[1:]) + "</ul></div>")
    return "\n".join(parts) + "\n"


# The columns history_rows reads (runs_text's included): only these become row dicts (a year of nights is
# many rows of a hundred columns).
HISTORY_ROW_COLUMNS = ("backend", "precision", "options", "max_batch_size", "run_label", "status", "runs", "trials",
                       "planned_runs", "planned_trials", "left_out_runs", "request_throughput", "request_throughput__std",
                       "output_throughput", "output_throughput__std")


def history_rows(h: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Return (headers, rows) of a history table: one row per earlier run of a cell."""
    show_options = h.options.nunique() > 1
    headers = ["backend", "precision"] + (["options"] if show_options else []) + [
        "max_batch_size", "run", "runs × trials", "req/s", "output tok/s", "status"]
    rows = []
    for r in h[[c for c in HISTORY_ROW_COLUMNS if c in h]].to_dict("records"):
        opts = [options_text(r["options"])] if show_options else []
        ok = r["status"] == "ok"
        rows.append([str(r["backend"]), str(r["precision"]), *opts, str(int(r["max_batch_size"])), str(r["run_label"]),
                     runs_text(r) if ok else f"{int(r['runs'] or 0)} × {_per_run(r)}",
                     _num(r.get("request_throughput"), r.get("request_throughput__std"), "{:.3f}") if ok else "",
                     _num(r.get("output_throughput"), r.get("output_throughput__std"), "{:.1f}") if ok else "",
                     str(r["status"])])
    return headers, rows


def to_csv(tables: dict[str, SpeedupTable]) -> str:
    """Return all speedup tables as one CSV with a workload column and numeric values."""
    frames = [t.frame.assign(workload=w, length=t.length, baseline=t.baseline) for w, t in tables.items()]
    return pd.concat(frames, ignore_index=True).to_csv(index=False, float_format="%.6g", lineterminator="\n")


ENV_NOTE_KEYS = ("gpu_name", "gpu_count", "gpu_memory_bytes", "driver", "cuda", "cudnn", "torch", "transformers",
                 "tensorrt_llm", "torchao", "python", "cpu", "commit")


def environment_note(frame: pd.DataFrame, records_env: list[dict]) -> str:
    """Return the environment lines printed under a table; flags mixed environments."""
    from bench.machine.environment import COMPARABILITY_KEYS

    seen: dict[str, set] = {k: set() for k in ENV_NOTE_KEYS}
    for env in records_env:
        for k in seen:
            v = env.get(k)
            if k == "commit" and v:
                v = str(v)[:12] + (" (dirty: uncommitted changes)" if env.get("dirty") else "")
            elif k == "gpu_memory_bytes" and v:
                v = f"{v / 1e9:.0f} GB"
            seen[k].add(str(v))
    lines = ["Environment:"]
    for k, values in seen.items():
        values.discard("None")
        if values:
            flag = "  **MIXED: results are not directly comparable**" if len(values) > 1 and k in COMPARABILITY_KEYS else ""
            lines.append(f"- {k}: {', '.join(sorted(values))}{flag}")
    return "\n".join(lines)
