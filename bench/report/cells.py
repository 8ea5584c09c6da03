"""A record frame aggregated one row per cell: what every table and figure of a report draws from.

`aggregate` turns the record frame of the chosen records (bench.report.data) into one row per cell
(and GPU memory cap; per run context for history tables): status, runs, trials, each metric as the
mean of its runs' means with the spread a table prints after ±, the headline metrics' run and
trial spreads and stability warnings (bench.results.stats), what the cell's passes say about a busy
machine, its notes. `comparisons` / `compared_cells` set two groups' cells side by side (the
dashboard's comparison heatmaps). Pure functions.
"""

from __future__ import annotations

import pandas as pd

from bench.errors import BenchInputError
from bench.results.stats import concerns, run_spread, tuning_warnings

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
    """Return a clause naming what the runs' GPU telemetry and host probes saw (bench.machine.telemetry.spread_causes),
    else ''."""
    from bench.machine.telemetry import spread_causes
    from bench.results.stats import rank_correlation

    keys = [k for k in ("sm_clock_mhz_median", "gpu_busy_pct", "throttle_power_pct", "throttle_thermal_pct",
                        "host_probe_ms") if k in g]
    if not keys:
        return ""
    numbers = g[keys + ["output_throughput"]].apply(pd.to_numeric, errors="coerce")  # Nones (older records): no number
    numbers["slowness"] = -numbers.pop("output_throughput")  # the spread figure, larger slower (spread_causes)
    runs = numbers.groupby(g["run_key"], sort=False).mean().to_dict("records")
    causes = spread_causes(runs, rank_correlation)
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
