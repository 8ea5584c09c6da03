"""One record -> one flat row of scalars: the columns reports and the columnar companion hold.

The one place a record's report row is made (`record_row`): the report's record frame
(bench.report.data) and the store's columnar companion (bench.results.columnar) both call it,
so a report read through the companion shows what one read from the JSON lines shows.
"""

from __future__ import annotations

import json

from bench.checks import is_finite_number
from bench.results.records import EXTRA_METRICS, HOST_PROBE, Record
from bench.spec.cells import identity_options

# Environment fields shown under tables and, when they differ inside one table, in a column.
ENV_FIELDS = ("gpu_name", "gpu_count", "driver", "cuda", "torch", "transformers", "tensorrt_llm", "torchao", "cpu")

# The row's fields that are not metrics (every other column of a row is a numeric metric).
ROW_FIELDS = (
    "store", "cell_id", "run_id", "run", "run_key", "run_started_at", "run_label", "env_digest", "trial", "status",
    "backend", "model", "precision", "max_batch_size", "device", "workload", "length", "input_len_limit",
    "output_len_limit", "lengths_exact", "options", "all_options", "gpu_memory_gb", "commit", "dirty", "error",
    "started_at", "schema_version", *ENV_FIELDS, "mean_input_len", "mean_output_len", "tuned_digest",
    "planned_runs", "planned_trials", "busy", "notes", "tuning_build",
)


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


def number(v):
    """Return v if it is a finite number (not a bool; bench.checks.is_finite_number), else None: a stored figure is
    untrusted input, and an inf count or an int no float holds is no figure."""
    return v if is_finite_number(v) else None


def record_host(rec: Record) -> str | None:
    """Return the host the record's worker ran on: its environment's, else its executor placement's (a worker that
    died before describing itself); None when neither is known. A worker process runs on one host."""
    env = rec.environment
    host = env.get("host")
    if host is None and isinstance(env.get("placement"), dict):
        host = env["placement"].get("host")
    return None if host is None else str(host)


def record_row(rec: Record) -> dict:
    """Return the report row of one record: cell, run context, environment fields, numeric metrics."""
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
        "gpu_memory_gb": number(ctx.gpu_memory_gb),
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
    done = number((rec.metrics or {}).get("completed"))
    if done:  # the pass's mean lengths, from its token totals
        for side in ("input", "output"):
            total = number(rec.metrics.get(f"total_{side}_tokens"))
            row[f"mean_{side}_len"] = None if total is None else total / done
    extra = rec.extra
    # Why the pass's machine was busy (bench.machine.host_load), '; '-joined; None when it was not.
    row["busy"] = "; ".join(rec.busy_reasons) or None
    # The host's speed in the pass's process (bench.machine.host_load.host_probe_times): a spread between runs' probes
    # names the host as the cause of theirs.
    row[HOST_PROBE] = rec.metric(HOST_PROBE)
    # What the backend found out about the pass (a server that refused length control, counted prompts otherwise).
    row["notes"] = "\n".join(rec.notes) or None
    # Which tuned Triton kernels the pass ran (hf compiled cells): runs that differ here ran different kernels.
    row["tuned_digest"] = rec.tuned_digest
    row["tuning_build"] = rec.tuning_build  # which cold build of --tuning-builds (None: not one)
    for k in EXTRA_METRICS:
        if row.get(k) is None and number(extra.get(k)) is not None:
            row[k] = extra[k]
    return row


# Telemetry fields drawn over a pass (bench.machine.telemetry.Sampler's timeline).
TELEMETRY_COLUMNS = ("power_w", "memory_gb", "sm_mhz", "util_pct", "temp_c")
