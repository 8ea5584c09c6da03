"""`bench study`: the whole study of a matrix in one command: run, OOM frontier, kernel profiles, report.

The same library functions as the four commands, in order, each step's equivalent command
line printed before it runs:

1. `bench run`     -> results/<matrix>.jsonl (bench.runner.matrix.run_matrix)
2. `bench oom`     -> results/<matrix>-oom.jsonl (bench.commands.oom.search_matrix), one search
                      per entry of the matrix's [study.oom] `searches`
3. `bench profile` -> profiles/<matrix>.jsonl (bench.commands.profile.profile_matrix)
4. `bench accuracy` -> results/<matrix>-accuracy.jsonl (bench.commands.accuracy.accuracy_matrix): the
                      cells of [study.accuracy] `only` against their baselines, with the matrix's
                      [accuracy] settings and thresholds
5. `bench report`  -> dashboards/<matrix>/report.md and dashboard.html over all four stores

The matrix file's [study] table says what steps 2 and 3 cover (docs/guide/reports.md):

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

Everything is checked before the first step runs. A step that fails (a cell's error or
timeout, an undecided search, a failed session) does not stop the later steps; the exit
status is then 1. `--dry-run` prints the plan and an estimate from stored records.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError, choices

STEPS = ("run", "oom", "profile", "accuracy", "report")
OOM_KEYS = {"only", "strategy", "confirm", "decode_steps", "searches"}
SEARCH_KEYS = {"lengths", "lower", "upper"}
PROFILE_KEYS = {"only", "decode_steps", "warmup", "batches", "tool"}
ACCURACY_KEYS = {"only"}


def register(sub) -> None:
    r = sub.add_parser("study", help="run, OOM frontier, kernel profiles, accuracy and report of a matrix in one command "
                                     "(its [study] table says what the OOM search and the profile cover)",
                       description="Run `bench run`, `bench oom`, `bench profile` and `bench report` on one matrix "
                                   "that has a [study] table (e.g. --preset h200-study), printing each step's "
                                   "equivalent command. --dry-run lists the cells, searches and profiles with a time "
                                   "estimate from stored records, and needs no optional package (torchao).")
    r.add_argument("--preset", help="built-in matrix with a [study] table (e.g. h200-study)")
    r.add_argument("--matrix", help="matrix TOML file with a [study] table")
    r.add_argument("--steps", default=",".join(STEPS), help=f"which steps, in order (default all: {','.join(STEPS)})")
    r.add_argument("--requests", type=int, help="override every workload's num_requests (a quick slice)")
    r.add_argument("--runs", type=int, help="override the matrix's runs (fresh worker processes per cell)")
    r.add_argument("--redo", action="store_true", help="measure and probe again what the stores already hold")
    r.add_argument("--dry-run", action="store_true", help="check everything, print the plan and an estimate, run nothing")
    r.add_argument("--history", action="append", default=[], help="more stores the --dry-run estimate may read (repeatable)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--report-dir", help="where report.md and dashboard.html go (default dashboards/<matrix>)")
    r.set_defaults(func=cmd_study)


@dataclass(frozen=True)
class StudyPlan:
    """What each step of the study does, all of it checked."""

    matrix: object  # bench.spec.cells.Matrix
    oom_matrix: object | None  # the matrix narrowed to [study.oom].only
    oom: list  # bench.commands.oom.OomSettings, one per search
    profile_matrix: object | None
    profile: object | None  # bench.commands.profile.ProfileSettings
    accuracy_matrix: object | None = None  # the matrix narrowed to [study.accuracy].only (None: no accuracy step)
    only: dict = field(default_factory=dict)  # [study.oom].only and [study.profile].only as given (for the command lines)


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
    accuracy_matrix = None
    if "accuracy" in study:
        from bench.accuracy.driver import plan_accuracy

        accuracy_matrix = narrow(matrix, only=parse_pairs(_typed(acc, "only", None, str, "[study.accuracy]"),
                                                          "[study.accuracy] only"))
        plan_accuracy(accuracy_matrix, matrix.cells, matrix.accuracy)  # baselines, backends, references: checked now
    return StudyPlan(matrix, oom_matrix, oom_settings, profile_matrix, profile_settings, accuracy_matrix, only)


def _source(args) -> Path:
    from bench.spec.cells import PRESETS_DIR
    from bench.spec.matrix import list_presets

    if args.matrix and args.preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    if args.matrix:
        path = Path(args.matrix).expanduser()
        if not path.is_file():
            raise BenchInputError(f"matrix file {args.matrix!r} does not exist")
        return path
    if not args.preset:
        raise BenchInputError(f"bench study needs --preset or --matrix: a matrix with a [study] table (presets: "
                              f"{choices(list_presets())})")
    path = PRESETS_DIR / f"{args.preset}.toml"
    if not path.is_file():
        raise BenchInputError(f"unknown preset {args.preset!r}: valid presets are {choices(list_presets())}")
    return path


def _commands(args, plan: StudyPlan) -> dict[str, str]:
    """Return each step's equivalent command line."""
    src = f"--preset {args.preset}" if args.preset else f"--matrix {args.matrix}"
    slice_ = (f" --requests {args.requests}" if args.requests else "") + (f" --runs {args.runs}" if args.runs else "")
    name = plan.matrix.name
    out = {"run": f"bench run {src}{slice_}"}
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
        out["accuracy"] = f"bench accuracy {src}{slice_}" + (f" --only {plan.only['accuracy']}" if plan.only.get("accuracy") else "")
    out["report"] = (f"bench report results/{name}.jsonl results/{name}-oom.jsonl"
                     + (f" results/{name}-accuracy.jsonl" if plan.accuracy_matrix is not None else "")
                     + f" --profiles profiles/{name}.jsonl")
    return out


def cmd_study(args) -> int:
    from rich.console import Console

    from bench.spec.baseline import check_baseline
    from bench.spec.matrix import load_matrix
    from bench.spec.narrow import narrow

    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        raise BenchInputError(f"--steps: unknown step {bad[0] if bad else '(none)'!r}; steps are {choices(STEPS)}")
    path = _source(args)
    # Planning (--dry-run) needs no optional package (torchao, ...); a real run checks them here, before any work.
    matrix = narrow(load_matrix(path, check_installed=not args.dry_run), requests=args.requests, runs=args.runs)
    plan = study_plan(path, matrix, check_devices=not args.dry_run)
    check_baseline(matrix.baseline, matrix.cells)
    name = matrix.name
    stores = {"run": Path(f"results/{name}.jsonl"), "oom": Path(f"results/{name}-oom.jsonl"),
              "profile": Path(f"profiles/{name}.jsonl"), "accuracy": Path(f"results/{name}-accuracy.jsonl")}
    report_dir = Path(args.report_dir or f"dashboards/{name}")
    console = Console(stderr=True, soft_wrap=True)
    commands = _commands(args, plan)
    if args.dry_run:
        print(dry_run_text(plan, steps, stores, args.history, commands, args.redo))
        return 0
    from bench.files import check_output_dir

    check_output_dir(report_dir, "--report-dir")  # before any step runs
    if "report" in steps:
        from bench.report.dashboard import require_plotly

        try:
            require_plotly()  # the study's last step: refused now, not after its GPU time
        except BenchInputError as exc:
            raise BenchInputError(f"{exc}; or leave the report out (--steps {','.join(s for s in steps if s != 'report')})") from exc
    timings: dict[str, float] = {}
    failed: dict[str, int] = {}
    for step in steps:
        if step == "accuracy" and plan.accuracy_matrix is None:
            continue  # no [study.accuracy] table: the step is not part of this study
        t0 = time.monotonic()
        if step == "run":
            failed["run"] = _run(plan.matrix, stores["run"], args, console, commands["run"])
        elif step == "oom":
            failed["oom"] = _oom(plan, stores["oom"], args, console, commands, report_dir)
        elif step == "profile" and plan.profile is not None:
            from bench.profiling.driver import profile_matrix

            console.print(f"[bold]study: profile[/] ({commands['profile']})")
            _, failed["profile"] = profile_matrix(plan.profile_matrix, plan.profile, Path("profiles"), stores["profile"],
                                                  printer=lambda text: print(text, file=sys.stderr))
        elif step == "accuracy" and plan.accuracy_matrix is not None:
            from bench.accuracy.driver import accuracy_matrix

            console.print(f"[bold]study: accuracy[/] ({commands['accuracy']})")
            _, failed["accuracy"] = accuracy_matrix(plan.accuracy_matrix, plan.matrix.cells, plan.matrix.accuracy,
                                                    stores["accuracy"], redo=args.redo,
                                                    printer=lambda text: print(text, file=sys.stderr))
        elif step == "report":
            failed["report"] = _report(stores, report_dir, plan.matrix, console, commands["report"])
        timings[step] = time.monotonic() - t0
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / "study.json"
    # A study run in parts (--steps run, then --steps oom,profile,report) keeps every part's figures.
    summary = json.loads(path.read_text()) if path.is_file() else {}
    if summary.get("matrix") != name:
        summary = {}
    summary = {"matrix": name, "steps_s": {**summary.get("steps_s", {}), **timings},
               "failed": {**summary.get("failed", {}), **failed}, "commands": commands,
               "stores": {k: str(v) for k, v in stores.items()}}
    path.write_text(json.dumps(summary, indent=1))
    console.print("study: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
                  + f"; this invocation {sum(timings.values()):.0f} s; all steps so far "
                  f"{sum(summary['steps_s'].values()):.0f} s; {path}")
    return 1 if any(failed.values()) else 0


def _run(matrix, store: Path, args, console, command: str) -> int:
    from bench.runner.matrix import run_matrix

    console.print(f"[bold]study: run[/] ({command})")
    summary = run_matrix(matrix, store, redo=args.redo, show_progress=not args.no_progress, console=console)
    console.print(f"run: {summary.elapsed_s:.0f} s: {summary.statuses or 'nothing new'}; {summary.skipped} trial(s) already "
                  f"stored; run id {summary.run_id}")
    return summary.statuses.get("error", 0) + summary.statuses.get("timeout", 0)


def _oom(plan: StudyPlan, store: Path, args, console, commands: dict, report_dir: Path) -> int:
    from dataclasses import replace

    from bench.oom.driver import search_matrix

    failed = 0
    for i, settings in enumerate(plan.oom):
        console.print(f"[bold]study: oom[/] ({commands[f'oom{i}']})")
        n, _ = search_matrix(plan.oom_matrix, replace(settings, redo=args.redo), store, console, report_dir)
        failed += n
    return failed


def _report(stores: dict, report_dir: Path, matrix, console, command: str) -> int:
    from bench.report.build import build_report

    console.print(f"[bold]study: report[/] ({command})")
    runs = [str(stores[k]) for k in ("run", "oom", "accuracy") if stores[k].exists()]
    profiles = [str(stores["profile"])] if stores["profile"].exists() else []
    if not runs and not profiles:
        console.print("[yellow]report not built: no store was written")
        return 1
    try:
        paths = build_report(runs or profiles, report_dir, matrix.baseline, profiles=profiles if runs else [])
    except BenchInputError as exc:
        console.print(f"[yellow]report not built: {exc}")
        return 1
    print(paths["report"].read_text())
    console.print(f"report: {paths['report']}; dashboard: {paths.get('dashboard')}")
    return 0


def dry_run_text(plan: StudyPlan, steps: list[str], stores: dict, history: list, commands: dict, redo: bool) -> str:
    """Return the study's plan: each step's command line, cells, searches and sessions, and the estimate."""
    from bench.oom.driver import plan_searches
    from bench.commands.run import run_estimate
    from bench.oom.search import probe_budget
    from bench.results import query
    from bench.results.estimate import estimate_probes, estimate_profiles

    extra = [r for h in history for r in query.load([h])]
    lines = [f"study of matrix {plan.matrix.name!r}: steps {', '.join(steps)}"]
    known = 0.0
    if "run" in steps:
        st = plan.matrix.settings
        lines += ["", f"run: {commands['run']}",
                  f"  {len(plan.matrix.cells)} cells x {st.runs} run(s) x {st.trials} trial(s), warm-up {st.warmup}, "
                  f"memory cap {st.gpu_memory_gb or 'none'} GB"]
        lines += [f"  {c.label}" for c in plan.matrix.cells]
        est = run_estimate(plan.matrix, stores["run"], history, redo)
        known += est.known_s
        lines += ["  " + x for x in est.text().splitlines()]
    if "oom" in steps and plan.oom:
        oom_records = (query.load([stores["oom"]]) if stores["oom"].exists() else []) + extra
        for i, s in enumerate(plan.oom):
            searches, (lower, upper), cap = plan_searches(plan.oom_matrix, s, check_devices=False)
            most = probe_budget(lower, upper, s.strategy) - (0 if s.confirm else 1)
            _, per, text = estimate_probes(list(searches.values()), most, oom_records)
            known += most * len(searches) * per if per else 0.0
            lines += ["", f"oom: {commands[f'oom{i}']}", f"  {len(searches)} search(es), batch sizes {lower}..{upper}, "
                      f"cap {cap or 'none'} GB", "  " + text]
    if "profile" in steps and plan.profile is not None:
        prof_records = (query.load([stores["profile"]]) if stores["profile"].exists() else []) + extra
        total, text = estimate_profiles(plan.profile_matrix.cells, prof_records)
        known += total or 0.0
        lines += ["", f"profile: {commands['profile']}"] + [f"  {c.label}" for c in plan.profile_matrix.cells] + ["  " + text]
    if "accuracy" in steps and plan.accuracy_matrix is not None:
        from bench.accuracy.driver import plan_accuracy

        pairs = plan_accuracy(plan.accuracy_matrix, plan.matrix.cells, plan.matrix.accuracy)
        a = plan.matrix.accuracy
        lines += ["", f"accuracy: {commands['accuracy']}",
                  f"  {len(pairs)} session(s) ({a.prompts} prompts x up to {a.answer_tokens} answer tokens, "
                  f"{a.generate_tokens} greedy tokens each); time not estimated"]
        lines += [f"  {c.label}" + (f" vs {b.label}" if b is not None else " (baseline: noise floor)") for c, b in pairs]
    if "report" in steps:
        lines += ["", f"report: {commands['report']}"]
    lines += ["", f"known from stored records: {known:.0f} s ({known / 60:.1f} min); parts with no stored figure are "
              "listed above as not known"]
    return "\n".join(lines)
