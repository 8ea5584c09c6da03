"""Speedup tables in the reference report's format, from a results frame.

One row per cell: backend, precision, max_batch_size, req/s, output tok/s, throughput speedup
(req/s over the baseline's) and generation speedup (output tok/s over the baseline's), with
the spread across trials (median ± sample std); a cell that did not fit shows OOM. Latency
percentiles, peak memory, tokens per joule, % of speed-of-light and the GPU memory cap appear
as columns when any cell has them; an environment column appears when a table mixes GPUs or
library versions. One table per workload and length setting. Pure functions; writers at the end.
"""

from __future__ import annotations

import html
import json

import pandas as pd

from bench.errors import BenchInputError

DEFAULT_BASELINE = {"backend": "hf", "precision": "bf16", "max_batch_size": 1}
CELL_COLUMNS = ["workload", "backend", "model", "precision", "max_batch_size", "device", "options"]
# Columns of a record frame that are neither cell fields nor metrics.
NOT_METRICS = set(CELL_COLUMNS) | {
    "store", "cell_id", "trial", "status", "gpu_name", "gpu_count", "driver", "cuda", "torch", "transformers",
    "tensorrt_llm", "torchao", "cpu", "commit", "dirty", "error", "started_at", "schema_version", "length",
    "gpu_memory_gb", "environment",
}
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
]


def _fill(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the frame with the report's optional key columns present (old frames lack them)."""
    f = frame.copy()
    for col, default in (("gpu_memory_gb", None), ("length", ""), ("environment", ""), ("gpu_name", None)):
        if col not in f:
            f[col] = default
    return f


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Return one row per cell (and GPU memory cap): status, trials, median / std of each metric over ok trials."""
    if frame.empty:
        raise BenchInputError("the result store is empty: run `bench run` first")
    f = _fill(frame)
    keys = ["cell_id", "gpu_memory_gb"]
    metric_cols = [c for c in f.columns if c not in NOT_METRICS]
    f[metric_cols] = f[metric_cols].apply(pd.to_numeric, errors="coerce")
    # The latest outcome decides a cell without ok trials: an ok re-run after an error counts; OOM stays OOM.
    latest = f.sort_values("started_at", na_position="first", kind="stable").groupby(keys, dropna=False, sort=False).tail(1)
    cells = latest.set_index(keys)[CELL_COLUMNS + ["length", "gpu_name", "status", "error"]]
    ok = f[f.status == "ok"]
    grouped = ok.groupby(keys, dropna=False)
    cells = cells.join(grouped.size().rename("trials"))
    cells = cells.join(grouped[metric_cols].median())
    cells = cells.join(grouped[metric_cols].std(ddof=1).add_suffix("__std"))
    envs = f.groupby(keys, dropna=False).environment.agg(lambda s: " + ".join(sorted(set(s) - {""})))
    cells = cells.join(envs)
    cells["trials"] = cells.trials.fillna(0).astype(int)
    cells.loc[cells.trials > 0, "status"] = "ok"
    cells.loc[cells.trials > 0, "error"] = None
    order = f.drop_duplicates(keys).set_index(keys).index  # first-seen order, as the stores list them
    cells = cells.reindex(order).reset_index()
    cells = cells.astype(object).where(cells.notna(), None)
    for c in metric_cols + [f"{m}__std" for m in metric_cols] + ["max_batch_size", "trials"]:
        cells[c] = pd.to_numeric(cells[c], errors="coerce")
    return cells


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


def table_key(workload: str, length: str, ambiguous: bool) -> str:
    """Return a table's name: the workload, plus its length setting when the name alone is ambiguous."""
    return f"{workload} [{length}]" if ambiguous and length else str(workload)


def speedup_table(frame: pd.DataFrame, baseline: dict | None = None, cells: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Return {workload (and length setting): speedup table} with numeric columns (None for OOM / failed cells)."""
    baseline = baseline or DEFAULT_BASELINE
    cells = aggregate(frame) if cells is None else cells
    ambiguous = cells.groupby("workload").length.nunique()
    out = {}
    for (workload, length), group in cells.groupby(["workload", "length"], sort=False):
        base = _baseline_row(group, baseline)
        g = group.sort_values(["backend", "precision", "options", "gpu_memory_gb", "max_batch_size"], kind="stable")
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
        if g.gpu_memory_gb.notna().any():
            table.insert(3, "gpu_memory_gb", g.gpu_memory_gb)
        for metric, _, _ in OPTIONAL:
            if metric in g and g[metric].notna().any():
                table[metric] = g[metric]
        if (g.environment != "").any() and g.environment.nunique() > 1:
            table["environment"] = g.environment
        table.attrs["baseline"] = f"{base.backend}/{base.precision}/bs{base.max_batch_size}"
        table.attrs["length"] = length
        out[table_key(workload, length, ambiguous[workload] > 1)] = table.reset_index(drop=True)
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
    show_cap = "gpu_memory_gb" in table
    show_env = "environment" in table
    headers = ["backend", "precision"] + (["options"] if show_options else []) + [
        "max_batch_size"] + (["GPU mem cap (GB)"] if show_cap else []) + [
        "req/s", "output tok/s", "throughput speedup", "generation speedup"]
    extra = [(m, h, f) for m, h, f in OPTIONAL if m in table]
    headers += [h for _, h, _ in extra] + (["environment"] if show_env else [])
    rows = []
    for r in table.to_dict("records"):
        opts = [", ".join(f"{k}={v}" for k, v in json.loads(r["options"]).items())] if show_options else []
        head = [str(r["backend"]), str(r["precision"]), *opts, str(int(r["max_batch_size"]))]
        if show_cap:
            head.append(_num(r["gpu_memory_gb"], None, "{:g}"))
        tail = [str(r["environment"] or "")] if show_env else []
        if r["status"] != "ok":
            label = str(r["status"]).upper()
            rows.append(head + [label] * 4 + [""] * len(extra) + tail)
            continue
        rows.append(head + [
            _num(r["request_throughput"], r["request_throughput__std"], "{:.3f}"),
            _num(r["output_throughput"], r["output_throughput__std"], "{:.1f}"),
            _num(r["throughput_speedup"], None, "{:.2f}x"),
            _num(r["generation_speedup"], None, "{:.2f}x"),
        ] + [_num(r[m], None, f) for m, _, f in extra] + tail)
    return headers, rows


def _title(workload: str, table: pd.DataFrame) -> str:
    length = table.attrs.get("length")
    shown = f" — {length}" if length and length not in workload else ""
    return f"{workload}{shown} (baseline: {table.attrs.get('baseline')})"


def to_markdown(tables: dict[str, pd.DataFrame], environment: str = "") -> str:
    """Return all speedup tables as Markdown, one section per workload, environment below."""
    parts = []
    for workload, table in tables.items():
        headers, rows = render_rows(table)
        parts.append(f"### {_title(workload, table)}\n")
        parts.append("| " + " | ".join(headers) + " |")
        parts.append("|" + "|".join("---" for _ in headers) + "|")
        parts.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)
        parts.append("")
    if environment:
        parts.append(environment)
    return "\n".join(parts) + "\n"


def to_html(tables: dict[str, pd.DataFrame], environment: str = "") -> str:
    """Return all speedup tables as an HTML fragment (every text escaped), environment below."""
    e = html.escape
    parts = []
    for workload, table in tables.items():
        headers, rows = render_rows(table)
        parts.append(f"<h3>{e(_title(workload, table))}</h3>")
        parts.append("<table class='speedup'><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr></thead><tbody>")
        for row in rows:
            cls = " class='failed'" if any(c in ("OOM", "ERROR", "TIMEOUT", "UNSUPPORTED") for c in row) else ""
            parts.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
        parts.append("</tbody></table>")
    if environment:
        lines = environment.splitlines()
        parts.append("<div class='env'><b>" + e(lines[0]) + "</b><ul>"
                     + "".join(f"<li>{e(x.lstrip('- '))}</li>" for x in lines[1:]) + "</ul></div>")
    return "\n".join(parts) + "\n"


def to_csv(tables: dict[str, pd.DataFrame]) -> str:
    """Return all speedup tables as one CSV with a workload column and numeric values."""
    frames = [t.assign(workload=w, length=t.attrs.get("length", ""), baseline=t.attrs.get("baseline")) for w, t in tables.items()]
    return pd.concat(frames, ignore_index=True).to_csv(index=False, float_format="%.6g", lineterminator="\n")


ENV_NOTE_KEYS = ("gpu_name", "gpu_count", "gpu_memory_bytes", "driver", "cuda", "torch", "transformers",
                 "tensorrt_llm", "torchao", "python", "cpu", "commit")


def environment_note(frame: pd.DataFrame, records_env: list[dict]) -> str:
    """Return the environment lines printed under a table; flags mixed environments."""
    from bench.environment import COMPARABILITY_KEYS

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


def comparisons(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """Return [(a, b, cells with ratio b/a of output tok/s)] comparing the first store (or commit) with each other one."""
    by = "store" if frame.store.nunique() > 1 else "commit"
    groups = [g for g in frame[by].dropna().unique()]
    if len(groups) < 2:
        return []
    per = {g: aggregate(frame[frame[by] == g]).set_index(["cell_id", "gpu_memory_gb"], drop=False) for g in groups}
    a = groups[0]
    out = []
    for b in groups[1:]:
        left, right = per[a], per[b]
        common = left.index.intersection(right.index)
        if common.empty:
            continue
        cells = right.loc[common].reset_index(drop=True)
        ratio = (right.loc[common].output_throughput / left.loc[common].output_throughput).to_numpy()
        cells["ratio"] = ratio
        cells["text"] = [f"{x:.2f}x" if not pd.isna(x) else f"{sa}→{sb}".upper() for x, sa, sb in
                         zip(ratio, left.loc[common].status, right.loc[common].status, strict=True)]
        label = (lambda g: str(g)[:12]) if by == "commit" else str
        out.append((label(a), label(b), cells))
    return out
