"""Speedup tables in the reference report's format, from a results frame.

One row per cell: backend, precision, max_batch_size, req/s, output tok/s, throughput speedup
(req/s over the baseline's) and generation speedup (output tok/s over the baseline's), with
the spread across trials; a cell that did not fit shows OOM. Pure functions; writers at the end.
"""

from __future__ import annotations

import json

import pandas as pd

from bench.errors import BenchInputError

DEFAULT_BASELINE = {"backend": "hf", "precision": "bf16", "max_batch_size": 1}
CELL_COLUMNS = ["workload", "backend", "model", "precision", "max_batch_size", "device", "options"]
# Optional columns shown when any cell has them: (metric, header, format)
OPTIONAL = [
    ("ttft_median_ms", "TTFT p50 (ms)", "{:.1f}"),
    ("tpot_median_ms", "TPOT p50 (ms)", "{:.2f}"),
    ("e2el_p99_ms", "E2E p99 (ms)", "{:.0f}"),
    ("peak_memory_gb", "peak mem (GB)", "{:.2f}"),
    ("tokens_per_joule", "tok/J", "{:.2f}"),
    ("sol_pct", "% SOL", "{:.0f}"),
]


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Return one row per cell: status, trials, and median / std of each metric across ok trials."""
    if frame.empty:
        raise BenchInputError("the result store is empty: run `bench run` first")
    metric_cols = [c for c in frame.columns if c not in CELL_COLUMNS + ["store", "cell_id", "trial", "status", "gpu_name",
                                                                       "commit", "error", "started_at", "schema_version"]]
    rows = []
    for cell_id, g in frame.groupby("cell_id", sort=False):
        # The latest outcome decides: an ok re-run after an error counts; OOM stays OOM.
        ok = g[g.status == "ok"]
        status = "ok" if len(ok) else g.sort_values("started_at", na_position="first").status.iloc[-1]
        row = {c: g[c].iloc[0] for c in CELL_COLUMNS}
        row.update({"cell_id": cell_id, "status": status, "trials": len(ok), "gpu_name": g.gpu_name.iloc[-1],
                    "error": None if len(ok) else g.error.iloc[-1]})
        for m in metric_cols:
            values = pd.to_numeric(ok[m], errors="coerce").dropna() if m in ok else pd.Series(dtype=float)
            row[m] = float(values.median()) if len(values) else None
            row[f"{m}__std"] = float(values.std(ddof=1)) if len(values) > 1 else None
        rows.append(row)
    return pd.DataFrame(rows)


def _baseline_row(cells: pd.DataFrame, baseline: dict):
    mask = pd.Series(True, index=cells.index)
    for k, v in baseline.items():
        if k not in cells.columns:
            raise BenchInputError(f"baseline key {k!r} is not a cell field; use backend, precision, max_batch_size, ...")
        mask &= cells[k].astype(str) == str(v)
    hits = cells[mask & (cells.status == "ok")]
    if hits.empty:
        existing = "\n  ".join(
            f"{r.backend}/{r.precision}/bs{r.max_batch_size} ({r.status})" for r in cells.itertuples()
        )
        want = ", ".join(f"{k}={v}" for k, v in baseline.items())
        raise BenchInputError(
            f"baseline cell ({want}) has no ok result in workload {cells.workload.iloc[0]!r}; choose one with "
            f"--baseline from the cells that exist:\n  {existing}"
        )
    return hits.iloc[0]


def speedup_table(frame: pd.DataFrame, baseline: dict | None = None) -> dict[str, pd.DataFrame]:
    """Return {workload name: speedup table} with numeric columns (None for OOM / failed cells)."""
    baseline = baseline or DEFAULT_BASELINE
    cells = aggregate(frame)
    out = {}
    for workload, group in cells.groupby("workload", sort=False):
        base = _baseline_row(group, baseline)
        g = group.sort_values(["backend", "precision", "options", "max_batch_size"], kind="stable")
        table = pd.DataFrame({
            "backend": g.backend,
            "precision": g.precision,
            "max_batch_size": g.max_batch_size,
            "options": g.options,
            "status": g.status,
            "trials": g.trials,
            "request_throughput": g.request_throughput,
            "request_throughput__std": g.get("request_throughput__std"),
            "output_throughput": g.output_throughput,
            "output_throughput__std": g.get("output_throughput__std"),
        })
        table["throughput_speedup"] = g.request_throughput / base.request_throughput
        table["generation_speedup"] = g.output_throughput / base.output_throughput
        for metric, _, _ in OPTIONAL:
            if metric in g and g[metric].notna().any():
                table[metric] = g[metric]
        table.attrs["baseline"] = f"{base.backend}/{base.precision}/bs{base.max_batch_size}"
        out[workload] = table.reset_index(drop=True)
    return out


def _num(value, std=None, fmt="{:.2f}") -> str:
    if value is None or pd.isna(value):
        return ""
    text = fmt.format(value)
    if std is not None and not pd.isna(std):
        text += " ± " + fmt.format(std)
    return text


def render_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Return (headers, rows of strings) of a speedup table; OOM and failures spelled out."""
    show_options = table.options.nunique() > 1
    headers = ["backend", "precision"] + (["options"] if show_options else []) + [
        "max_batch_size", "req/s", "output tok/s", "throughput speedup", "generation speedup"]
    extra = [(m, h, f) for m, h, f in OPTIONAL if m in table]
    headers += [h for _, h, _ in extra]
    rows = []
    for r in table.itertuples(index=False):
        opts = [", ".join(f"{k}={v}" for k, v in json.loads(r.options).items())] if show_options else []
        head = [r.backend, r.precision, *opts, str(r.max_batch_size)]
        if r.status != "ok":
            label = r.status.upper()
            rows.append(head + [label] * 4 + [""] * len(extra))
            continue
        rows.append(head + [
            _num(r.request_throughput, r.request_throughput__std, "{:.3f}"),
            _num(r.output_throughput, r.output_throughput__std, "{:.1f}"),
            _num(r.throughput_speedup, None, "{:.2f}x"),
            _num(r.generation_speedup, None, "{:.2f}x"),
        ] + [_num(getattr(r, m), None, f) for m, _, f in extra])
    return headers, rows


def to_markdown(tables: dict[str, pd.DataFrame], environment: str = "") -> str:
    """Return all speedup tables as Markdown, one section per workload, environment below."""
    parts = []
    for workload, table in tables.items():
        headers, rows = render_rows(table)
        parts.append(f"### {workload} (baseline: {table.attrs.get('baseline')})\n")
        parts.append("| " + " | ".join(headers) + " |")
        parts.append("|" + "|".join("---" for _ in headers) + "|")
        parts.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
        parts.append("")
    if environment:
        parts.append(environment)
    return "\n".join(parts) + "\n"


def to_csv(tables: dict[str, pd.DataFrame]) -> str:
    """Return all speedup tables as one CSV with a workload column and numeric values."""
    frames = [t.assign(workload=w) for w, t in tables.items()]
    return pd.concat(frames, ignore_index=True).to_csv(index=False, float_format="%.6g")


def environment_note(frame: pd.DataFrame, records_env: list[dict]) -> str:
    """Return the environment lines printed under a table; flags mixed environments."""
    from bench.environment import COMPARABILITY_KEYS

    seen: dict[str, set] = {k: set() for k in COMPARABILITY_KEYS + ("commit",)}
    for env in records_env:
        for k in seen:
            seen[k].add(str(env.get(k)))
    lines = ["Environment:"]
    for k, values in seen.items():
        values.discard("None")
        if values:
            flag = "  **MIXED: results are not directly comparable**" if len(values) > 1 and k != "commit" else ""
            lines.append(f"- {k}: {', '.join(sorted(values))}{flag}")
    return "\n".join(lines)
