"""The driver of `bench report`: the report of result stores (runs nothing), with the defaults a user expects.

`report_stores` picks the stores (default: every results/*.jsonl, with every profiles/*.jsonl for
the kernel panel; profile stores alone make a kernel-panel dashboard), groups them by the matrix
their records name when they come from a folder, a glob or the default (a folder holding several
matrices gets one report per matrix, never one report that mixes their baselines), picks each
report's folder (default dashboards/<store> for one store, dashboards/combined for several of one
matrix; with several matrices, <dashboards or --out>/<store or matrix> each) and builds the
reports (bench.report.build.build_report), keeping the warnings their tables do not print.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError


@dataclass(frozen=True)
class ReportBuilt:
    """What `bench report` wrote for one group of stores: every file by kind, report.md's text, and the warnings it
    does not print; or why that group's report was not built."""

    paths: dict = field(default_factory=dict)
    printed: str = ""  # report.md ('' when none was written)
    warnings: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()  # the stores of this report
    error: str | None = None  # why this group's report was not built (the others' were)

    def files_text(self) -> str:
        """Return the line naming the files, e.g. 'tables: report.md, speedup.md; dashboard: dashboard.html'."""
        written = ", ".join(str(self.paths[k]) for k in ("report", "markdown", "csv", "html", "kernels", "frontier")
                            if k in self.paths)
        return f"tables: {written}; dashboard: {self.paths.get('dashboard', '(none: no workload results)')}"


def report_stores(stores: list[str] = (), out: str | Path | None = None, *, baseline: str | None = None,
                  kernels: list[str] = (), profiles: list[str] = (), pool: bool = False) -> list[ReportBuilt]:
    """Build the report of the stores (default: every results/*.jsonl) into `out`, one per matrix where the stores
    come from a folder, a glob or the default; BenchInputError if there is none, or if the one report fails.

    baseline: the --baseline text (default: the baseline the stored matrix named); kernels: kernel table files.
    """
    import glob

    from bench.results.query import expand_stores

    given = list(stores)
    found = given or sorted(str(p) for p in Path("results").glob("*.jsonl"))
    default_profiles = not profiles and not given
    profiles = list(profiles) or ([] if given else sorted(str(p) for p in Path("profiles").glob("*.jsonl")))
    if not found and profiles:
        found, profiles = profiles, []  # kernel profiles only: a dashboard with the kernel panel
    if not found:
        raise BenchInputError("no result stores given and none found in results/: run `bench run` first")
    # A folder, a glob or the default may hold several matrices: one report each. Stores named one by one are the
    # user's own choice of what goes together (a comparison of two matrices' shared cells included).
    split = not given or any(Path(s).is_dir() or glob.has_magic(str(s)) for s in given)
    groups = matrix_groups(expand_stores(found)) if split else {"": [Path(s) for s in found]}
    if len(groups) <= 1:
        out = Path(out or ("dashboards/" + (_name(found[0]) if len(found) == 1 else "combined")))
        return [_build(found, out, baseline, kernels, profiles, pool)]
    by_matrix = matrix_groups(expand_stores(profiles)) if default_profiles and profiles else {}
    # A matrix profiled but not run here: its kernel panel alone, in a folder of its own.
    groups.update({name: members for name, members in by_matrix.items() if name not in groups})
    built = []
    for name, members in groups.items():
        folder = Path(out or "dashboards") / (members[0].name.removesuffix(".gz").removesuffix(".jsonl")
                                              if len(members) == 1 else name)
        extra = [p for p in by_matrix.get(name, []) if p not in members] if default_profiles else profiles
        try:
            built.append(_build([str(m) for m in members], folder, baseline, kernels, [str(p) for p in extra], pool))
        except BenchInputError as exc:  # one matrix's bad report does not keep the others from theirs
            built.append(ReportBuilt(stores=tuple(str(m) for m in members), error=str(exc)))
    return built


# A matrix name that may name a report folder: letters, digits, '.', '_' and '-', not starting with a dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def _build(stores: list[str], out: Path, baseline, kernels, profiles, pool) -> ReportBuilt:
    from bench.report.build import build_report, load_kernels
    from bench.spec.narrow import parse_pairs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = build_report(stores, out, parse_pairs(baseline), kernels=load_kernels(list(kernels)),
                             profiles=profiles, pool=pool)
    printed = paths["report"].read_text() if "report" in paths else ""
    # The tables' own warnings are printed with them: once is enough.
    rest = tuple(w for w in dict.fromkeys(str(w.message) for w in caught) if w not in printed)
    return ReportBuilt(paths, printed, rest, tuple(stores))


def matrix_groups(stores: list[Path]) -> dict[str, list[Path]]:
    """Return {matrix name: its stores}, in the order first seen, from each store's first record (`bench run`,
    `oom`, `capacity`, `accuracy` and `profile` of one matrix write its name in every record's run context); a
    store whose records name no matrix is a group of its own, named by the store."""
    from bench.results.jsonl import read_lines, store_name

    groups: dict[str, list[Path]] = {}
    for path in stores:
        lines = read_lines(path)
        first = next(lines, None)
        lines.close()
        rec = first.record if first is not None else {}
        name = (rec.get("context") or {}).get("matrix") or rec.get("matrix")
        # A store is untrusted input: a matrix name becomes a folder name only when it is a plain one.
        if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
            name = f"store {store_name(path)}"
        groups.setdefault(name, []).append(path)
    return groups


def _name(store: str) -> str:
    """Return the default report folder's name for a store, a folder of stores or a glob."""
    import glob

    p = Path(store)
    if glob.has_magic(store):
        return p.parent.name or "combined"
    return p.name if p.is_dir() else p.stem
