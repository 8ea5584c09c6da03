"""Result records -> the frames reports draw from: one row per record, per-request samples,
telemetry timelines, and the warnings a reader must see (mixed schema versions, environments).

Records are parsed once here; tables and figures never touch raw records. The record frame has
the columns of `bench.store.load_frame` plus what reports need: the workload's length setting,
the GPU memory cap (`settings.gpu_memory_gb`), per-record environment fields and a short
environment label, and `tokens_per_joule` / `sol_pct` when a record carries them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from bench import SCHEMA_VERSION
from bench.errors import BenchInputError

# Environment fields shown under tables and, when they differ inside one table, in a column.
ENV_FIELDS = ("gpu_name", "gpu_count", "driver", "cuda", "torch", "transformers", "tensorrt_llm", "torchao", "cpu")
ENV_SHORT = {"gpu_name": "", "gpu_count": "x", "driver": "driver ", "cuda": "CUDA ", "torch": "torch ",
             "transformers": "transformers ", "tensorrt_llm": "trtllm ", "torchao": "torchao ", "cpu": ""}
# Figures a backend or another report may put in `extra` rather than `metrics`.
EXTRA_METRICS = ("tokens_per_joule", "sol_pct")


@dataclass
class ReportData:
    frame: pd.DataFrame                    # one row per record
    samples: pd.DataFrame                  # one row per request of ok records: cell keys, in, out, ttft_ms, tpot_ms
    telemetry: pd.DataFrame                # one row per telemetry sample: cell keys, t_s, power_w, memory_gb
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


def _number(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _row(rec: dict) -> dict:
    cell = rec.get("cell") or {}
    env = rec.get("environment") or {}
    settings = rec.get("settings") or {}
    wl = cell.get("workload") or {}
    row = {
        "store": rec.get("store"),
        "cell_id": rec["cell_id"],
        "trial": rec.get("trial", 0),
        "status": rec.get("status"),
        "backend": cell.get("backend"),
        "model": cell.get("model"),
        "precision": cell.get("precision"),
        "max_batch_size": cell.get("max_batch_size"),
        "device": cell.get("device"),
        "workload": wl.get("name"),
        "length": length_label(wl),
        "options": json.dumps(cell.get("options", {}), sort_keys=True),
        "gpu_memory_gb": _number(settings.get("gpu_memory_gb")),
        "commit": env.get("commit"),
        "dirty": env.get("dirty"),
        "error": rec.get("error"),
        "started_at": rec.get("started_at"),
        "schema_version": rec.get("schema_version"),
    }
    for k in ENV_FIELDS:
        row[k] = env.get(k)
    for k, v in (rec.get("metrics") or {}).items():
        if isinstance(v, (int, float)) or v is None:
            row[k] = v
    extra = rec.get("extra") or {}
    for k in EXTRA_METRICS:
        if row.get(k) is None and _number(extra.get(k)) is not None:
            row[k] = extra[k]
    return row


# Keys that identify a cell on the page: cell_id alone is not enough when the same cell ran
# under different GPU memory caps (the cap is a run setting, not part of the cell).
CELL_KEYS = ["cell_id", "gpu_memory_gb"]


def report_data(records: list[dict]) -> ReportData:
    """Return the report frames of records (from bench.store.load_records); empty -> clear error."""
    if not records:
        raise BenchInputError("the result store is empty: run `bench run` first (or pass a store that has results)")
    rows, sample_rows, tele_rows, envs = [], [], [], []
    for rec in records:
        row = _row(rec)
        rows.append(row)
        envs.append(rec.get("environment") or {})
        if rec.get("status") != "ok":
            continue
        keys = (row["cell_id"], row["gpu_memory_gb"], row["trial"], row["store"])
        for s in rec.get("samples") or ():
            if s.get("error") is not None:
                continue
            ttft, e2el, out = s.get("ttft_ms"), s.get("e2el_ms"), s.get("out")
            # TPOT as in bench.metrics: (E2E - TTFT) / (output_len - 1), only for outputs > 1 token.
            tpot = (e2el - ttft) / (out - 1) if ttft is not None and e2el is not None and out and out > 1 else None
            sample_rows.append((*keys, s.get("in"), out, ttft, tpot))
        for t in (rec.get("extra") or {}).get("telemetry") or ():
            if isinstance(t, dict) and _number(t.get("t_s")) is not None:
                tele_rows.append((*keys, t["t_s"], _number(t.get("power_w")), _number(t.get("memory_gb"))))
    frame = pd.DataFrame(rows)
    samples = pd.DataFrame(sample_rows, columns=["cell_id", "gpu_memory_gb", "trial", "store", "in", "out", "ttft_ms", "tpot_ms"])
    telemetry = pd.DataFrame(tele_rows, columns=["cell_id", "gpu_memory_gb", "trial", "store", "t_s", "power_w", "memory_gb"])
    data = ReportData(frame, samples, telemetry, envs)
    _check(data)
    return data


def _check(data: ReportData) -> None:
    f = data.frame
    versions = sorted({v for v in f.schema_version.dropna().unique()})
    if len(versions) > 1:
        data.warnings.append(
            f"the stores mix result schema versions {', '.join(str(int(v)) for v in versions)} "
            f"(this harness writes {SCHEMA_VERSION}): older records may lack fields, and their cells never "
            "match newer ones (the version is part of cell_id); re-run them to compare like with like"
        )
    f["environment"] = environment_labels(f)
    for workload, g in f.groupby("workload", sort=False):
        labels = sorted(set(g.environment) - {""})
        if len(labels) > 1:
            data.warnings.append(
                f"workload {workload!r} mixes environments ({'; '.join(labels)}): results are not directly "
                "comparable; the tables show an environment column"
            )


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
