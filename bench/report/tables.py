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
GPUs or library versions; a run column when its rows come from different runs. One table per
workload and length setting. Pure functions; writers at the end.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

import pandas as pd

from bench.errors import BenchInputError
from bench.results.records import varying_keys
from bench.results.stats import concerns, run_spread, tuning_warnings
from bench.spec.cells import cell_label

DEFAULT_BASELINE = {"backend": "hf", "precision": "bf16", "max_batch_size": 1}
CELL_COLUMNS = ["workload", "backend", "model", "precision", "max_batch_size", "device", "options", "all_options"]
RUN_COLUMNS = ["run_id", "run", "run_key", "run_started_at", "run_label", "env_digest"]
# Columns of a record frame that are neither cell fields nor metrics.
NOT_METRICS = set(CELL_COLUMNS) | set(RUN_COLUMNS) | {
    "store", "cell_id", "trial", "status", "gpu_name", "gpu_count", "driver", "cuda", "torch", "transformers",
    "tensorrt_llm", "torchao", "cpu", "commit", "dirty", "error", "started_at", "schema_version", "length",
    "gpu_memory_gb", "environment", "input_len_limit", "output_len_limit", "lengths_exact", "tuned_digest",
    "planned_runs", "planned_trials", "left_out_runs",
    "tuning_build",
    "busy", "notes",
}
# Metrics whose spread between runs and within runs the tables show (and judge for stability).
HEADLINE = ("request_throughput", "output_throughput")
LIMITS = ["input_len_limit", "output_len_limit", "lengths_exact"]
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


def _fill(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the frame with the report's optional key columns present (hand-made frames lack them)."""
    f = frame.copy()
    defaults = (("gpu_memory_gb", None), ("length", ""), ("environment", ""), ("gpu_name", None), ("run", 0),
                ("run_id", "?"), ("run_label", ""), ("run_started_at", None), ("all_options", None),
                ("input_len_limit", None), ("output_len_limit", None), ("lengths_exact", False), ("busy", None),
                ("notes", None))
    for col, default in defaults:
        if col not in f:
            f[col] = default
    if "run_key" not in f:
        f["run_key"] = f.run_id.astype(str) + "#" + f.run.astype(str)
    f["all_options"] = f.all_options.where(f.all_options.notna(), f.options)
    return f


def aggregate(frame: pd.DataFrame, by_run: bool = False, spreads: bool = True) -> pd.DataFrame:
    """Return one row per cell (and GPU memory cap): status, runs, trials, each metric over ok trials.

    A metric's value is the mean of its runs' means (each run: one worker process, the mean of
    its trials); `<metric>__std` is the spread a table prints after ±: the standard deviation of
    the run means with two runs or more, else of the trials. Headline metrics also get
    `<metric>__run_cv`, `__trial_cv` and the stability warnings of bench.results.stats.run_spread.
    by_run: one row per run context of a cell instead (history tables). spreads=False: without the
    headline metrics' run/trial CVs and stability warnings (history and comparison views show none).
    """
    if frame.empty:
        raise BenchInputError("the result store is empty: run `bench run` first")
    f = _fill(frame)
    keys = ["cell_id", "gpu_memory_gb"] + (["run_id"] if by_run else [])
    metric_cols = [c for c in f.columns if c not in NOT_METRICS]
    f[metric_cols] = f[metric_cols].apply(pd.to_numeric, errors="coerce")
    # The latest outcome decides a cell without ok trials: an ok re-run after an error counts; OOM stays OOM.
    latest = f.sort_values("started_at", na_position="first", kind="stable").groupby(keys, dropna=False, sort=False).tail(1)
    cells = latest.set_index(keys)[CELL_COLUMNS + ["length"] + LIMITS + ["gpu_name", "status", "error"]
                                   + ([] if by_run else ["run_id"]) + ["run_label", "run_started_at"]]
    ok = f[f.status == "ok"]
    if ok.empty:  # every cell failed (all OOM, all errors): rows with their statuses, no figures
        return _failed_cells(cells, f, keys, metric_cols, order=f.drop_duplicates(keys).set_index(keys).index)
    per_run = ok.groupby(keys + ["run_key"], dropna=False)[metric_cols].mean()
    by_cell = per_run.groupby(level=keys, dropna=False)
    cells = cells.join(ok.groupby(keys, dropna=False).size().rename("trials"))
    cells = cells.join(by_cell.size().rename("runs"))
    cells = cells.join(by_cell.mean())
    run_std = by_cell.std(ddof=1)
    # pooled within-run spread: squared deviations from each run's mean over (values - runs)
    dev = ok[metric_cols] - ok.groupby(keys + ["run_key"], dropna=False)[metric_cols].transform("mean")
    ss = (dev ** 2).groupby([ok[k] for k in keys], dropna=False).sum()
    dof = ok.groupby(keys, dropna=False)[metric_cols].count() - per_run.notna().groupby(level=keys, dropna=False).sum()
    trial_std = (ss / dof.where(dof > 0)) ** 0.5
    runs = by_cell.size()
    std = run_std.where((runs >= 2).reindex(run_std.index), trial_std.reindex(run_std.index))
    cells = cells.join(std.add_suffix("__std"))
    # Each cell's distinct environments (rows repeat them: a cell's rows first made distinct, then joined).
    envs = f[keys + ["environment"]].drop_duplicates().groupby(keys, dropna=False).environment.agg(
        lambda s: " + ".join(sorted(set(s) - {""})))
    cells = cells.join(envs)
    cells = cells.join(_per_cell_text(ok, keys, "busy", busy_note))
    cells = cells.join(_per_cell_text(ok, keys, "notes", _unique_lines))
    contexts = f.groupby(keys, dropna=False).run_id.nunique().rename("contexts")
    cells = cells.join(contexts).join(_planned(f, keys))
    cells["trials"] = cells.trials.fillna(0).astype(int)
    cells["runs"] = cells.runs.fillna(0).astype(int)
    cells.loc[cells.trials > 0, "status"] = "ok"
    cells.loc[cells.trials > 0, "error"] = None
    if spreads:
        cells = _headline_spreads(cells, ok, keys)
    cells = cells.copy()  # copy: the joins above leave many blocks
    order = f.drop_duplicates(keys).set_index(keys).index  # first-seen order, as the stores list them
    cells = cells.reindex(order).reset_index()
    cells = cells.astype(object).where(cells.notna(), None)
    numeric = metric_cols + [f"{m}__std" for m in metric_cols] + ["max_batch_size", "trials", "runs", "contexts"]
    numeric += [f"{m}__{x}" for m in HEADLINE for x in ("run_cv", "trial_cv")]
    for c in numeric:
        if c in cells:
            cells[c] = pd.to_numeric(cells[c], errors="coerce")
    return cells.copy()  # one block per dtype: later .assign calls stay fast


def _planned(f: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Return per cell what its run contexts asked for (runs: summed over pooled contexts; trials per run) and the
    partial runs the selection left out (bench.results.query.counted_records); empty columns for hand-made frames."""
    cols = {}
    if "planned_runs" in f and "run_id" in f:
        per_context = f.drop_duplicates(keys + ["run_id"]).groupby(keys, dropna=False)
        cols["planned_runs"] = per_context.planned_runs.sum(min_count=1)
        cols["planned_trials"] = f.groupby(keys, dropna=False).planned_trials.max()
    if "left_out_runs" in f:
        cols["left_out_runs"] = f.groupby(keys, dropna=False).left_out_runs.max()
    return pd.DataFrame(cols) if cols else pd.DataFrame(index=f.groupby(keys, dropna=False).size().index)


def _failed_cells(cells: pd.DataFrame, f: pd.DataFrame, keys: list[str], metric_cols: list[str], order) -> pd.DataFrame:
    """Return aggregate's rows when no record is ok: each cell's latest status and error, zero trials, no figures."""
    cells = cells.join(f.groupby(keys, dropna=False).environment.agg(lambda s: " + ".join(sorted(set(s) - {""}))))
    cells = cells.join(f.groupby(keys, dropna=False).run_id.nunique().rename("contexts")).join(_planned(f, keys))
    cells = cells.reindex(order).reset_index()
    extra = {"trials": 0, "runs": 0, "stability": None}
    for m in metric_cols:
        extra[m] = float("nan")
        extra[f"{m}__std"] = float("nan")
    for m in HEADLINE:
        for x in ("run_cv", "trial_cv"):
            extra[f"{m}__{x}"] = float("nan")
    for m in HEADLINE + ("decode_throughput",):
        extra.setdefault(m, float("nan"))
        extra.setdefault(f"{m}__std", float("nan"))
    cells = pd.concat([cells, pd.DataFrame({k: [v] * len(cells) for k, v in extra.items()}, index=cells.index)], axis=1)
    cells = cells.astype(object).where(cells.notna(), None)
    for c in [*metric_cols, *(k for k in extra if k != "stability"), "max_batch_size", "contexts"]:
        if c in cells:
            cells[c] = pd.to_numeric(cells[c], errors="coerce")
    return cells.copy()


def _headline_spreads(cells: pd.DataFrame, ok: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Return cells with run/trial coefficients of variation and stability warnings of the headline metrics."""
    new: dict[str, dict] = {f"{m}__{x}": {} for m in HEADLINE for x in ("run_cv", "trial_cv")}
    new.update({"output_throughput__tuning_cv": {}, "tuning_builds": {}, "tuned_digests": {}})
    warnings: dict = {}
    # One pass over the rows (not a pandas group per cell: a matrix has thousands of cells).
    by_cell = ok.groupby(keys, dropna=False, sort=False)
    ids = by_cell.ngroup().to_numpy()
    names = by_cell.size().index  # each group's key, by group number
    run_keys = ok.run_key.tolist()
    built = set(ids[ok.tuning_build.notna().to_numpy()].tolist()) if "tuning_build" in ok else set()
    for m in HEADLINE:
        if m not in ok:
            continue
        per_cell: dict[int, dict[str, list[float]]] = {}
        for gid, run_key, v in zip(ids.tolist(), run_keys, ok[m].tolist(), strict=True):
            runs = per_cell.setdefault(gid, {})
            run = runs.setdefault(run_key, [])
            if v is not None and v == v:
                run.append(v)
        for gid, runs in per_cell.items():
            values = [v for v in runs.values() if v]
            if not values:
                continue
            key = names[gid]
            key = key if isinstance(key, tuple) else (key,)
            spread = run_spread(values, m)
            new[f"{m}__run_cv"][key], new[f"{m}__trial_cv"][key] = spread.run_cv, spread.trial_cv
            unstable = concerns(spread.warnings)
            # The cell's rows, only where a warning or tuning builds need them (a mask per cell is costly at scale).
            g = ok[ids == gid] if m == "output_throughput" and (unstable or gid in built) else None
            if m == "output_throughput" and unstable:
                warnings[key] = "; ".join(unstable) + (_tuning_cause(g) + _telemetry_cause(g) if spread.runs > 1 else "")
            builds = _by_build(g, m) if g is not None and gid in built else []
            if len(builds) > 1:
                # Cold builds, each with its own tuned kernels: the spread between them is the tuning's.
                tuning = run_spread(builds, m)
                new["output_throughput__tuning_cv"][key], new["tuning_builds"][key] = tuning.run_cv, len(builds)
                new["tuned_digests"][key] = g.tuned_digest.nunique() if "tuned_digest" in g else 0
                said = tuning_warnings(tuning, m)
                # The builds' spread is what the runs' spread showed too: one warning, naming the builds.
                warnings.pop(key, None)
                if said:
                    warnings[key] = "; ".join(said) + _tuning_cause(g, "tuning_build")
    columns = {name: pd.Series(values, dtype=float).reindex(cells.index) for name, values in new.items()
               if values or not name.startswith(("tuning", "tuned", "output_throughput__tuning"))}
    columns["stability"] = pd.Series(warnings, dtype=object).reindex(cells.index)
    return pd.concat([cells, pd.DataFrame(columns, index=cells.index)], axis=1)


def _per_cell_text(ok: pd.DataFrame, keys: list[str], column: str, summary) -> pd.Series:
    """Return summary(the cell's values of a text column) per cell; None for every cell when no row holds one
    (the common case, without a Python call per cell)."""
    by_cell = ok.groupby(keys, dropna=False)
    if ok[column].notna().any():
        return by_cell[column].agg(summary).rename(column)
    return pd.Series([None] * by_cell.ngroups, index=by_cell.size().index, dtype=object, name=column)


def _unique_lines(values: pd.Series) -> str | None:
    """Return the distinct lines of newline-joined texts, in order, joined again (None if there are none)."""
    lines = dict.fromkeys(line for v in values if isinstance(v, str) for line in v.splitlines() if line)
    return "\n".join(lines) or None


def busy_note(reasons: pd.Series) -> str | None:
    """Return '2 of 3 passes ran on a busy machine (load average 5.1 on 2 core(s), ...)' from each pass's reasons, or None."""
    busy = [r for r in reasons if isinstance(r, str) and r]
    if not busy:
        return None
    worst = max(busy, key=lambda r: r.count(";"))
    return f"{len(busy)} of {len(reasons)} pass(es) measured on a busy machine ({worst}): the figures may be low"


def _telemetry_cause(g: pd.DataFrame) -> str:
    """Return a clause naming what the runs' GPU telemetry saw (bench.machine.telemetry.spread_causes), else ''."""
    from bench.machine.telemetry import spread_causes

    keys = [k for k in ("sm_clock_mhz_median", "gpu_busy_pct", "throttle_power_pct", "throttle_thermal_pct") if k in g]
    if not keys:
        return ""
    runs = g.groupby("run_key", sort=False)[keys].mean().to_dict("records")
    causes = spread_causes(runs)
    return "; telemetry: " + "; ".join(causes) if causes else ""


def _tuning_cause(g: pd.DataFrame, by: str = "run_key") -> str:
    """Return a clause naming the tuned-kernel digests when a cell's runs (or tuning builds) ran different tuned
    kernels, else ''."""
    if "tuned_digest" not in g:
        return ""
    digests = list(dict.fromkeys(g.groupby(by, sort=False).tuned_digest.first().dropna()))
    if len(digests) < 2:
        return ""
    if by == "tuning_build":
        return (f"; each build tuned its own kernels (tuned-config digests {', '.join(digests)}): which one a machine "
                "gets is a draw; load one build's artifact (`bench build`, `bench run --engines`) to run the same "
                "kernels everywhere (docs/guide/hf-backend.md, \"Engines as artifacts\")")
    return (f"; the runs ran different tuned kernels (Inductor's tuned-config digests {', '.join(digests)}): "
            "each process tuned its own (docs/guide/hf-backend.md, \"Tuned kernels and runs\")")


def _by_build(g: pd.DataFrame, metric: str) -> list[list[float]]:
    """Return a cell's metric values grouped by tuning build (empty where its records are of no tuning build)."""
    if "tuning_build" not in g or not g.tuning_build.notna().any():
        return []
    groups = [v.dropna().tolist() for _, v in g[g.tuning_build.notna()].groupby("tuning_build", sort=True)[metric]]
    return [v for v in groups if v]


def _option_value(row, key: str):
    try:
        return json.loads(row.all_options).get(key, _ABSENT) if row.all_options else _ABSENT
    except (TypeError, ValueError):
        return _ABSENT


_ABSENT = object()


def _baseline_row(cells: pd.DataFrame, baseline: dict):
    """Return the one ok row the baseline names, or None when the cells it names all failed (OOM, error:
    the table has no speedups); BenchInputError if it names no cell of the table, or several ok ones."""
    from bench.spec.baseline import ambiguous_baseline_message

    mask = pd.Series(True, index=cells.index)
    for k, v in baseline.items():
        if k in cells.columns and k not in ("options", "all_options"):
            mask &= cells[k].astype(str) == str(v)
        else:
            have = [_option_value(r, k) for r in cells.itertuples()]
            if all(h is _ABSENT for h in have):
                raise BenchInputError(f"baseline key {k!r} is neither a cell field (backend, precision, max_batch_size, "
                                      "model, device, gpu_memory_gb) nor an option of these cells")
            mask &= pd.Series([h is not _ABSENT and str(h) == str(v) for h in have], index=cells.index)
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
        labels = [f"{cell_label(r.backend, r.precision, r.max_batch_size)} [{_options_text(r.options)}]"
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


def _options_text(options: str) -> str:
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
                  accuracy: dict | None = None) -> dict[str, SpeedupTable]:
    """Return {workload (and length setting): SpeedupTable} with numeric columns (None for OOM / failed cells).

    accuracy: {cell_id: Accuracy record} (bench.results.query.latest_accuracy): when given, each row
    gains the accuracy columns of its cell (ACCURACY_COLUMNS) and render_rows flags its speedups.
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
        table["output_throughput__run_cv"] = g.get("output_throughput__run_cv")
        table["output_throughput__trial_cv"] = g.get("output_throughput__trial_cv")
        if "tuning_builds" in g and g.tuning_builds.notna().any():
            table["output_throughput__tuning_cv"] = g.output_throughput__tuning_cv
            table["tuning_builds"] = g.tuning_builds
            table["tuned_digests"] = g.tuned_digests
        table["stability"] = g.get("stability")
        table["busy"] = g.get("busy")
        # Which run each row is: shown when the rows come from different runs, or a row is pooled.
        table["run"] = [f"pooled from {int(n)} runs" if n and n > 1 else lbl
                        for n, lbl in zip(g.contexts, g.run_label, strict=True)]
        show_run = bool(g.run_id.nunique() > 1 or (g.contexts > 1).any())
        if g.gpu_memory_gb.notna().any():
            table.insert(3, "gpu_memory_gb", g.gpu_memory_gb)
        serving = bool((g.backend == "openai").any())
        for metric, _, _ in OPTIONAL:
            if metric in g and g[metric].notna().any() and (serving or metric not in SERVING_ONLY):
                table[metric] = g[metric]
        if (g.environment != "").any() and g.environment.nunique() > 1:
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
        ]
        notes = dict.fromkeys(line for n in g.get("notes", pd.Series(dtype=object))
                              if isinstance(n, str) for line in n.splitlines())
        random_weights = _add_accuracy(table, g.cell_id, accuracy) if accuracy else False
        out[table_key(workload, length, ambiguous[workload] > 1)] = SpeedupTable(
            table.reset_index(drop=True), base_label, length, tuple(warnings), tuple(notes), tuple(varying), show_run,
            accuracy=bool(accuracy), random_weights=random_weights)
    return out


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
    if num("gpu_busy_pct") is not None and num("gpu_busy_pct") < HOST_BOUND_BUSY_PCT:
        out.append(f"host-bound: the GPU was busy {num('gpu_busy_pct'):.0f} % of the measured window "
                   f"(< {HOST_BOUND_BUSY_PCT:g} %): the host (launches, Python, the client) limits it")
    return out


# The accuracy figures a speedup row shows (bench accuracy's metrics, bench/accuracy/figures.py defines them).
ACCURACY_COLUMNS = [("accuracy_kl_mean", "KL mean", "{:.3g}"), ("accuracy_top1", "top-1 %", None),
                    ("accuracy_delta_ppl", "ΔPPL", "{:+.3g}")]
# How a speedup of a cell judged other than aligned is written: never plain.
VERDICT_FLAGS = {"broken": "✗ broken", "degraded": "! degraded"}


def _add_accuracy(table: pd.DataFrame, cell_ids: pd.Series, accuracy: dict) -> bool:
    """Add the accuracy columns (and the verdict) of each row's cell, from its latest Accuracy record; return
    whether any of those records measured random weights."""
    recs = [accuracy.get(c) for c in cell_ids]
    for col, key in (("accuracy_kl_mean", "kl_mean"), ("accuracy_top1", "top1"), ("accuracy_delta_ppl", "delta_ppl")):
        table[col] = [r.metrics.get(key) if r is not None else None for r in recs]
    # The baseline's own record has no verdict: it is what the others are judged against.
    table["accuracy_verdict"] = [("baseline" if r.verdict is None else r.verdict) if r is not None else None
                                 for r in recs]
    return any(r is not None and bool(r.accuracy.get("random_weights")) for r in recs)


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
        flag = VERDICT_FLAGS.get(_verdict(r) or "")
        if r["status"] != "ok":
            label = str(r["status"]).upper()
            rows.append(head + [label] * len(numbers) + ["", ""] + [""] * show_tuning + acc + [""] * len(extra) + tail)
            continue
        figures = [_num(r["request_throughput"], r["request_throughput__std"], "{:.3f}"),
                   _num(r["output_throughput"], r["output_throughput__std"], "{:.1f}")]
        if show_decode:
            figures.append(_num(r.get("decode_throughput"), r.get("decode_throughput__std"), "{:.1f}"))
        speedups = [_num(r["throughput_speedup"], None, "{:.2f}x"), _num(r["generation_speedup"], None, "{:.2f}x")]
        if flag:  # a speedup of a wrong (or degraded) cell is never shown plain
            speedups = [f"{x} {flag}" if x else x for x in speedups]
        rows.append(head + figures + speedups + [
            runs_text(r),
            spread_text(r.get("output_throughput__run_cv"), r.get("output_throughput__trial_cv"), r.get("runs"),
                        (bool(r.get("stability")) and not (r.get("tuning_builds") or 0) >= 2) or bool(r.get("busy"))),
        ] + ([tuning_text(r)] if show_tuning else []) + acc + [_num(r[m], None, f) for m, _, f in extra] + tail)
    return headers, rows


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
    out = [f"<table class='{css}'><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    for row in rows:
        cls = " class='failed'" if any(c in ("OOM", "ERROR", "TIMEOUT", "UNSUPPORTED") for c in row) else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
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
        for w in table.warnings:
            parts.append(f"<p class='warn'>⚠ {e(w)}</p>")
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
        opts = [_options_text(r["options"])] if show_options else []
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


ENV_NOTE_KEYS = ("gpu_name", "gpu_count", "gpu_memory_bytes", "driver", "cuda", "torch", "transformers",
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


def comparisons(frames: dict[str, pd.DataFrame]) -> list[tuple[str, str, pd.DataFrame]]:
    """Return [(a, b, cells with ratio b/a of output tok/s)] comparing the first group's frame with each other one.

    frames: {group label (a store, or a commit): record frame of that group's chosen records}.
    """
    if len(frames) < 2:
        return []
    return compared_cells({g: aggregate(f, spreads=False) for g, f in frames.items()})


def compared_cells(cells: dict[str, pd.DataFrame]) -> list[tuple[str, str, pd.DataFrame]]:
    """Return comparisons' result from each group's aggregated cells (aggregate of its record frame)."""
    labels = list(cells)
    if len(labels) < 2:
        return []
    per = {g: c.set_index(["cell_id", "gpu_memory_gb"], drop=False) for g, c in cells.items()}
    a = labels[0]
    out = []
    for b in labels[1:]:
        left, right = per[a], per[b]
        common = left.index.intersection(right.index)
        if common.empty:
            continue
        cells = right.loc[common].reset_index(drop=True)
        ratio = (right.loc[common].output_throughput / left.loc[common].output_throughput).to_numpy()
        cells["ratio"] = ratio
        cells["text"] = [f"{x:.2f}x" if not pd.isna(x) else f"{sa}→{sb}".upper() for x, sa, sb in
                         zip(ratio, left.loc[common].status, right.loc[common].status, strict=True)]
        out.append((a, b, cells))
    return out
