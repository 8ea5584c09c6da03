"""The driver of `bench compare`: the verdicts, where the time went, and with --profile the profiles that needs.

`compare` judges the two sides (bench.results.compare.compare_report), which also attributes each
regressed or improved cell from the profiles stored for it on each side (bench.results.attribution).
With `profile`, a regressed cell whose side has no profile is profiled here first, a window of a few
decode steps in each of `processes` session processes per side (bench.profiling.driver.profile_matrix, each
session through the one launcher; attribution reads their mean),
its records appended to that side's profile store, and the comparison is made again: one command
from "regressed" to "why". It sits in the study stage because it chains the results stage's
comparison and the profiling stage's driver (results may not import profiling), as `bench study`
chains run, profile and report.

A side is profiled only where this checkout can stand for it: its records were measured at this
checkout's commit. A side measured at another commit (asv continuous, two commits in one store) is
named with the commands that profile it in a checkout of that commit (docs/guide/regressions.md).
With `dashboard`, the comparison and its attribution are also written as one self-contained page
(bench.report.attribution_page).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.errors import BenchInputError

PROFILE_HINT = "`bench compare --profile` (same arguments) profiles them."
PROFILED_HINT = "`--profile` did not profile them (an improvement, or a side it cannot stand for: see the warnings)."


def compare(base: str, head: str, *, profile: bool = False, profiles: tuple | None = None, tool: str = "torch",
            decode_steps: int | None = None, processes: int = 3, dashboard: str | None = None, json_file: str | None = None,
            markdown_file: str | None = None,
            metrics: str | None = None, ignore_options=(), printer=None, **options):
    """Return (the Comparison, its Markdown, the stores' warnings); with `profile`, profile the regressed cells that
    have no profile first (their records appended to each side's profile store). A side whose compared processes
    profiled their own windows (`bench run --profile-window`) has them: it is attributed from those, never profiled
    again. decode_steps: of each window --profile makes (None: bench.execution.profile_window.DECODE_STEPS, the
    window the timed processes profile). Every input is checked before any work: the profile stores given, the
    dashboard's file, the profiling settings."""
    from bench.files import check_output_file
    from bench.results.compare import compare_report
    from bench.spec.narrow import parse_pairs

    printer = printer or (lambda text: print(text, file=sys.stderr))
    for key, flag in (("base_only", "--base-only"), ("head_only", "--head-only")):  # 'k=v,...' as `--only` takes it
        if isinstance(options.get(key), str):
            options[key] = parse_pairs(options[key], flag)
    if profiles is not None:
        profiles = tuple(profiles)
        if len(profiles) != 2:
            raise BenchInputError("--profiles takes two profile stores: the base side's and the head side's")
        for p in profiles:
            if not profile and not Path(p).is_file():
                raise BenchInputError(f"profile store {str(p)!r} does not exist: give each side's profile records' "
                                      "store (`bench profile` writes profiles/<matrix>.jsonl), or add --profile")
    if dashboard:
        from bench.report.dashboard import require_plotly

        check_output_file(dashboard, "--dashboard")
        require_plotly()
    if json_file:
        check_output_file(json_file, "--json")
    settings = _settings(tool, decode_steps, processes) if profile else None
    args = {"markdown_file": markdown_file, "metrics": metrics, "ignore_options": ignore_options, **options}
    hint = PROFILED_HINT if profile else PROFILE_HINT
    comparison, markdown, warns = compare_report(base, head, profiles=_existing(profiles), profile_hint=hint, **args)
    profiled = []
    if profile:
        made, notes, profiled = profile_missing(comparison, settings, profiles, printer)
        warns += notes
        if made:
            comparison, markdown, more = compare_report(base, head, profiles=_existing(profiles), profile_hint=hint,
                                                        **args)
            warns += [w for w in more if w not in warns]
    if dashboard:
        from bench.files import write_atomic
        from bench.report.attribution_page import comparison_page

        write_atomic(dashboard, comparison_page(comparison, markdown))
    if json_file:
        from bench.files import write_atomic

        write_atomic(json_file, json.dumps(_finite({**comparison_dict(comparison), "profiled": profiled}), indent=1,
                                           allow_nan=False))
    return comparison, markdown, warns


def _finite(o):
    """Return o with NaN and infinite floats as None (strict JSON)."""
    if isinstance(o, float):
        return o if o == o and abs(o) != float("inf") else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def comparison_dict(comparison) -> dict:
    """Return what `--json` writes: the exit status, the headline, each verdict row, the rows not judged by why, and
    the attribution (attribution.to_dict)."""
    from bench.results.attribution import to_dict

    rows = [{"cell": r.label, "metric": r.metric, "verdict": r.verdict, "ratio": r.ratio, "low": r.low, "high": r.high,
             "p_value": r.p_value, "paired": r.paired, "base_runs": list(r.base_runs), "head_runs": list(r.head_runs),
             "detects_only": r.detects_only, "note": r.note} for r in comparison.rows]
    return {"exit_status": comparison.exit_status, "headline": comparison.headline(),
            "regressions": len(comparison.regressions), "not_judged": comparison.not_judged, "rows": rows,
            "warnings": list(comparison.warnings), "attribution": to_dict(comparison.attribution)}


def _existing(profiles: tuple | None) -> tuple | None:
    """Return the (base, head) profile stores given that exist (None in the place of one that does not yet: that side's
    conventional store is read), or None where neither does."""
    if not profiles:
        return None
    pair = tuple(p if Path(p).is_file() else None for p in profiles)
    return None if all(p is None for p in pair) else pair


def _settings(tool: str, decode_steps: int | None, processes: int):
    """Return the ProfileSettings of the windows --profile makes (checked: BenchInputError before any work): the
    default window (the one `bench run --profile-window` profiles) unless decode_steps says otherwise."""
    from bench.profiling.driver import ProfileSettings, check_processes

    check_processes(processes, "--profile-processes")
    settings = ProfileSettings(tool=tool, processes=processes)
    if decode_steps is not None:
        settings = replace(settings, decode_steps=decode_steps)
    settings.check()
    return settings


def profile_missing(comparison, settings, profiles: tuple | None, printer) -> tuple[int, list[str], list[dict]]:
    """Profile the sides of regressed cells that have no profile, where this checkout stands for them; return (how many
    sessions ran, notes on the sides it could not profile and the commands that would, and what each side's profiling
    cost: matrix, store, cells, seconds of wall time, workers included)."""
    from bench.backends.registry import backend_config
    from bench.machine.environment import project_commit
    from bench.profiling.driver import check_profilable, profile_matrix
    from bench.results.profile_windows import default_profile_store
    from bench.spec.cells import Cell, Matrix

    here = project_commit()
    notes, plans = [], {}
    for m in comparison.attribution.missing:
        if not m.regressed:  # an improvement is explained where profiles are stored, never profiled for
            continue
        try:  # a stored cell is untrusted: rebuilt, its id checked, its declaration's checks run again
            cell = Cell.from_dict(m.cell)
            if cell.cell_id != comparison.head.cells[m.key].cell_id and cell.cell_id != comparison.base.cells[m.key].cell_id:
                raise BenchInputError("its stored cell does not hash to its cell id (a record of another schema)")
            backend_config(cell.backend).validate(cell)
            check_profilable([cell])
        except (BenchInputError, KeyError, TypeError, ValueError) as exc:
            notes.append(f"{m.label}, {m.side} side: not profiled: {exc}")
            continue
        other = comparison.head if m.side == "base" else comparison.base
        if cell.cell_id == other.cells[m.key].cell_id and set(comparison.base.commits) == set(comparison.head.commits):
            notes.append(f"{m.label}: both sides are the same cell at the same commit(s): one profile of this checkout "
                         "cannot tell them apart, so none was made")
            continue
        reason = _not_here(m.commits, here)
        if reason:
            notes.append(f"{m.label}, {m.side} side: not profiled here: {reason}. In a checkout of that commit: "
                         f"`bench profile --matrix <its matrix> --only {_only(cell)} --store <store>`, then "
                         "`bench compare ... --profiles BASE_STORE HEAD_STORE`")
            continue
        store = Path(profiles[0 if m.side == "base" else 1]) if profiles else default_profile_store(m.matrix or "compare")
        plans.setdefault((store, m.matrix or "compare"), {})[cell.cell_id] = cell
    made, costs = 0, []
    for (store, matrix), cells in plans.items():
        printer(f"bench compare --profile: profiling {len(cells)} cell(s) of {matrix} into {store}")
        t0 = time.perf_counter()
        records, failed = profile_matrix(Matrix(matrix, tuple(cells.values())), settings, store.parent, store,
                                         printer=lambda text: None)
        seconds = time.perf_counter() - t0
        printer(f"bench compare --profile: {matrix} profiled in {seconds:.1f} s")
        costs.append({"matrix": matrix, "store": str(store), "cells": len(cells), "failed": failed, "seconds": seconds})
        made += len(records) - failed
        if failed:
            notes.append(f"{failed} profiling session(s) of {matrix} failed: see the records in {store}")
    return made, notes, costs


def _not_here(commits: tuple[str, ...], here: dict) -> str:
    """Return why a side measured at `commits` cannot be profiled in this checkout ("" when it can)."""
    measured = {c.split("+")[0] for c in commits}
    if not here.get("commit"):
        return ("this checkout's commit is unknown (not a git checkout), so it cannot be matched to the side's: set "
                "BENCH_COMMIT to the tree's commit for the runs and for this comparison alike")
    if not measured:
        return "its records name no commit (measured outside a git checkout without BENCH_COMMIT)"
    if not all(here["commit"].startswith(c) for c in measured):  # the sides name 12-digit prefixes
        return (f"it was measured at {', '.join(sorted(c[:12] for c in measured))} and this checkout is at "
                f"{here['commit'][:12]}")
    return ""


def _only(cell) -> str:
    """Return a --only selection naming the cell: its precision and batch size, and its options that are not default."""
    from bench.spec.cells import identity_options

    opts = identity_options(cell.backend, dict(cell.options))
    return ",".join([f"backend={cell.backend}", f"precision={cell.precision}", f"max_batch_size={cell.max_batch_size}",
                     *(f"{k}={v}" for k, v in sorted(opts.items()))])
