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

import json
import operator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.errors import BenchInputError
from bench.metrics import time_per_output_token
from bench.results.records import EXTRA_METRICS, Record
from bench.spec import identity_options

# Environment fields shown under tables and, when they differ inside one table, in a column.
ENV_FIELDS = ("gpu_name", "gpu_count", "driver", "cuda", "torch", "transformers", "tensorrt_llm", "torchao", "cpu")
ENV_SHORT = {"gpu_name": "", "gpu_count": "x", "driver": "driver ", "cuda": "CUDA ", "torch": "torch ",
             "transformers": "transformers ", "tensorrt_llm": "trtllm ", "torchao": "torchao ", "cpu": ""}


@dataclass
class ReportData:
    frame: pd.DataFrame                    # one row per record
    samples: pd.DataFrame                  # one row per request of ok records: cell keys, in, out, ttft_ms, tpot_ms
    telemetry: pd.DataFrame                # one row per telemetry sample: cell keys, t_s, power_w, memory_gb, sm_mhz, util_pct, temp_c
    environments: list[dict]               # each record's environment
    warnings: list[str] = field(default_factory=list)


def length_label(workload: dict) -> str:
    """Return the length setting of a workload spec in words, e.g. 'in 128 / out 128 tokens'."""
    if not workload:
        return ""
    if workload.get("input_len") is not None or workload.get("output_len") is not None:
        return f"in {workload.get('input_len')} / out {workload.get('output_len')} tokens"
    parts = []
    if workload.get("max_input_len") is not None:
        parts.append(f"in <= {workload['max_input_len']}")
    if workload.get("max_output_len") is not None:
        parts.append(f"out <= {workload['max_output_len']}")
    if workload.get("num_requests") is not None:
        parts.append(f"{workload['num_requests']} requests")
    return ", ".join(parts)


def length_limits(workload: dict) -> tuple[int | None, int | None, bool]:
    """Return (input limit, output limit, exact) of a workload spec, in tokens.

    A synthetic workload of fixed lengths gives its lengths, exact=True; a uniform one its
    maxima. Otherwise the input limit is max_input_len and the output limit the fixed
    output_len or the max_output_len cap (None when only max_total_len bounds it).
    """
    if not workload:
        return None, None, False
    if workload.get("source") == "synthetic":
        exact = workload.get("length_dist", "fixed") == "fixed"
        return (workload.get("input_max") or workload.get("input_len"),
                workload.get("output_max") or workload.get("output_len"), exact)
    return workload.get("max_input_len"), workload.get("output_len") or workload.get("max_output_len"), False


def _number(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _row(rec: Record) -> dict:
    cell = rec.cell
    env = rec.environment
    ctx = rec.context
    wl = cell.get("workload") or {}
    row = {
        "store": rec.store,
        "cell_id": rec.cell_id,
        "run_id": ctx.run_id,
        "run": rec.run,
        "run_key": f"{ctx.run_id}#{rec.run}",
        "run_started_at": ctx.started_at,
        "run_label": ctx.label,
        "env_digest": ctx.env_digest,
        "trial": rec.trial,
        "status": rec.status,
        "backend": cell.get("backend"),
        "model": cell.get("model"),
        "precision": cell.get("precision"),
        "max_batch_size": cell.get("max_batch_size"),
        "device": cell.get("device"),
        "workload": wl.get("name"),
        "length": length_label(wl),
        **dict(zip(("input_len_limit", "output_len_limit", "lengths_exact"), length_limits(wl), strict=True)),
        "options": json.dumps(identity_options(cell.get("backend"), cell.get("options", {})), sort_keys=True),
        "all_options": json.dumps(cell.get("options", {}), sort_keys=True),
        "gpu_memory_gb": _number(ctx.gpu_memory_gb),
        "planned_runs": ctx.runs,  # what the invocation asked for: a row with fewer complete runs is partial
        "planned_trials": ctx.trials,
        "commit": ctx.commit,
        "dirty": ctx.dirty,
        "error": rec.error,
        "started_at": rec.started_at,
        "schema_version": rec.schema_version,
    }
    for k in ENV_FIELDS:
        row[k] = env.get(k)
    for k, v in (rec.metrics or {}).items():
        if isinstance(v, (int, float)) or v is None:
            row[k] = v
    done = _number((rec.metrics or {}).get("completed"))
    if done:  # the pass's mean lengths, from its token totals
        for side in ("input", "output"):
            total = _number(rec.metrics.get(f"total_{side}_tokens"))
            row[f"mean_{side}_len"] = None if total is None else total / done
    extra = rec.extra
    # Why the pass's machine was busy (bench.machine.host_load), '; '-joined; None when it was not.
    row["busy"] = "; ".join((extra.get("host_load") or {}).get("busy") or ()) or None
    # What the backend found out about the pass (a server that refused length control, counted prompts otherwise).
    row["notes"] = "\n".join(extra.get("notes") or ()) or None
    # Which tuned Triton kernels the pass ran (hf compiled cells): runs that differ here ran different kernels.
    row["tuned_digest"] = rec.tuned_digest
    row["tuning_build"] = rec.tuning_build  # which cold build of --tuning-builds (None: not one)
    for k in EXTRA_METRICS:
        if row.get(k) is None and _number(extra.get(k)) is not None:
            row[k] = extra[k]
    return row


# Keys that identify a cell on the page: cell_id alone is not enough when the same cell ran
# under different GPU memory caps (the cap is a run setting, not part of the cell).
CELL_KEYS = ["cell_id", "gpu_memory_gb"]


# Per-request fields read from each sample, in this order (itemgetter: one C call per sample).
_SAMPLE_FIELDS = ("error", "in", "out", "ttft_ms", "e2el_ms")
_get_sample = operator.itemgetter(*_SAMPLE_FIELDS)
_KEY_COLUMNS = ["cell_id", "gpu_memory_gb", "trial", "store", "run_key"]


# Telemetry fields drawn over a pass (bench.machine.telemetry.Sampler's timeline).
TELEMETRY_COLUMNS = ("power_w", "memory_gb", "sm_mhz", "util_pct", "temp_c")


def _telemetry_rows(telemetry) -> list:
    """Return a pass's telemetry as one dict per sample: the Sampler stores one list per field, older
    and synthetic records a list of samples."""
    if isinstance(telemetry, dict):
        n = len(telemetry.get("t_s") or ())
        return [{k: (v[i] if isinstance(v, list) and i < len(v) else None) for k, v in telemetry.items()} for i in range(n)]
    return list(telemetry or ())


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
        row = _row(rec)
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
                for t in _telemetry_rows(rec.extra.get("telemetry"))
                if isinstance(t, dict) and _number(t.get("t_s")) is not None]
        if tele:
            tele_keys.append(keys)
            tele_counts.append(len(tele))
            tele_vals.extend(tele)
    frame = pd.DataFrame(rows)
    if left_out_runs:
        frame["left_out_runs"] = [left_out_runs.get((c, cap), 0) for c, cap in zip(frame.cell_id, frame.gpu_memory_gb,
                                                                                  strict=True)]
    ins, outs, ttfts, e2els = (list(c) for c in zip(*sample_vals, strict=True)) if sample_vals else ([], [], [], [])
    samples = _keyed_frame(sample_keys, sample_counts, {"in": ins, "out": outs, "ttft_ms": ttfts})
    samples["tpot_ms"] = _tpot_ms(samples, ttfts, e2els, outs)
    columns = [list(c) for c in zip(*tele_vals, strict=True)] if tele_vals else [[] for _ in range(1 + len(TELEMETRY_COLUMNS))]
    telemetry = _keyed_frame(tele_keys, tele_counts, dict(zip(("t_s",) + TELEMETRY_COLUMNS, columns, strict=True)))
    data = ReportData(frame, samples, telemetry, envs)
    _check(data)
    return data


def _tpot_ms(samples: pd.DataFrame, ttfts: list, e2els: list, outs: list) -> pd.Series:
    """Return TPOT per sample (bench.metrics.time_per_output_token), NaN for outputs of one token."""
    if not ttfts:
        return pd.Series([], dtype=object)
    ttft = np.array(ttfts, dtype=float)  # None -> NaN
    e2el = np.array(e2els, dtype=float)
    out = np.array(outs, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(~np.isnan(ttft) & ~np.isnan(e2el) & (out > 1), time_per_output_token(e2el, ttft, out), np.nan)
    return pd.Series(tpot, index=samples.index)


def _check(data: ReportData) -> None:
    f = data.frame
    f["environment"] = environment_labels(f)
    for workload, g in f.groupby("workload", sort=False):
        labels = sorted(set(g.environment) - {""})
        if len(labels) > 1:
            data.warnings.append(
                f"workload {workload!r} mixes environments ({'; '.join(labels)}): results are not directly "
                "comparable; the tables show an environment column"
            )


def source_label(records: list[Record]) -> str:
    """Return a label of where records come from: machine (host, GPU), commit(s) and date(s) of their run contexts.

    Stores are named by this, not by file name: two `default.jsonl` from different machines
    get different labels, e.g. 'gpu-7 (NVIDIA H200) · 1a2b3c4 · 2026-12-01 10:02'.
    """
    import time

    envs = [r.environment for r in records if r.environment]
    hosts = sorted({str(e.get("host")) for e in envs if e.get("host")})
    gpus = sorted({str(e.get("gpu_name")) for e in envs if e.get("gpu_name")})
    machine = ", ".join(hosts) or "unknown host"
    if gpus:
        machine += f" ({', '.join(gpus)})"
    contexts = {r.context.run_id: r.context for r in records}.values()
    commits = sorted({(c.commit or "commit?")[:7] + ("+dirty" if c.dirty else "") for c in contexts})
    starts = sorted(c.started_at for c in contexts if c.started_at is not None)
    dates = [time.strftime("%Y-%m-%d %H:%M", time.gmtime(t)) for t in (starts[0], starts[-1])] if starts else []
    when = "undated" if not dates else dates[0] if dates[0] == dates[1] else f"{dates[0]} to {dates[1]}"
    return f"{machine} · {', '.join(commits) or 'commit?'} · {when}"


def environment_labels(frame: pd.DataFrame) -> pd.Series:
    """Return per row a short label of the environment fields that differ across the frame ('' if none)."""
    differing = [k for k in ENV_FIELDS if k in frame and frame[k].astype(str).nunique() > 1]
    if not differing:
        return pd.Series("", index=frame.index)
    parts = [frame[k].map(lambda v, k=k: "" if v is None or v != v else f"{ENV_SHORT[k]}{v}") for k in differing]
    out = parts[0]
    for p in parts[1:]:
        out = out.str.cat(p, sep=", ")
    return out.str.replace(r"(, )+", ", ", regex=True).str.strip(", ")
