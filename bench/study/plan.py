"""The plan of a study: what each step of `bench study` covers, all of it checked before the first step runs.

The matrix file's [study] table says what the OOM search, the profile and the accuracy step
cover (docs/guide/reports.md):

    [study.oom]
    only = "cache=dynamic,precision=bf16"     # which configurations (as --only)
    strategy = "bisect"                        # grow | bisect
    confirm = false                            # re-probe the largest fit
    decode_steps = 4
    searches = [{ lengths = "1024x1024", lower = 6, upper = 8 }, ...]

    [study.profile]
    only = "max_batch_size=1,workload=w"       # which cells (as --only)
    decode_steps = 4
    warmup = 1

    [study.accuracy]
    only = "max_batch_size=1"                  # which cells (as --only); their baselines come with them
    parallel = 3                               # sessions at once (bench accuracy --parallel; default 1)

Every row of the speedup table gets a verdict: without [study.accuracy] (or without its `only`)
the accuracy step measures every non-baseline cell against its baseline, runtime-only
differences (compile, cache, decode loop, prefill_len, attention) included; `only` is how a user
leaves rows out, and those rows read "not measured". A matrix whose cells bench accuracy cannot
measure (e.g. the fake backend) has no accuracy step unless [study.accuracy] asks for one (then
the reason is an error before any step runs).

`study_plan` reads and checks it (`StudyPlan`), `step_commands` gives each step's equivalent
command line, and `dry_run_text` the plan with an estimate (`--dry-run`): per pass and per compile
(the warm-up) from stored records (bench.results.estimate), per hf worker start from the model
below (`worker_starts`), whose constants docs/guide/gpu-study.md dates and sources.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError, choices
from bench.files import user_path

STEPS = ("run", "oom", "profile", "accuracy", "report")

# The start of an hf worker process, which stored records leave out (docs/guide/gpu-study.md). Measured on the H200,
# 2026-12-02: a 7B-shape worker imported torch and transformers in 10.2 s and made its CUDA context in 0.3 s.
IMPORTS_S = 10.2
CUDA_INIT_S = 0.3
# From the launcher's start to the worker's main (a record's startup.spawn_s), on the 2-core CPU VM, 2026-12-06
# (docs/measurements/2026-12-06-cpu-worker-startup.md): a fork of the zygote 0.02-0.07 s, a fresh interpreter
# 0.06-0.09 s without the imports.
FORK_S = 0.05
EXEC_S = 0.1
OOM_KEYS = {"only", "strategy", "confirm", "decode_steps", "searches"}
SEARCH_KEYS = {"lengths", "lower", "upper"}
PROFILE_KEYS = {"only", "decode_steps", "warmup", "batches", "tool"}
ACCURACY_KEYS = {"only", "parallel"}


@dataclass(frozen=True)
class StudyPlan:
    """What each step of the study does, all of it checked."""

    matrix: object  # bench.spec.cells.Matrix
    oom_matrix: object | None  # the matrix narrowed to [study.oom].only
    oom: list  # bench.oom.driver.OomSettings, one per search
    profile_matrix: object | None
    profile: object | None  # bench.profiling.driver.ProfileSettings
    accuracy_matrix: object | None = None  # the matrix narrowed to [study.accuracy].only (None: no accuracy step)
    only: dict = field(default_factory=dict)  # [study.oom].only and [study.profile].only as given (for the command lines)
    accuracy_note: str | None = None  # why there is no accuracy step, when the matrix's cells cannot be measured
    accuracy_parallel: int = 1  # [study.accuracy].parallel: accuracy sessions at once


def _table(data: dict, key: str, allowed: set, where: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise BenchInputError(f"{where} must be a table")
    unknown = set(value) - allowed
    if unknown:
        raise BenchInputError(f"{where}: unknown key {sorted(unknown)[0]!r}; valid keys are {choices(allowed)}")
    return value


def _typed(table: dict, key: str, default, kind: type, where: str):
    """Return table[key] (or the default), checked to be of `kind`; BenchInputError naming the key otherwise."""
    value = table.get(key, default)
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise BenchInputError(f"{where} {key} must be {'true or false' if kind is bool else kind.__name__}, got {value!r}")
    return value


def study_plan(path: Path, matrix, check_devices: bool = True) -> StudyPlan:
    """Return the checked plan of the study the matrix file's [study] table describes; BenchInputError if bad."""
    from bench.oom.driver import OomSettings, parse_lengths, plan_searches
    from bench.profiling.driver import ProfileSettings, check_profilable
    from bench.spec.matrix import tomllib
    from bench.spec.narrow import narrow, parse_pairs

    data = tomllib.loads(path.read_text())
    study = data.get("study")
    if not isinstance(study, dict) or not study:
        raise BenchInputError(f"matrix {str(path)!r} has no [study] table: add [study.oom] and/or [study.profile] "
                              "(see `bench study --help` and docs/guide/reports.md), or use bench run / oom / profile")
    unknown = set(study) - {"oom", "profile", "accuracy"}
    if unknown:
        raise BenchInputError(f"[study]: unknown key {sorted(unknown)[0]!r}; valid keys are 'oom', 'profile', 'accuracy'")
    oom = _table(study, "oom", OOM_KEYS, "[study.oom]")
    prof = _table(study, "profile", PROFILE_KEYS, "[study.profile]")
    acc = _table(study, "accuracy", ACCURACY_KEYS, "[study.accuracy]")
    only = {"oom": oom.get("only"), "profile": prof.get("only"), "accuracy": acc.get("only")}
    oom_matrix, oom_settings = None, []
    if oom:
        oom_matrix = narrow(matrix, only=parse_pairs(oom.get("only"), "[study.oom] only"))
        searches = oom.get("searches") or [{}]
        if not isinstance(searches, list) or not all(isinstance(x, dict) for x in searches):
            raise BenchInputError("[study.oom] searches must be a list of tables: { lengths = \"1024x1024\", lower = 1, upper = 8 }")
        for i, search in enumerate(searches):
            bad = set(search) - SEARCH_KEYS
            if bad:
                raise BenchInputError(f"[study.oom] searches #{i + 1}: unknown key {sorted(bad)[0]!r}; valid keys are "
                                      f"{choices(SEARCH_KEYS)}")
            where = f"[study.oom] searches #{i + 1}:"
            lengths = _typed(search, "lengths", None, str, where)
            settings = OomSettings(lengths=tuple(parse_lengths(lengths)) if lengths else None,
                                   lower=_typed(search, "lower", None, int, where), upper=_typed(search, "upper", None, int, where),
                                   strategy=_typed(oom, "strategy", "grow", str, "[study.oom]"),
                                   decode_steps=_typed(oom, "decode_steps", 4, int, "[study.oom]"),
                                   confirm=_typed(oom, "confirm", True, bool, "[study.oom]"))
            plan_searches(oom_matrix, settings, check_devices=check_devices)  # validates lengths, bounds, cap
            oom_settings.append(settings)
    profile_matrix, profile_settings = None, None
    if prof:
        profile_matrix = narrow(matrix, only=parse_pairs(prof.get("only"), "[study.profile] only"))
        check_profilable(profile_matrix.cells)
        where = "[study.profile]"
        profile_settings = ProfileSettings(tool=_typed(prof, "tool", "torch", str, where),
                                           decode_steps=_typed(prof, "decode_steps", 4, int, where),
                                           batches=_typed(prof, "batches", 1, int, where),
                                           warmup=_typed(prof, "warmup", 1, int, where))
        profile_settings.check()
        if profile_settings.tool != "torch":
            raise BenchInputError("[study.profile] tool: the study profiles with torch.profiler; run `bench profile "
                                  "--tool nsys` on its own for nsys")
    from bench.accuracy.driver import check_parallel, plan_accuracy

    only_text = _typed(acc, "only", None, str, "[study.accuracy]")
    parallel = check_parallel(acc.get("parallel", 1), "[study.accuracy] parallel")
    accuracy_matrix = narrow(matrix, only=parse_pairs(only_text, "[study.accuracy] only")) if only_text else matrix
    accuracy_note = None
    try:
        plan_accuracy(accuracy_matrix, matrix.cells, matrix.accuracy)  # baselines, backends, references: checked now
    except BenchInputError as exc:
        if "accuracy" in study:
            raise
        accuracy_matrix, accuracy_note = None, f"no accuracy step: {exc}"
    return StudyPlan(matrix, oom_matrix, oom_settings, profile_matrix, profile_settings, accuracy_matrix, only,
                     accuracy_note, parallel)


def study_source(preset: str | None, matrix_file: str | None) -> Path:
    """Return the matrix file a study reads (--matrix FILE, or a preset's); BenchInputError if none or both."""
    from bench.spec.cells import PRESETS_DIR
    from bench.spec.matrix import list_presets

    if matrix_file and preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    if matrix_file:
        path = user_path(matrix_file, "matrix file")
        if not path.is_file():
            raise BenchInputError(f"matrix file {matrix_file!r} does not exist")
        return path
    if not preset:
        raise BenchInputError(f"bench study needs --preset or --matrix: a matrix with a [study] table (presets: "
                              f"{choices(list_presets())})")
    path = PRESETS_DIR / f"{preset}.toml"
    if not path.is_file():
        raise BenchInputError(f"unknown preset {preset!r}: valid presets are {choices(list_presets())}")
    return path


def step_commands(plan: StudyPlan, preset: str | None, matrix_file: str | None, requests: int | None = None,
                  runs: int | None = None) -> dict[str, str]:
    """Return each step's equivalent command line."""
    src = f"--preset {preset}" if preset else f"--matrix {matrix_file}"
    slice_ = (f" --requests {requests}" if requests else "") + (f" --runs {runs}" if runs else "")
    name = plan.matrix.name
    out = {"run": f"bench run {src}{slice_}" + (" --accuracy-capture" if plan.accuracy_matrix is not None else "")}
    for i, s in enumerate(plan.oom):
        lengths = ",".join(f"{a}x{b}" for a, b in s.lengths) if s.lengths else None
        out[f"oom{i}"] = (f"bench oom {src}" + (f" --only {plan.only['oom']}" if plan.only.get("oom") else "")
                          + (f" --lengths {lengths}" if lengths else "") + (f" --lower {s.lower}" if s.lower else "")
                          + (f" --upper {s.upper}" if s.upper else "") + f" --strategy {s.strategy}"
                          + ("" if s.confirm else " --no-confirm") + f" --decode-steps {s.decode_steps}")
    if plan.profile:
        p = plan.profile
        out["profile"] = (f"bench profile {src}{slice_}" + (f" --only {plan.only['profile']}" if plan.only.get("profile") else "")
                          + f" --decode-steps {p.decode_steps} --warmup {p.warmup} --batches {p.batches}")
    if plan.accuracy_matrix is not None:
        out["accuracy"] = (f"bench accuracy {src}{slice_}" + (f" --only {plan.only['accuracy']}" if plan.only.get("accuracy") else "")
                           + (f" --parallel {plan.accuracy_parallel}" if plan.accuracy_parallel != 1 else ""))
    out["report"] = (f"bench report results/{name}.jsonl results/{name}-oom.jsonl"
                     + (f" results/{name}-accuracy.jsonl" if plan.accuracy_matrix is not None else "")
                     + f" --profiles profiles/{name}.jsonl")
    return out


def worker_starts(forked: int, fresh: int, cuda: bool, zygote: bool = True, imported: bool = False) -> tuple[float, str]:
    """Return (seconds, words) for hf worker starts: `forked` from the zygote (its imports once per invocation, unless an
    earlier step of it paid them: `imported`; then a fork each), `fresh` (tensor-parallel ranks, or all with
    BENCH_ZYGOTE=0: the imports each); a CUDA context each on a GPU. The build, load, warm-up (compilation) and passes
    are the stored records' part."""
    context = CUDA_INIT_S if cuda else 0.0
    if not zygote:
        forked, fresh = 0, forked + fresh
    once = IMPORTS_S if forked and not imported else 0.0
    total = once + forked * (FORK_S + context) + fresh * (EXEC_S + IMPORTS_S + context)
    parts = []
    if forked:
        parts.append((f"imports {IMPORTS_S:g} s once (the zygote) + " if once else "")
                     + f"{forked} fork(s) x ({FORK_S:g} s + CUDA context {context:g} s)")
    if fresh:
        parts.append(f"{fresh} fresh process(es) x ({EXEC_S:g} s + imports {IMPORTS_S:g} s + CUDA context {context:g} s)")
    return total, f"hf worker starts, which the stored records leave out: {' + '.join(parts)} = {total:.0f} s"


def _run_starts(matrix, est) -> tuple[int, int, bool]:
    """Return (forked, fresh, on CUDA) worker starts of the hf build groups still to run: each group's most runs."""
    from bench.backends.declaration import tensor_parallel_size

    runs = {c.label: c.runs for c in est.cells}
    groups: dict[str, tuple[int, int]] = {}
    for cell in matrix.cells:
        if cell.backend == "hf" and runs.get(cell.label):
            key = cell.build_key()
            ranks = tensor_parallel_size(key.options)
            groups[key.key_hash] = (max(groups.get(key.key_hash, (0, ranks))[0], runs[cell.label]), ranks)
    cuda = any(c.device.startswith("cuda") for c in matrix.cells if c.backend == "hf")
    forked = sum(n for n, ranks in groups.values() if ranks == 1)
    fresh = sum(n * ranks for n, ranks in groups.values() if ranks > 1)
    return forked, fresh, cuda


def _capturable(plan: StudyPlan, stores: dict, extra: list) -> list:
    """Return the cells the study's run captures (bench.runner.matrix.captured_cells), less those whose stored runs all
    failed (out of memory under the cap, say): a capture follows a cell's trials, so those are measured in sessions."""
    from bench.results import query
    from bench.results.records import Measurement
    from bench.runner.matrix import captured_cells

    runs = (query.load([stores["run"]]) if stores["run"].exists() else []) + extra
    stored = {r.cell_id for r in runs if isinstance(r, Measurement)}
    ok = {r.cell_id for r in runs if isinstance(r, Measurement) and r.ok}
    return [c for c, _ in captured_cells(plan.matrix, plan.matrix.cells) if c.cell_id in ok or c.cell_id not in stored]


def profile_cells_left(plan: StudyPlan, records, redo: bool) -> list:
    """Return the profile cells a study profiles: every one with --redo, else those `records` (its profile store's)
    hold no whole profile of (bench.profiling.driver.profiled_cells): the one rule of the profile step and its
    dry-run estimate."""
    from bench.profiling.driver import profiled_cells

    done = set() if redo else profiled_cells(records, plan.profile)
    return [c for c in plan.profile_matrix.cells if c.cell_id not in done]


def dry_run_text(plan: StudyPlan, steps: list[str], stores: dict, history: list, commands: dict, redo: bool) -> str:
    """Return the study's plan: each step's command line, cells, searches and sessions, and the estimate."""
    from bench.execution.zygote import not_forkable
    from bench.oom.driver import plan_searches
    from bench.oom.search import probe_budget
    from bench.results import query
    from bench.results.estimate import (
        estimate_accuracy,
        estimate_probes,
        estimate_profiles,
    )
    from bench.runner.matrix import run_estimate

    zygote = not_forkable([sys.executable, "-m", "bench.execution.worker"]) is None
    imported = False  # whether an earlier step of this study has paid the zygote's imports
    extra = [r for h in history for r in query.load([h])]
    lines = [f"study of matrix {plan.matrix.name!r}: steps {', '.join(steps)}"]
    known = 0.0
    capturable = _capturable(plan, stores, extra) if plan.accuracy_matrix is not None else []
    to_run: set[str] = set()  # labels of the cells this invocation's run measures: each is captured after its trials
    if "run" in steps:
        st = plan.matrix.settings
        lines += ["", f"run: {commands['run']}",
                  f"  {len(plan.matrix.cells)} cells x {st.runs} run(s) x {st.trials} trial(s), warm-up {st.warmup}, "
                  f"memory cap {st.gpu_memory_gb or 'none'} GB"]
        lines += [f"  {c.label}" for c in plan.matrix.cells]
        est = run_estimate(plan.matrix, stores["run"], history, redo)
        known += est.known_s
        lines += ["  " + x for x in est.text().splitlines()]
        to_run = {c.label for c in est.cells}
        captures = [c for c in capturable if c.label in to_run]
        if captures:  # the study's run captures what its accuracy step will score
            from bench.results.estimate import capture_seconds

            seconds, text = capture_seconds(captures, (query.load([stores["accuracy"]]) if stores["accuracy"].exists()
                                                       else []) + extra)
            known += seconds
            lines.append("  " + text)
        forked, fresh, cuda = _run_starts(plan.matrix, est)
        if forked or fresh:
            seconds, text = worker_starts(forked, fresh, cuda, zygote)
            imported = bool(forked)  # the steps of one `bench study` share its zygote
            known += seconds
            lines.append("  " + text)
    if "oom" in steps and plan.oom:
        oom_records = (query.load([stores["oom"]]) if stores["oom"].exists() else []) + extra
        for i, s in enumerate(plan.oom):
            searches, (lower, upper), cap = plan_searches(plan.oom_matrix, s, check_devices=False)
            most = probe_budget(lower, upper, s.strategy) - (0 if s.confirm else 1)
            _, per, text = estimate_probes(list(searches.values()), most, oom_records)
            known += most * len(searches) * per if per else 0.0
            lines += ["", f"oom: {commands[f'oom{i}']}", f"  {len(searches)} search(es), batch sizes {lower}..{upper}, "
                      f"cap {cap or 'none'} GB", "  " + text]
            hf = [c for c, _, _ in searches.values() if c.backend == "hf"]
            if hf:  # each probe is a worker: forked from `bench oom`'s own zygote
                seconds, text = worker_starts(most * len(hf), 0, any(c.device.startswith("cuda") for c in hf), zygote,
                                              imported)
                imported = True
                known += seconds
                lines.append("  " + text)
    if "profile" in steps and plan.profile is not None:
        stored = query.load([stores["profile"]]) if stores["profile"].exists() else []
        left = profile_cells_left(plan, stored, redo)
        total, text = estimate_profiles(left, stored + extra)
        known += total or 0.0
        lines += ["", f"profile: {commands['profile']}"] + [f"  {c.label}" for c in left] + ["  " + text]
        if len(left) < len(plan.profile_matrix.cells):
            lines.append(f"  {len(plan.profile_matrix.cells) - len(left)} cell(s) already profiled in "
                         f"{stores['profile']}: not profiled again (--redo does)")
    if "accuracy" in steps and plan.accuracy_matrix is not None:
        from bench.accuracy.driver import plan_accuracy, sessions

        pairs = plan_accuracy(plan.accuracy_matrix, plan.matrix.cells, plan.matrix.accuracy)
        a = plan.matrix.accuracy
        planned = [(base, mode, cells) for base, _ in pairs if _ is None
                   for mode, cells in sessions(base, [c for c, b in pairs if b is not None and b.cell_id == base.cell_id])]
        lines += ["", f"accuracy: {commands['accuracy']}",
                  f"  {len(pairs)} cell(s) in {len(planned)} session(s), each through its own "
                  f"runtime ({a.prompts} prompts x up to {a.answer_tokens} answer tokens teacher-forced, "
                  f"{a.generate_tokens} greedy tokens each)"]
        for base, mode, cells in planned:
            lines.append(f"  session: {base.label} (baseline: its reference and noise floor)" if mode == "baseline"
                         else f"  session: against {base.label}")
            lines += [f"    {c.label}" for c in cells]
        acc_records = (query.load([stores["accuracy"]]) if stores["accuracy"].exists() else []) + extra
        from bench.execution.accuracy_capture import capture_dir

        # Scored from captures: those this invocation's run makes, and those an earlier run of the study left.
        captured = {c.cell_id for c in capturable if c.label in to_run or capture_dir(plan.matrix.name, c.cell_id, a).exists()}
        from bench.accuracy.driver import shared_memory

        capacity = shared_memory([base for base, _, _ in planned]) if plan.accuracy_parallel > 1 else None
        from bench.accuracy.early import capturable

        early = {c.cell_id for base, mode, cells in planned if mode == "cells" for c in capturable(base, cells, a)} - captured
        total, text = estimate_accuracy(planned, acc_records, captured, parallel=plan.accuracy_parallel,
                                        capacity=capacity, early=early)
        known += total or 0.0
        lines.append("  " + text)
    if "report" in steps:
        lines += ["", f"report: {commands['report']}"]
    lines += ["", f"known from stored records and the worker-start model: {known:.0f} s ({known / 60:.1f} min); parts "
              "with no stored figure are listed above as not known"]
    return "\n".join(lines)
