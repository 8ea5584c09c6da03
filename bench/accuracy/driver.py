"""The driver of `bench accuracy`: every selected cell against the matrix's baseline cell of the same model.

`accuracy_matrix` plans the pairs (`plan_accuracy`: every check before any work), reuses what the
store holds, runs one session process per baseline (bench.accuracy.session, started through
bench.execution.launcher: the baseline loaded once, its own figures and noise floor first, then
each cell measured against it) and builds one `accuracy` record per cell
(bench.results.records.new_record, with the invocation's run context): the session's figures,
the determinism across processes, and the verdict judged by bench.accuracy.verdict. Each
record's text is bench.accuracy.text's. `bench study` calls `accuracy_matrix` too.

Resume: a cell whose store already holds an ok record of the same baseline and settings is not
measured again unless redo (a second process for the reproduction check is --redo).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.errors import BenchInputError

SESSION = "bench.accuracy.session"  # the session process's module (python -m)
# Backends whose logits this harness reads: hf in process (the loaded torch model). A baseline must be one.
LOGIT_BACKENDS = ("hf",)
# Cells read through their own API: trtllm's context logits (bench/accuracy/trtllm.py, written against 1.2.1, not
# run on hardware) and a served model's prompt logprobs (openai; generation parity only where it gives none).
CELL_BACKENDS = ("trtllm", "openai")
# What the session measures: a stored record is reused only if these match.
MEASURE_KEYS = ("prompts", "answer_tokens", "generate_tokens", "prefix_k", "reference")


def settings_with(spec, prompts=None, answer_tokens=None, generate_tokens=None):
    """Return the matrix's AccuracySpec with the command line's overrides, checked."""
    changes = {k: v for k, v in (("prompts", prompts), ("answer_tokens", answer_tokens),
                                 ("generate_tokens", generate_tokens)) if v is not None}
    if "generate_tokens" in changes and spec.prefix_k > changes["generate_tokens"]:
        changes["prefix_k"] = changes["generate_tokens"]
    out = replace(spec, **changes)
    out.check()
    return out


def plan_accuracy(matrix, all_cells, settings) -> list[tuple]:
    """Return [(cell, its baseline cell or None for a baseline's own session)], baselines first; BenchInputError
    for a selection that cannot be measured (before any work)."""
    from bench.backends.declaration import tensor_parallel_size
    from bench.spec.baseline import accuracy_baseline
    from bench.workloads.references import has_answers

    if not matrix.cells:
        raise BenchInputError("no cell to measure: the selection (--only) matches nothing")
    pairs, baselines = [], {}
    for cell in matrix.cells:
        base = accuracy_baseline(cell, all_cells, matrix.baseline)
        if base.backend not in LOGIT_BACKENDS:
            raise BenchInputError(
                f"baseline {base.label}: bench accuracy reads the baseline's logits in process, from backends "
                f"{list(LOGIT_BACKENDS)}; make an hf cell of the same model the baseline (baseline = {{ backend = \"hf\", ... }})")
        if cell.backend not in LOGIT_BACKENDS + CELL_BACKENDS:
            raise BenchInputError(
                f"{cell.label}: backend {cell.backend!r} is not measured by bench accuracy (it measures "
                f"{list(LOGIT_BACKENDS + CELL_BACKENDS)}): narrow with --only backend=hf")
        for c in (cell, base):
            if c.backend in ("hf", "trtllm") and tensor_parallel_size(c.options_dict) > 1:
                raise BenchInputError(
                    f"{c.label}: tensor_parallel_size={tensor_parallel_size(c.options_dict)} runs as several ranks (torchrun, MPI); an "
                    "accuracy session loads its models in one process: measure a tensor_parallel_size = 1 cell of the "
                    "same precision (the numerics it checks are the same)")
        mine, theirs = cell.options_dict, base.options_dict
        for key, default in (("compile_tuning", "default"), ("freeze_weights", "off")):
            if mine.get(key, default) != theirs.get(key, default):
                raise BenchInputError(
                    f"{cell.label}: {key}={mine.get(key, default)!r} differs from its baseline's "
                    f"({theirs.get(key, default)!r}); Inductor's settings are process-wide, and the session loads both "
                    "models in one process: measure this cell against a baseline with the same setting")
        if settings.reference == "dataset" and not has_answers(cell.workload):
            raise BenchInputError(
                f"workload {cell.workload.name!r} (source {cell.workload.source!r}) has no reference answers and "
                "[accuracy] reference = 'dataset' allows no fallback: use a sharegpt workload, or set reference = "
                "'auto' (the baseline's own greedy continuation is then the reference)")
        baselines.setdefault(base.cell_id, base)
        if cell.cell_id != base.cell_id:
            pairs.append((cell, base))
    return [(b, None) for b in baselines.values()] + pairs


def accuracy_matrix(matrix, all_cells, settings, store_path: Path, *, redo: bool = False, timeout: float = 1800,
                    printer=print) -> tuple[list, int]:
    """Measure every selected cell against its baseline; return (the Accuracy records, how many failed).

    One session process per baseline: the baseline is loaded once and the cells that need measuring
    (not stored with the same baseline and settings, or all with redo) are measured in turn.
    """
    from bench.accuracy.text import accuracy_text
    from bench.results import query
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    plan = plan_accuracy(matrix, all_cells, settings)
    store_path = query.check_store_path(store_path, must_exist=False)
    stored = query.accuracies(query.load([store_path])) if store_path.exists() else []
    context = new_context("accuracy", matrix=matrix.name, baseline=matrix.baseline)

    def previous(cell, key):
        return [r for r in stored if r.cell_id == cell.cell_id and r.accuracy.get("key") == key and r.ok]

    records, failed = [], 0
    with ResultStore(store_path).writer() as store:
        for base in [c for c, b in plan if b is None]:
            group = [(base, None)] + [(c, b) for c, b in plan if b is not None and b.cell_id == base.cell_id]
            done: dict[str, object] = {}
            todo = []
            for cell, b in group:
                key = measure_key(settings, b)
                earlier = previous(cell, key)
                if earlier and not redo:
                    done[cell.cell_id] = max(earlier, key=lambda r: (r.context.started_at or 0, r.ended_at or 0))
                    printer(f"{cell.label}: stored {done[cell.cell_id].context.label} (--redo measures it again)")
                else:
                    todo.append((cell, b, key, earlier))
            floor = (done[base.cell_id].accuracy.get("floor") if base.cell_id in done else None)
            if todo:
                new = accuracy_group(base, todo, matrix, settings, context, floor, timeout * (1 + len(todo)))
                for rec in new:
                    store.append(rec)
                    stored.append(rec)
                    done[rec.cell_id] = rec
            for cell, _ in group:
                record = done[cell.cell_id]
                records.append(record)
                if not record.ok:
                    failed += 1
                    print(f"{cell.label}: {record.status}: {(record.error or '')[:2000]}", file=sys.stderr)
                else:
                    printer(accuracy_text(cell, record))
    print(f"accuracy records: {store_path}", file=sys.stderr)
    return records, failed


def measure_key(settings, base) -> dict:
    """Return what a stored record must match to be reused: its baseline and the session's settings."""
    return {"baseline": base.cell_id if base is not None else None,
            **{k: getattr(settings, k) for k in MEASURE_KEYS}}


def accuracy_group(base, todo: list, matrix, settings, context, floor: dict | None, timeout: float) -> list:
    """Return one Accuracy record per entry of todo [(cell, its baseline or None, key, earlier records)], after one
    session that loads `base` once (None as a cell's baseline: the baseline's own figures, its noise floor)."""
    from bench.accuracy.figures import differing_tokens
    from bench.accuracy.verdict import judge
    from bench.execution.launcher import run_session
    from bench.machine.memory_cap import ENV_VAR
    from bench.results.records import new_record
    from bench.workloads.references import answers_path, reference_answers
    from bench.workloads.workload import cached_workload

    spec = base.workload
    # More prompts than the speed run replays: the same sampling (seed, rules) continued; its first
    # num_requests prompts are the speed run's own, in its order (the record says so).
    if settings.prompts > spec.num_requests:
        spec = replace(spec, num_requests=settings.prompts)
    wl, wl_file = cached_workload(spec, Path("workloads/cache"))
    answers = None if settings.reference == "baseline-greedy" else reference_answers(spec, wl, wl_file)
    speed_n = base.workload.num_requests
    prompts_note = (f"the speed run's first {settings.prompts} prompts" if settings.prompts <= speed_n else
                    f"the speed run's {speed_n} prompts and the next {settings.prompts - speed_n} of the same sampling "
                    f"(seed {spec.seed})")
    out_dir = (Path("results") / "accuracy" / matrix.name / base.cell_id).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    job = {"baseline": base.to_dict(), "measure_baseline": any(b is None for _, b, _, _ in todo),
           "cells": [c.to_dict() for c, b, _, _ in todo if b is not None],
           "engines_dir": str(Path("engines").resolve()), "workload_file": str(Path(wl_file).resolve()),
           "answers_file": str(answers_path(wl_file).resolve()) if answers is not None else None,
           "settings": settings.to_dict()}
    job_file, result_file, log_path = out_dir / "job.json", out_dir / "session.json", out_dir / "session.log"
    job_file.write_text(json.dumps(job, indent=1))
    started = time.time()
    # No memory cap: a session holds two models (and the baseline's an fp32 twin) to compare numerics, not to
    # measure what fits; the matrix's gpu_memory_gb is for the speed run (docs/guide/accuracy.md).
    run = run_session([sys.executable, "-m", SESSION, str(job_file), str(result_file)], result_file, log_path,
                      timeout=timeout, what="accuracy session", drop_env=(ENV_VAR,))
    session = run.result if run.status == "ok" else {"status": run.status, "error": run.error}
    ended = time.time()
    if session.get("status") == "ok" and session.get("baseline") and session["baseline"]["status"] == "ok":
        floor = session["baseline"].get("floor")
    records = []
    for cell, b, key, earlier in todo:
        if session.get("status") != "ok":
            figures = {"status": session["status"], "error": session.get("error")}
        else:
            figures = session["baseline"] if b is None else session["cells"].get(cell.cell_id)
            figures = figures or {"status": "error", "error": "the session returned no figures for this cell"}
        acc: dict = {"key": key, "prompts_note": prompts_note, "baseline": b.to_dict() if b is not None else None,
                     "baseline_cell_id": base.cell_id, "settings": settings.to_dict(), "log": str(log_path)}
        outcome = {"status": figures["status"], "metrics": None, "error": figures.get("error"), "started_at": started,
                   "ended_at": ended}
        if figures["status"] == "ok":
            acc.update({k: figures.get(k) for k in ("reference", "prompts", "sequences", "reference_digest", "parity",
                                                    "floor", "generation", "determinism", "greedy", "greedy_digest",
                                                    "load_s", "measure_s", "random_weights")})
            # "logits": full distributions; "logprobs-top-k": a server's prompt logprobs (KL a lower bound);
            # "generation": generation parity only. parity_reason says why, parity_method how.
            acc["mode"] = figures.get("mode", "logits")
            for k in ("parity_reason", "parity_method", "served_model", "logits_source", "generation_compared"):
                if figures.get(k):
                    acc[k] = figures[k]
            prior = [r for r in earlier if r.accuracy.get("greedy") is not None]
            if prior:  # reproduction across processes: the latest earlier record of the same cell and settings
                last = max(prior, key=lambda r: (r.context.started_at or 0, r.ended_at or 0))
                acc["determinism_across_processes"] = {"previous_run_id": last.context.run_id,
                                                       **differing_tokens(last.accuracy["greedy"], figures["greedy"])}
            if b is not None:
                acc["floor_of_baseline"] = floor
                acc["verdict"] = judge(figures["parity"], floor, settings.thresholds(), figures.get("generation"),
                                       real_reference=figures["reference"] == "dataset",
                                       random_weights=figures["random_weights"]).to_dict()
            outcome["metrics"] = accuracy_metrics(acc)
        outcome["extra"] = {"accuracy": acc}
        records.append(new_record("accuracy", cell, outcome, context=context, workload=wl.summary(),
                                  environment=session.get("environment") or {}))
    return records


def accuracy_metrics(acc: dict) -> dict:
    """Return the record's flat metrics: the figures tables and figures read."""
    from bench.accuracy.verdict import floor_of

    p = acc["parity"]
    m = {k: p[k] for k in ("tokens", "kl_mean", "kl_p99", "top1", "top1_lower", "top5", "ppl_base", "ppl_cell",
                           "delta_ppl")} if p else {}
    floor_kl, floor_top1 = floor_of(acc.get("floor_of_baseline") or acc.get("floor"))
    if p and floor_kl and acc.get("floor_of_baseline") is not None:
        m["kl_floor_ratio"] = p["kl_mean"] / floor_kl
        m["top1_floor_ratio"] = p["top1"] / floor_top1 if floor_top1 else None
    g = acc.get("generation")
    if g:
        m["identical_prefix_rate"] = g["identical_prefix_rate"]
        if g.get("rouge_vs_base"):
            m.update(rouge1_vs_base=g["rouge_vs_base"]["rouge1"], rougeL_vs_base=g["rouge_vs_base"]["rougeL"],
                     rouge1_vs_reference=g["rouge_vs_reference"]["rouge1"], rouge1_delta_points=g["rouge1_delta_points"])
    m["determinism_differing_tokens"] = acc["determinism"]["differing_tokens"]
    return m
