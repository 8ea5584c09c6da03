"""Typed result records -> the frames reports draw from: one row per record, per-request samples,
telemetry timelines, and the warnings a reader must see (mixed environments).

Which records reach here is decided by bench.results.query (one run context per cell unless
pooling is asked for); tables and figures never touch records. The record frame has the cell's
fields, its run context (run id, run = worker process, environment digest), the workload's
length setting and its input/output length limits, the GPU memory cap, per-record environment
fields and a short environment label, every numeric metric (`tokens_per_joule` / `sol_pct`
also from `extra`) and the pass's mean input and output lengths.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.errors import BenchInputError
from bench.metrics import time_per_output_token
from bench.results.records import Record
from bench.results.rows import ENV_FIELDS, TELEMETRY_COLUMNS, record_row
from bench.results.rows import number as _number

ENV_SHORT = {"gpu_name": "", "gpu_count": "x", "driver": "driver ", "cuda": "CUDA ", "torch": "torch ",
             "transformers": "transformers ", "tensorrt_llm": "trtllm ", "torchao": "torchao ", "cpu": ""}


@dataclass
class ReportData:
    frame: pd.DataFrame                    # one row per record
    samples: pd.DataFrame                  # one row per request of ok records: cell keys, in, out, ttft_ms, tpot_ms
    telemetry: pd.DataFrame                # one row per telemetry sample: cell keys, t_s, power_w, memory_gb, sm_mhz, util_pct, temp_c
    environments: list[dict]               # each record's environment
    warnings: list[str] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)  # the timed passes' generated ids (bench.results.outputs.run_outputs)


# Keys that identify a cell on the page: cell_id alone is not enough when the same cell ran
# under different GPU memory caps (the cap is a run setting, not part of the cell).
CELL_KEYS = ["cell_id", "gpu_memory_gb"]


# Per-request fields read from each sample, in this order (itemgetter: one C call per sample).
_SAMPLE_FIELDS = ("error", "in", "out", "ttft_ms", "e2el_ms")
_get_sample = operator.itemgetter(*_SAMPLE_FIELDS)
_KEY_COLUMNS = ["cell_id", "gpu_memory_gb", "trial", "store", "run_key"]




def _sample_values(samples) -> list[tuple]:
    """Return (in, out, ttft_ms, e2el_ms) of each sample without an error."""
    try:
        vals = list(map(_get_sample, samples))
    except KeyError:  # a sample without some field: read the slow way
        vals = [tuple(s.get(k) for k in _SAMPLE_FIELDS) for s in samples]
    return [v[1:] for v in vals if v[0] is None]


def _keyed_frame(keys: list[tuple], counts: list[int], columns: dict[str, list]) -> pd.DataFrame:
    """Return a frame of columns with each record's keys repeated over its rows (counts[i] rows for keys[i])."""
    # Keys go through the same dtype inference as before (one small frame of records), then repeat.
    key_frame = pd.DataFrame(keys, columns=_KEY_COLUMNS) if keys else pd.DataFrame(columns=_KEY_COLUMNS)
    key_frame = key_frame.loc[key_frame.index.repeat(counts)].reset_index(drop=True)
    for name, values in columns.items():
        key_frame[name] = pd.Series(values, dtype=None if values else object)
    return key_frame


def report_data(records: list[Record], left_out_runs: dict | None = None) -> ReportData:
    """Return the report frames of typed records (chosen by bench.results.query.select); empty -> clear error.

    left_out_runs: {(cell_id, gpu_memory_gb): partial runs the selection left out} (Selection.left_out_runs),
    a `left_out_runs` column of the rows' cells.
    """
    if not records:
        raise BenchInputError("the result store is empty: run `bench run` first (or pass a store that has results)")
    rows, envs = [], []
    sample_keys, sample_counts, sample_vals = [], [], []
    tele_keys, tele_counts, tele_vals = [], [], []
    for rec in records:
        row = record_row(rec)
        rows.append(row)
        envs.append(rec.environment)
        if rec.status != "ok":
            continue
        keys = (row["cell_id"], row["gpu_memory_gb"], row["trial"], row["store"], row["run_key"])
        vals = _sample_values(rec.samples or ())
        if vals:
            sample_keys.append(keys)
            sample_counts.append(len(vals))
            sample_vals.extend(vals)
        tele = [tuple([t["t_s"]] + [_number(t.get(k)) for k in TELEMETRY_COLUMNS])
                for t in rec.telemetry
                if isinstance(t, dict) and _number(t.get("t_s")) is not None]
        if tele:
            tele_keys.append(keys)
            tele_counts.append(len(tele))
            tele_vals.extend(tele)
    frame = pd.DataFrame(rows)
    _add_left_out_runs(frame, left_out_runs)
    ins, outs, ttfts, e2els = (list(c) for c in zip(*sample_vals, strict=True)) if sample_vals else ([], [], [], [])
    samples = _keyed_frame(sample_keys, sample_counts, {"in": ins, "out": outs, "ttft_ms": ttfts})
    samples["tpot_ms"] = _tpot_ms(samples, ttfts, e2els, outs)
    columns = [list(c) for c in zip(*tele_vals, strict=True)] if tele_vals else [[] for _ in range(1 + len(TELEMETRY_COLUMNS))]
    telemetry = _keyed_frame(tele_keys, tele_counts, dict(zip(("t_s",) + TELEMETRY_COLUMNS, columns, strict=True)))
    data = ReportData(frame, samples, telemetry, envs)
    _check(data)
    return data


def _add_left_out_runs(frame: pd.DataFrame, left_out_runs: dict | None) -> None:
    """Add the `left_out_runs` column of the rows' cells (none when no row left a partial run out)."""
    if left_out_runs:
        frame["left_out_runs"] = [left_out_runs.get((c, cap), 0) for c, cap in zip(frame.cell_id, frame.gpu_memory_gb,
                                                                                  strict=True)]


def _tpot_ms(samples: pd.DataFrame, ttfts, e2els, outs) -> pd.Series:
    """Return TPOT per sample (bench.metrics.time_per_output_token), NaN for outputs of one token."""
    if not len(ttfts):
        return pd.Series([], dtype=object)
    ttft = np.array(ttfts, dtype=float)  # None -> NaN
    e2el = np.array(e2els, dtype=float)
    out = np.array(outs, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(~np.isnan(ttft) & ~np.isnan(e2el) & (out > 1), time_per_output_token(e2el, ttft, out), np.nan)
    return pd.Series(tpot, index=samples.index)


def _check(data: ReportData, differing: list[str] | None = None) -> None:
    f = data.frame
    f["environment"] = environment_labels(f, differing)
    for workload, g in f.groupby("workload", sort=False):
        labels = sorted(set(g.environment) - {""})
        if len(labels) > 1:
            data.warnings.append(
                f"workload {workload!r} mixes environments ({'; '.join(labels)}): results are not directly "
                "comparable; the environment note under the tables lists every value, and a table whose rows ran in "
                "different environments (or a row that pools several) shows an environment column"
            )


def differing_environment(frame: pd.DataFrame) -> list[str]:
    """Return the environment fields whose values differ across the frame's rows."""
    return [k for k in ENV_FIELDS if k in frame and frame[k].astype(str).nunique() > 1]


def source_label(records: list[Record]) -> str:
    """Return a label of where records come from: machine (host, GPU), commit(s) and date(s) of their run contexts.

    Stores are named by this, not by file name: two `default.jsonl` from different machines
    get different labels, e.g. 'gpu-7 (NVIDIA H200) · 1a2b3c4 · 2026-12-01 10:02'.
    """
    return _source_label([r.environment for r in records], {r.context.run_id: r.context for r in records}.values())


def _source_label(environments, contexts) -> str:
    from bench.results.records import utc_minute

    envs = [e for e in environments if e]
    hosts = sorted({str(e.get("host")) for e in envs if e.get("host")})
    gpus = sorted({str(e.get("gpu_name")) for e in envs if e.get("gpu_name")})
    machine = ", ".join(hosts) or "unknown host"
    if gpus:
        machine += f" ({', '.join(gpus)})"
    commits = sorted({(c.commit or "commit?")[:7] + ("+dirty" if c.dirty else "") for c in contexts})
    starts = sorted(c.started_at for c in contexts if c.started_at is not None)
    dates = [utc_minute(t) for t in (starts[0], starts[-1])] if starts else []
    when = "undated" if not dates else dates[0] if dates[0] == dates[1] else f"{dates[0]} to {dates[1]}"
    return f"{machine} · {', '.join(commits) or 'commit?'} · {when}"


def environment_labels(frame: pd.DataFrame, differing: list[str] | None = None) -> pd.Series:
    """Return per row a short label of the environment fields that differ across the frame ('' if none).

    differing: those fields, when the frame is one part of a larger one (bench.report.build's history).
    """
    if differing is None:
        differing = differing_environment(frame)
    if not differing:
        return pd.Series("", index=frame.index)
    parts = [frame[k].map(lambda v, k=k: "" if v is None or v != v else f"{ENV_SHORT[k]}{v}") for k in differing]
    out = parts[0]
    for p in parts[1:]:
        out = out.str.cat(p, sep=", ")
    return out.str.replace(r"(, )+", ", ", regex=True).str.strip(", ")


def table_report_data(table, indices: list[int], per_request: bool = True,
                      differing: list[str] | None = None, left_out_runs: dict | None = None) -> ReportData:
    """Return report_data's frames for these records of a bench.results.query.Table (read as columns).

    The same frames as report_data(records) of the same records, except `environments`: each distinct
    environment once (every reader of it takes the set). per_request=False: samples and telemetry left
    empty (a history table needs neither). differing: see environment_labels. left_out_runs: as report_data's.
    """
    if not indices:
        raise BenchInputError("the result store is empty: run `bench run` first (or pass a store that has results)")
    frame = table.frame(indices)
    _add_left_out_runs(frame, left_out_runs)
    k = table.keys
    stores, positions = k.store.to_numpy()[indices], k.pos.to_numpy()[indices]
    rank = {}  # per store: record position -> its place among `indices`
    for s in np.unique(stores):
        mine = stores == s
        rank[s] = np.full(int(positions[mine].max()) + 1, -1, dtype=np.int64)
        rank[s][positions[mine]] = np.flatnonzero(mine)

    def read(kind: str, columns: list[str]) -> pd.DataFrame:
        parts = table.per_request(kind, indices)
        if not parts:
            return _keyed_frame([], [], {c: [] for c in columns})
        f = pd.concat(parts.values(), ignore_index=True) if len(parts) > 1 else next(iter(parts.values()))
        ranks = np.concatenate([rank[s][p.pos.to_numpy()] for s, p in parts.items()])
        order = None  # rows in the order of `indices` (a stable sort by rank), sorted already in the common case
        if len(ranks) > 1 and (ranks[1:] < ranks[:-1]).any():
            order = np.argsort(ranks, kind="stable")
            ranks = ranks[order]
        keys = frame[_KEY_COLUMNS].iloc[ranks].reset_index(drop=True)
        for c in columns:
            values = f[c].to_numpy()
            keys[c] = (values if order is None else values[order]) if len(f) else pd.Series([], dtype=object)
        return keys

    if per_request:
        samples = read("samples", ["in", "out", "ttft_ms", "e2el_ms"])
        samples["tpot_ms"] = _tpot_ms(samples, samples.ttft_ms.to_numpy(), samples.e2el_ms.to_numpy(), samples.out.to_numpy())
        samples = samples.drop(columns="e2el_ms")
        telemetry = read("telemetry", ["t_s", *TELEMETRY_COLUMNS])
    else:
        samples = _keyed_frame([], [], {c: [] for c in ("in", "out", "ttft_ms", "tpot_ms")})
        telemetry = _keyed_frame([], [], {c: [] for c in ("t_s", *TELEMETRY_COLUMNS)})
    data = ReportData(frame, samples, telemetry, table.distinct("environment_json", indices, ordered=False))
    _check(data, differing)
    return data


def table_source_label(table, indices: list[int]) -> str:
    """Return source_label of these records of a bench.results.query.Table."""
    from bench.results.records import RunContext

    envs = table.distinct("environment_json", indices, ordered=False)
    contexts = [RunContext.from_json(c) for c in table.distinct("context_json", indices, ordered=False)]
    return _source_label(envs, {c.run_id: c for c in contexts}.values())
