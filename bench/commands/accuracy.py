"""`bench accuracy`: every cell against the matrix's baseline cell of the same model, on the same prompts.

Each baseline's cells run in one session process (bench.accuracy.session): the baseline is loaded
once, measures its own figures and the model's noise floor first, then each cell is loaded,
measured against it and closed. Per cell it prints and stores (one `accuracy`
record through bench.results.records.new_record, with the invocation's run context) the
teacher-forced parity (KL mean / p99, top-1 with its Wilson lower bound, top-5, perplexities),
generation parity (identical first k tokens, ROUGE-1/2/L), determinism (in the process, and
against the previous process's record of the same cell) and the verdict with its thresholds
(bench.accuracy.verdict). `accuracy_matrix` is the library entry (`bench study` calls it).

Resume: a cell whose store already holds an ok record of the same baseline and settings is
not measured again unless --redo (a second process for the reproduction check is --redo).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix
from bench.errors import BenchInputError

# Backends whose logits this harness reads: hf in process (the loaded torch model). A baseline must be one.
LOGIT_BACKENDS = ("hf",)
# Cells read through their own API: trtllm's context logits (bench/accuracy/trtllm.py, written against 1.2.1, not
# run on hardware) and a served model's prompt logprobs (openai; generation parity only where it gives none).
CELL_BACKENDS = ("trtllm", "openai")
# What the session measures: a stored record is reused only if these match.
MEASURE_KEYS = ("prompts", "answer_tokens", "generate_tokens", "prefix_k", "reference")


def register(sub) -> None:
    p = sub.add_parser("accuracy", help="KL, top-1, perplexity, ROUGE and a verdict of each cell against the "
                                        "matrix's baseline cell of the same model, on the same prompts")
    add_matrix_arguments(p, "measure only matching cells (their baselines are measured too), e.g. precision=int8wo")
    p.add_argument("--store", help="accuracy record store (default results/<matrix>-accuracy.jsonl)")
    p.add_argument("--prompts", type=int, help="prompts per cell (overrides [accuracy] prompts)")
    p.add_argument("--answer-tokens", type=int, help="reference-answer tokens scored per prompt")
    p.add_argument("--generate-tokens", type=int, help="greedy tokens per prompt for generation parity")
    p.add_argument("--redo", action="store_true", help="measure again what the store already holds (a second process)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per cell before its session is killed")
    p.set_defaults(func=cmd_accuracy, requests=None, trials=None)


def settings_with(spec, prompts=None, answer_tokens=None, generate_tokens=None):
    """Return the matrix's AccuracySpec with the command line's overrides, checked."""
    changes = {k: v for k, v in (("prompts", prompts), ("answer_tokens", answer_tokens),
                                 ("generate_tokens", generate_tokens)) if v is not None}
    if "generate_tokens" in changes and spec.prefix_k > changes["generate_tokens"]:
        changes["prefix_k"] = changes["generate_tokens"]
    out = replace(spec, **changes)
    out.check()
    return out


def cmd_accuracy(args) -> int:
    from bench.spec.matrix import load_matrix

    matrix = load_selected_matrix(args)
    full = load_matrix(args.matrix) if args.matrix else load_matrix(args.preset or "default", preset=True)
    settings = settings_with(matrix.accuracy, args.prompts, args.answer_tokens, args.generate_tokens)
    store = Path(args.store) if args.store else Path("results") / f"{matrix.name}-accuracy.jsonl"
    _, failed = accuracy_matrix(matrix, full.cells, settings, store, redo=args.redo, timeout=args.timeout)
    return 1 if failed else 0


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
                key = _measure_key(settings, b)
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


def _measure_key(settings, base) -> dict:
    return {"baseline": base.cell_id if base is not None else None,
            **{k: getattr(settings, k) for k in MEASURE_KEYS}}


def accuracy_group(base, todo: list, matrix, settings, context, floor: dict | None, timeout: float) -> list:
    """Return one Accuracy record per entry of todo [(cell, its baseline or None, key, earlier records)], after one
    session that loads `base` once (None as a cell's baseline: the baseline's own figures, its noise floor)."""
    from bench.accuracy.figures import differing_tokens
    from bench.accuracy.verdict import judge
    from bench.machine.failures import classify_exit
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
    result_file.unlink(missing_ok=True)
    root = str(Path(__file__).resolve().parents[2])
    # No memory cap: a session holds two models (and the baseline's an fp32 twin) to compare numerics, not to
    # measure what fits; the matrix's gpu_memory_gb is for the speed run (docs/guide/accuracy.md).
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    env.pop(ENV_VAR, None)
    started = time.time()
    session: dict = {}
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.run([sys.executable, "-m", "bench.accuracy.session", str(job_file), str(result_file)],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        if proc.returncode != 0 or not result_file.is_file():
            tail = log_path.read_bytes()[-3000:].decode(errors="replace")
            session = {"status": classify_exit(proc.returncode, tail),
                       "error": f"accuracy session exited with status {proc.returncode}; log {log_path}:\n{tail}"}
        else:
            session = json.loads(result_file.read_text())
    except subprocess.TimeoutExpired:
        session = {"status": "timeout", "error": f"accuracy session ran past {timeout:.0f} s; log {log_path}"}
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


def accuracy_text(cell, record) -> str:
    """Return the printed summary of one Accuracy record."""
    acc, m = record.accuracy, record.metrics or {}
    p = acc["parity"]
    ref = {"dataset": "the dataset's reference answers",
           "baseline-greedy": "the baseline's own greedy continuation (no reference answers in this workload)"}[acc["reference"]]
    base = acc.get("baseline")
    what = (f"{p['tokens']} teacher-forced tokens over {acc['sequences']} prompts" if p else
            f"{acc['prompts']} prompts, {acc.get('parity_reason')}")
    if p and acc.get("mode") == "logprobs-top-k":
        what += f" ({acc.get('parity_reason')})"
    if acc.get("logits_source"):
        what += f"; logits: {acc['logits_source']}"
    head = (f"## {cell.label}" + (f" vs baseline {_label(base)}" if base else " (baseline: noise floor)")
            + f"\n\n{what} ({acc.get('prompts_note')}); reference: {ref}")
    lines = [head]
    if base is None:
        lines.append(f"perplexity on the reference {p['ppl_base']:.3f}")
        for f in (acc.get("floor") or {}).values():
            lines.append(f"noise floor, {f['what']}: KL mean {f['kl_mean']:.3g} (p99 {f['kl_p99']:.3g}), top-1 "
                         f"{100 * f['top1']:.1f} % (lower {100 * f['top1_lower']:.1f} %), top-5 {_percent(f['top5'])}")
    else:
        if p:
            ratio = f"; {m['kl_floor_ratio']:.1f}x the floor" if "kl_floor_ratio" in m else "; no floor"
            top_ratio = f", {m['top1_floor_ratio']:.2f}x the floor's" if m.get("top1_floor_ratio") else ""
            lines.append(f"KL mean {p['kl_mean']:.3g} (p99 {p['kl_p99']:.3g}{ratio}) · top-1 {100 * p['top1']:.1f} % "
                         f"(95 % lower bound {100 * p['top1_lower']:.1f} %{top_ratio}) · base top-1 in cell top-5 "
                         f"{_percent(p['top5'])} · PPL {p['ppl_base']:.3f} -> {p['ppl_cell']:.3f} "
                         f"(delta {p['delta_ppl']:+.3f})")
        g = acc["generation"]
        rouge = ("ROUGE-1/2/L vs baseline " + "/".join(f"{g['rouge_vs_base'][k]:.1f}" for k in ("rouge1", "rouge2", "rougeL"))
                 + f" · ROUGE-1 vs reference {g['rouge_vs_reference']['rouge1']:.1f} (baseline "
                 f"{g['base_rouge_vs_reference']['rouge1']:.1f}, {g['rouge1_delta_points']:+.2f} points)"
                 if g.get("rouge_vs_base") else f"ROUGE not computed: {g.get('rouge_error')}")
        lines.append(f"generation: identical first {g['prefix_k']} tokens {100 * g['identical_prefix_rate']:.0f} % of "
                     f"{g['prompts']} prompts · " + rouge)
    d = acc["determinism"]
    lines.append(f"determinism: {d['differing_tokens']} of {d['tokens']} greedy tokens differ between two passes in "
                 "one process" + (_across(acc["determinism_across_processes"]) if acc.get("determinism_across_processes") else ""))
    if acc.get("verdict"):
        from bench.accuracy.verdict import Verdict

        lines.append(Verdict(**acc["verdict"]).text())
    return "\n".join(lines) + "\n"


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _across(d: dict) -> str:
    return f"; {d['differing_tokens']} differ from the previous process's record ({d['previous_run_id']})"


def _label(cell: dict) -> str:
    return f"{cell['backend']}/{cell['precision']}/bs{cell['max_batch_size']}"
