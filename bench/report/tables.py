"""Speedup tables in the reference report's format, from a results frame.

One row per cell (one run context: bench.results.query chose the records): backend, model,
precision, the options that vary inside the table, max_batch_size, the input/output lengths
(mean, and the workload's limit), req/s, output tok/s (end to end), generation tok/s (the
decode phase's rate, bench.metrics.decode_throughput), throughput speedup (req/s over
the baseline's) and generation speedup (generation tok/s over the baseline's); a cell that did
not fit shows OOM.
Figures are the mean of the runs' means (fresh worker processes, each the mean of its trials),
± the spread between runs, or between trials when the cell ran in one process; the
`runs × trials` and `spread` columns say which, and a row whose runs disagree is flagged.
Latency percentiles, peak memory, tokens per joule, % of speed-of-light and the GPU memory cap
appear as columns when any cell has them; an environment column appears when a table mixes
GPUs or library versions (between rows, or inside a row); a run column when its rows come from different runs. One table per
workload and length setting, each a SpeedupTable. Pure functions.

The cells come from bench.report.cells.aggregate; bench.report.render writes the tables as
Markdown, HTML and CSV; `history_table` sorts a cell's earlier runs under its table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from bench.errors import BenchInputError
from bench.report.bounds import impossible_warning
from bench.report.cells import aggregate
from bench.results.records import varying_keys
from bench.spec.cells import cell_label

DEFAULT_BASELINE = {"backend": "hf", "precision": "bf16", "max_batch_size": 1}
# Optional columns shown when any cell has them: (metric, header, format)
OPTIONAL = [
    ("ttft_median_ms", "TTFT p50 (ms)", "{:.1f}"),
    ("ttft_p99_ms", "TTFT p99 (ms)", "{:.1f}"),
    ("tpot_median_ms", "TPOT p50 (ms)", "{:.2f}"),
    ("tpot_p99_ms", "TPOT p99 (ms)", "{:.2f}"),
    ("e2el_p99_ms", "E2E p99 (ms)", "{:.0f}"),
    ("peak_memory_gb", "peak mem (GB)", "{:.2f}"),
    ("tokens_per_joule", "tok/J", "{:.2f}"),
    ("sol_pct", "% SOL", "{:.0f}"),
    # serving (openai backend): offered vs achieved load, failed requests, goodput under the SLO, ITL
    ("offered_request_rate", "offered req/s", "{:.2f}"),
    ("achieved_request_rate", "achieved req/s", "{:.2f}"),
    ("failed", "failed", "{:g}"),
    ("request_goodput", "goodput (req/s)", "{:.3f}"),
    ("itl_median_ms", "ITL p50 (ms)", "{:.2f}"),
    ("send_lag_p99_ms", "send lag p99 (ms)", "{:.1f}"),
    # interactivity vs throughput (bench.metrics.interactivity_metrics)
    ("output_throughput_per_user", "tok/s per user", "{:.1f}"),
    ("output_throughput_per_gpu", "tok/s per GPU", "{:.1f}"),
    ("gpu_busy_pct", "GPU busy %", "{:.0f}"),
]
# Shown only in tables with a serving row: every backend records them, offline ones always 0 / per step.
SERVING_ONLY = {"failed", "itl_median_ms"}
# Left out of tables whose rows all ran on the CPU.
PER_GPU = {"output_throughput_per_gpu"}


@dataclass(frozen=True)
class SpeedupTable:
    """One speedup table (a workload at one length setting): its rows and what is said about them.

    Made by `speedup_table`; what the renderers (Markdown, HTML, CSV), the figures and the report
    builder take.
    """

    frame: pd.DataFrame                    # one row per cell, as shown; numeric columns (None for OOM / failed cells)
    baseline: str                          # the baseline cell's label (hf/bf16/bs1), or why the table has none
    length: str = ""                       # the workload's length setting (part of the table's name when ambiguous)
    warnings: tuple[str, ...] = ()         # about its rows (no baseline, unstable runs, load, busy machine): shown below it
    notes: tuple[str, ...] = ()            # the cells' own notes, each line once
    varying_options: tuple[str, ...] = ()  # option keys whose value differs between rows: the options column shows them
    show_run: bool = False                 # rows come from different runs, or a row is pooled: the run column shows
    accuracy: bool = False                 # rows carry the accuracy columns (ACCURACY_COLUMNS, accuracy_verdict)
    random_weights: bool = False           # an accuracy record among them measured random weights
    outputs: bool = False                  # rows carry `outputs_vs_baseline`: their timed outputs against the baseline's


def _option_value(row, key: str):
    try:
        return json.loads(row.all_options).get(key, _ABSENT) if row.all_options else _ABSENT
    except (TypeError, ValueError):
        return _ABSENT


_ABSENT = object()


def _options_of(row) -> dict:
    """Return a report row's options with their defaults filled in (its all_options), {} when unreadable."""
    try:
        return json.loads(row["all_options"]) if row["all_options"] else {}
    except (TypeError, ValueError):
        return {}


def _baseline_row(cells: pd.DataFrame, baseline: dict):
    """Return the one ok row the baseline names, or None when the cells it names all failed (OOM, error:
    the table has no speedups); BenchInputError if it names no cell of the table, or several ok ones."""
    from bench.spec.baseline import ambiguous_baseline_message, matches_baseline

    fields = [c for c in cells.columns if c not in ("options", "all_options")]
    for k in baseline:
        if k not in fields and all(_option_value(r, k) is _ABSENT for r in cells.itertuples()):
            raise BenchInputError(f"baseline key {k!r} is neither a cell field (backend, precision, max_batch_size, "
                                  "model, device, gpu_memory_gb) nor an option of these cells")
    mask = pd.Series([matches_baseline({k: row[k] for k in fields if k in baseline}, _options_of(row), baseline)
                      for _, row in cells.iterrows()], index=cells.index)
    hits = cells[mask & (cells.status == "ok")]
    workload = cells.workload.iloc[0]
    if hits.empty and (mask.any() or not (cells.status == "ok").any()):
        return None  # the baseline (or every cell) failed: a table of statuses, without speedups
    if hits.empty:
        # Each cell once, as the --baseline that names it (with the options that vary between the cells).
        varying = varying_options(cells.all_options)
        existing = "\n  ".join(dict.fromkeys(
            f"--baseline backend={r.backend},precision={r.precision},max_batch_size={r.max_batch_size}"
            + "".join(f",{k}={opts[k]}" for k in varying if k in opts) + f"  ({r.status})"
            for r, opts in zip(cells.itertuples(), _parsed(cells.all_options), strict=True)
        ))
        want = ", ".join(f"{k}={v}" for k, v in baseline.items())
        raise BenchInputError(
            f"baseline cell ({want}) has no ok result in workload {workload!r}; choose one with "
            f"--baseline from the cells that exist:\n  {existing}"
        )
    if len(hits) > 1:
        options = [json.loads(o) if o else {} for o in hits.all_options]
        if hits.gpu_memory_gb.astype(str).nunique() > 1:
            for o, cap in zip(options, hits.gpu_memory_gb, strict=True):
                o["gpu_memory_gb"] = cap
        labels = [f"{cell_label(r.backend, r.precision, r.max_batch_size)} [{options_text(r.options)}]"
                  + ("" if r.gpu_memory_gb is None or pd.isna(r.gpu_memory_gb) else f" cap {r.gpu_memory_gb:g} GB")
                  for r in hits.itertuples()]
        raise BenchInputError(ambiguous_baseline_message(baseline, labels, workload, options))
    return hits.iloc[0]


def baseline_failed_text(cells: pd.DataFrame, baseline: dict) -> str:
    """Return why a table has no baseline: 'no cell ran ok' or 'baseline (k=v, ...) did not run ok (OOM)'."""
    if not (cells.status == "ok").any():
        statuses = ", ".join(f"{n} {s.upper()}" for s, n in cells.status.value_counts().items())
        return f"no cell ran ok ({statuses})"
    want = ", ".join(f"{k}={v}" for k, v in baseline.items())
    return f"baseline ({want}) did not run ok ({', '.join(sorted(set(cells.status) - {'ok'})).upper()})"


def options_text(options: str) -> str:
    try:
        return ", ".join(f"{k}={v}" for k, v in json.loads(options).items()) or "defaults"
    except (TypeError, ValueError):
        return str(options)


def _parsed(all_options) -> list[dict]:
    """Return each row's options dict from its all_options JSON ({} where absent or unreadable)."""
    out = []
    for o in all_options:
        try:
            out.append(json.loads(o) if o else {})
        except (TypeError, ValueError):
            out.append({})
    return out


def varying_options(all_options) -> list[str]:
    """Return the option keys whose value differs between rows (all_options: JSON of each row's options, defaults filled)."""
    return varying_keys(_parsed(dict.fromkeys(all_options)))  # each distinct JSON once: rows repeat a few option sets


def _options_shown(all_options, keys: list[str]) -> list[str]:
    """Return per row 'k=v, ...' of the given keys (the options that vary) that the row has."""
    return [", ".join(f"{k}={opts[k]}" for k in keys if k in opts) for opts in _parsed(all_options)]


def table_key(workload: str, length: str, ambiguous: bool) -> str:
    """Return a table's name: the workload, plus its length setting when the name alone is ambiguous."""
    return f"{workload} [{length}]" if ambiguous and length else str(workload)


def _numbers_as_numbers(column: pd.Series) -> pd.Series:
    """Sort key: the options column with its numbers zero-padded, so request_rate 2 sorts before 16 (others as they are)."""
    if column.name != "options":
        return column
    return column.astype(str).str.replace(r"\d+(?:\.\d+)?", lambda m: f"{float(m.group()):024.6f}", regex=True)


def speedup_table(frame: pd.DataFrame, baseline: dict | None = None, cells: pd.DataFrame | None = None,
                  accuracy: dict | None = None, outputs: dict | None = None) -> dict[str, SpeedupTable]:
    """Return {workload (and length setting): SpeedupTable} with numeric columns (None for OOM / failed cells).

    accuracy: {cell_id: its ok Accuracy records, latest first} (bench.results.query.accuracy_by_cell):
    when given, each row gains the accuracy columns (ACCURACY_COLUMNS) of the record that passes the
    checks pooling applies (`joined_accuracy`), and render_rows flags its speedups. outputs:
    {(cell_id, gpu_memory_gb): {run key: timed outputs}} (bench.results.outputs.run_outputs): each row
    gains `outputs_vs_baseline`, its timed outputs against the baseline row's.
    """
    baseline = baseline or DEFAULT_BASELINE
    cells = aggregate(frame) if cells is None else cells
    ambiguous = cells.groupby("workload").length.nunique()
    out = {}
    for (workload, length), group in cells.groupby(["workload", "length"], sort=False):
        base = _baseline_row(group, baseline)
        g = group.sort_values(["backend", "model", "precision", "options", "gpu_memory_gb", "max_batch_size"],
                              kind="stable", key=_numbers_as_numbers)
        varying = varying_options(g.all_options)
        table = pd.DataFrame({
            "backend": g.backend,
            "model": g.model,
            "precision": g.precision,
            "max_batch_size": g.max_batch_size,
            "options": g.options,
            "all_options": g.all_options,  # defaults filled in: what the figures' series labels compare
            "options_varying": _options_shown(g.all_options, varying),
            "status": g.status,
            "runs": g.runs,
            "trials": g.trials,
            "planned_runs": g.get("planned_runs"),
            "planned_trials": g.get("planned_trials"),
            "left_out_runs": g.get("left_out_runs"),
            "mean_input_len": g.get("mean_input_len"),
            "input_len_limit": g.input_len_limit,
            "mean_output_len": g.get("mean_output_len"),
            "output_len_limit": g.output_len_limit,
            "lengths_exact": g.lengths_exact,
            "request_throughput": g.request_throughput,
            "request_throughput__std": g.get("request_throughput__std"),
            "output_throughput": g.output_throughput,
            "output_throughput__std": g.get("output_throughput__std"),
            "decode_throughput": g.get("decode_throughput"),
            "decode_throughput__std": g.get("decode_throughput__std"),
        })
        table["throughput_speedup"] = g.request_throughput / base.request_throughput if base is not None else None
        table["output_speedup"] = (g.output_throughput / base.output_throughput  # end to end (the heatmap's fallback)
                                   if base is not None else None)
        # Generation speed is the decode phase's rate; records stored before it existed have none.
        base_decode = base.get("decode_throughput") if base is not None else None
        table["generation_speedup"] = (pd.to_numeric(table.decode_throughput, errors="coerce") / base_decode
                                       if base_decode is not None and not pd.isna(base_decode) else None)
        _add_intervals(table, g, base)
        table["output_throughput__run_cv"] = g.get("output_throughput__run_cv")
        table["output_throughput__trial_cv"] = g.get("output_throughput__trial_cv")
        if "tuning_builds" in g and g.tuning_builds.notna().any():
            table["output_throughput__tuning_cv"] = g.output_throughput__tuning_cv
            table["tuning_builds"] = g.tuning_builds
            table["tuned_digests"] = g.tuned_digests
        table["stability"] = g.get("stability")
        table["busy"] = g.get("busy")
        # A speedup is as trustworthy as the less stable of its two rows: its own and the baseline's.
        base_unstable = base is not None and unstable(base)
        flags = g[[c for c in ("status", "stability", "busy") if c in g]].to_dict("records")
        table["speedup_unstable"] = [base is not None and r["status"] == "ok" and (base_unstable or unstable(r))
                                     for r in flags]
        table["baseline_unstable"] = base_unstable
        # Which run each row is: shown when the rows come from different runs, or a row is pooled.
        table["run"] = [f"pooled from {int(n)} runs" if n and n > 1 else lbl
                        for n, lbl in zip(g.contexts, g.run_label, strict=True)]
        show_run = bool(g.run_id.nunique() > 1 or (g.contexts > 1).any())
        if g.gpu_memory_gb.notna().any():
            table.insert(3, "gpu_memory_gb", g.gpu_memory_gb)
        serving = bool((g.backend == "openai").any())
        # A CPU run has no GPU to divide by: its "per GPU" figure is its total again.
        cpu_only = bool((g.get("device", pd.Series("cuda", index=g.index)).astype(str) == "cpu").all())
        for metric, _, _ in OPTIONAL:
            if metric in g and g[metric].notna().any() and (serving or metric not in SERVING_ONLY) and not (
                    cpu_only and metric in PER_GPU):
                table[metric] = g[metric]
        # Rows that ran in different environments, or a row whose records span several (" + "): say which.
        if (g.environment != "").any() and (g.environment.nunique() > 1 or g.environment.str.contains(" + ", regex=False).any()):
            table["environment"] = g.environment
        base_label = (cell_label(base.backend, base.precision, base.max_batch_size) if base is not None
                      else baseline_failed_text(g, baseline))
        # Named as the row is: its varying options and its table (two bs1 rows of one table differ there).
        shown = dict(zip(g.index, _options_shown(g.all_options, varying), strict=True))
        warnings = ([] if base is not None else [
            f"{table_key(workload, length, ambiguous[workload] > 1)}: {baseline_failed_text(g, baseline)}, so the "
            "table has no speedups" + ("; choose an ok cell with --baseline for them" if (g.status == "ok").any() else "")
        ]) + [
            cell_label(r.backend, r.precision, r.max_batch_size) + (f" [{shown[r.Index]}]" if shown[r.Index] else "")
            + f" on {table_key(workload, length, ambiguous[workload] > 1)}: {r.stability}"
            for r in g.itertuples() if r.stability
        ] + [
            cell_label(r["backend"], r["precision"], r["max_batch_size"]) + (f" [{shown[i]}]" if shown[i] else "")
            + f" on {table_key(workload, length, ambiguous[workload] > 1)}: {w}"
            for i, r in g.iterrows() for w in load_warnings(r)
        ] + [
            cell_label(r.backend, r.precision, r.max_batch_size) + (f" [{shown[r.Index]}]" if shown[r.Index] else "")
            + f" on {table_key(workload, length, ambiguous[workload] > 1)}: {r.busy}"
            for r in g.itertuples() if isinstance(getattr(r, "busy", None), str) and r.busy
        ] + [
            cell_label(r.backend, r.precision, r.max_batch_size) + (f" [{shown[r.Index]}]" if shown[r.Index] else "")
            + f" on {table_key(workload, length, ambiguous[workload] > 1)}: {w}"
            for r in g.itertuples() if (w := impossible_warning(getattr(r, "sol_pct", None)))
        ]
        notes = dict.fromkeys(line for n in g.get("notes", pd.Series(dtype=object))
                              if isinstance(n, str) for line in n.splitlines())
        random_weights = False
        if accuracy:
            random_weights, joined_notes = _add_accuracy(table, g, frame, base, accuracy)
            notes.update(dict.fromkeys(joined_notes))
        if outputs:
            notes.update(dict.fromkeys(_add_outputs(table, g, base, outputs, accuracy or {})))
        out[table_key(workload, length, ambiguous[workload] > 1)] = SpeedupTable(
            table.reset_index(drop=True), base_label, length, tuple(warnings), tuple(notes), tuple(varying), show_run,
            accuracy=bool(accuracy), random_weights=random_weights,
            outputs=bool(outputs) and "outputs_vs_baseline" in table and table.outputs_vs_baseline.notna().any())
    return out


# The speedups a table shows, each with the metric whose run means give its interval.
SPEEDUP_METRICS = (("throughput_speedup", "request_throughput"), ("generation_speedup", "decode_throughput"))


def unstable(r) -> bool:
    """Return whether a row's figures are not a result: its runs or trials spread past the limits of
    bench.results.stats (its `stability` warning), or its passes ran on a busy machine (`busy`)."""
    return any(isinstance(r.get(k), str) and bool(r.get(k)) for k in ("stability", "busy"))


def _add_intervals(table: pd.DataFrame, g: pd.DataFrame, base) -> None:
    """Add `<speedup>_low` / `_high` (bench.results.stats.ratio_interval from both rows' run means) and
    `speedup_runs` (the fewer runs of a row and the baseline's: below 2 there is no interval) to a table."""
    from bench.results.stats import ratio_interval

    def num(row, key):
        v = row.get(key) if row is not None else None
        return None if v is None or pd.isna(v) else float(v)

    runs = [int(r) if r is not None and not pd.isna(r) else 0 for r in g.runs]
    base_runs = int(num(base, "runs") or 0)
    table["speedup_runs"] = [min(n, base_runs) if base is not None else None for n in runs]
    # The baseline's own row: a ratio of a row with itself has no interval to give.
    table["is_baseline"] = [base is not None and c == base.cell_id and str(m) == str(base.gpu_memory_gb)
                            for c, m in zip(g.cell_id, g.gpu_memory_gb, strict=True)]
    columns = ["status"] + [c for _, m in SPEEDUP_METRICS for c in (m, f"{m}__std") if c in g]
    rows = g[columns].to_dict("records")
    for speedup, metric in SPEEDUP_METRICS:
        lows, highs = [], []
        for n, r in zip(runs, rows, strict=True):
            found = None
            if base is not None and r["status"] == "ok" and num(r, metric) is not None and num(base, metric) is not None:
                found = ratio_interval(num(r, metric), num(r, f"{metric}__std"), n, num(base, metric),
                                       num(base, f"{metric}__std"), base_runs)
            lows.append(found[0] if found else None)
            highs.append(found[1] if found else None)
        table[f"{speedup}_low"] = pd.to_numeric(pd.Series(lows, index=table.index, dtype=object), errors="coerce")
        table[f"{speedup}_high"] = pd.to_numeric(pd.Series(highs, index=table.index, dtype=object), errors="coerce")


def load_warnings(r) -> list[str]:
    """Return what a row's passes say against their own figures: the client fell behind its schedule, the
    server was over-saturated (the rules and bounds: bench.metrics)."""
    from bench.machine.telemetry import HOST_BOUND_BUSY_PCT
    from bench.metrics import ACHIEVED_RATE_SHARE, LAG_P99_BOUND_MS, SATURATION_RISE

    def num(key):
        v = r.get(key)
        return None if v is None or pd.isna(v) else float(v)

    out = []
    if (num("client_behind") or 0) > 0:
        lag, offered, achieved = num("send_lag_p99_ms"), num("offered_request_rate"), num("achieved_request_rate")
        out.append(f"the load generator fell behind its schedule (send lag p99 {lag or 0:.1f} ms, bound "
                   f"{LAG_P99_BOUND_MS:g} ms; achieved {achieved or 0:.2f} of {offered or 0:.2f} req/s offered, bound "
                   f"{ACHIEVED_RATE_SHARE:.0%}): the client, not the server, may limit these figures")
    if (num("oversaturated") or 0) > 0:
        out.append(f"over-saturated: requests in flight ({num('in_flight_first') or 0:.1f} -> "
                   f"{num('in_flight_last') or 0:.1f}) and TTFT p50 ({num('ttft_first_ms') or 0:.0f} -> "
                   f"{num('ttft_last_ms') or 0:.0f} ms) both rose more than {SATURATION_RISE:g}x from the first to "
                   "the last third of the pass: the server did not keep up, its figures describe a growing queue")
    if (num("unwarmed_batches") or 0) > 0 and str(r.get("device")) != "cpu":
        out.append(f"warm-up left shapes out: {num('unwarmed_batches'):g} of the timed pass's batches (mean over its "
                   "runs) ran at a shape the warm-up had not run, so their first-time costs (kernel choice, cuDNN "
                   "attention's graph per new length, compilation) are in these figures: measure it with warmup >= 1")
    if num("gpu_busy_pct") is not None and num("gpu_busy_pct") < HOST_BOUND_BUSY_PCT:
        out.append(f"host-bound: the GPU was busy {num('gpu_busy_pct'):.0f} % of the measured window "
                   f"(< {HOST_BOUND_BUSY_PCT:g} %): the host (launches, Python, the client) limits it")
    return out


# The accuracy figures a speedup row shows (bench accuracy's metrics, bench/accuracy/figures.py defines them).
ACCURACY_COLUMNS = [("accuracy_kl_mean", "KL mean", "{:.3g}"), ("accuracy_top1", "top-1 %", None),
                    ("accuracy_delta_ppl", "ΔPPL", "{:+.3g}")]
# How a speedup of a cell judged other than aligned is written: never plain.
VERDICT_FLAGS = {"broken": "✗ broken", "degraded": "! degraded"}


def joined_accuracy(records: list, context: dict, base_cell_id: str | None):
    """Return (the Accuracy record a speed row shows, or None; why none was joined, or None).

    records: the cell's ok Accuracy records, latest first; context: the row's run context (commit,
    dirty, env_digest). A record joins only under the checks pooling applies: the same commit
    (and dirty flag), the same environment digest, and measured against this table's baseline
    cell (the baseline's own record: against nothing). cell_id alone is not enough: a verdict of
    other code, another machine or another baseline does not certify this row's figures.
    """
    why = None
    for r in records:
        c = r.context
        base = r.accuracy.get("baseline_cell_id") if r.accuracy.get("baseline") is not None else None
        if (c.commit or None) != (context.get("commit") or None) or bool(c.dirty) != bool(context.get("dirty")):
            why = why or f"its accuracy was measured at commit {(c.commit or '?')[:7]}{'+dirty' if c.dirty else ''}"
        elif c.env_digest and context.get("env_digest") and c.env_digest != context["env_digest"]:
            why = why or "its accuracy was measured in another environment"
        elif base is not None and base != base_cell_id:
            why = why or "its accuracy was measured against another baseline"
        else:
            return r, None
    return None, why


def _add_accuracy(table: pd.DataFrame, g: pd.DataFrame, frame: pd.DataFrame, base, accuracy: dict) -> tuple[bool, list[str]]:
    """Add the accuracy columns (and the verdict) of each row, from the record `joined_accuracy` picks; return whether
    any of those records measured random weights, and a note for each row whose records did not join."""
    contexts = {}
    if frame is not None and len(frame) and "run_id" in frame:
        cols = [c for c in ("commit", "dirty", "env_digest") if c in frame]
        contexts = frame.drop_duplicates("run_id").set_index("run_id")[cols].to_dict("index")
    base_id = base.cell_id if base is not None else None
    recs, notes = [], []
    for r in g.itertuples():
        found, why = joined_accuracy(accuracy.get(r.cell_id, []), contexts.get(r.run_id, {}), base_id)
        recs.append(found)
        if found is None and why:
            notes.append(f"{cell_label(r.backend, r.precision, r.max_batch_size)} [{options_text(r.options)}]: accuracy "
                         f"not shown: {why} than its speed row (run `bench accuracy` on this run's code and machine)")
    for col, key in (("accuracy_kl_mean", "kl_mean"), ("accuracy_top1", "top1"), ("accuracy_delta_ppl", "delta_ppl")):
        table[col] = [r.metrics.get(key) if r is not None else None for r in recs]
    # The baseline's own record has no verdict: it is what the others are judged against.
    table["accuracy_verdict"] = [("baseline" if r.verdict is None else r.verdict) if r is not None else None
                                 for r in recs]
    return any(r is not None and bool(r.accuracy.get("random_weights")) for r in recs), notes


def _add_outputs(table: pd.DataFrame, g: pd.DataFrame, base, outputs: dict, accuracy: dict) -> list[str]:
    """Add `outputs_vs_baseline` (each row's timed outputs against the baseline row's, request by request); return
    the notes: the baseline's own floor, and rows whose accuracy session generated other tokens than their timed pass."""
    from bench.results.outputs import (
        first_run,
        output_parity,
        own_floor,
        session_vs_timed,
    )

    notes = []
    base_runs = outputs.get((base.cell_id, base.gpu_memory_gb)) if base is not None else None
    column = []
    for r in g.itertuples():
        runs = outputs.get((r.cell_id, r.gpu_memory_gb))
        if not runs or not base_runs or r.status != "ok":
            column.append(None)
            continue
        parity = output_parity(first_run(runs), first_run(base_runs))
        column.append(parity.text() if parity is not None else None)
        for rec in accuracy.get(r.cell_id, [])[:1]:
            compared, differ = session_vs_timed(rec.accuracy.get("greedy_ids") or {}, first_run(runs))
            if differ:
                notes.append(f"{cell_label(r.backend, r.precision, r.max_batch_size)} [{options_text(r.options)}]: its "
                             f"accuracy session's greedy tokens differ from its timed pass's on {differ} of {compared} "
                             "requests (same batch function: nondeterminism, or a changed cell)")
    table["outputs_vs_baseline"] = column
    if base_runs:
        floor = own_floor(base_runs)
        notes.append("Timed outputs vs baseline: each row's generated ids against the baseline row's, request by request, "
                     "from the timed passes themselves; the baseline's own " + (
                         f"{floor.what}: {floor.text()}" if floor is not None
                         else "floor needs two runs (processes): one was stored"))
    return notes


def history_table(history_cells: pd.DataFrame, tables: dict[str, SpeedupTable]) -> dict[str, pd.DataFrame]:
    """Return {table key: history rows} from `aggregate(frame_of_history, by_run=True)`, keyed as the speedup tables."""
    if history_cells is None or not len(history_cells):
        return {}
    ambiguous = history_cells.groupby("workload").length.nunique()
    out = {}
    for (workload, length), g in history_cells.groupby(["workload", "length"], sort=False):
        key = table_key(workload, length, ambiguous[workload] > 1)
        if key not in tables and workload in tables:
            key = workload
        out[key] = g.sort_values(["backend", "precision", "options", "max_batch_size", "run_started_at"],
                                 kind="stable", key=_numbers_as_numbers).reset_index(drop=True)
    return out
