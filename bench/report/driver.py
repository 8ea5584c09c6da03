"""The driver of `bench report`: the report of result stores (runs nothing), with the defaults a user expects.

`report_stores` picks the stores (default: every results/*.jsonl, with every profiles/*.jsonl for
the kernel panel; profile stores alone make a kernel-panel dashboard), the output folder
(default dashboards/<store> for one store, dashboards/combined for several) and builds the
report (bench.report.build.build_report), keeping the warnings its tables do not print.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError


@dataclass(frozen=True)
class ReportBuilt:
    """What `bench report` wrote: every file by kind, report.md's text, and the warnings it does not print."""

    paths: dict = field(default_factory=dict)
    printed: str = ""  # report.md ('' when none was written)
    warnings: tuple[str, ...] = ()

    def files_text(self) -> str:
        """Return the line naming the files, e.g. 'tables: report.md, speedup.md; dashboard: dashboard.html'."""
        written = ", ".join(str(self.paths[k]) for k in ("report", "markdown", "csv", "html", "kernels", "frontier")
                            if k in self.paths)
        return f"tables: {written}; dashboard: {self.paths.get('dashboard', '(none: no workload results)')}"


def report_stores(stores: list[str] = (), out: str | Path | None = None, *, baseline: str | None = None,
                  kernels: list[str] = (), profiles: list[str] = (), pool: bool = False) -> ReportBuilt:
    """Build the report of the stores (default: every results/*.jsonl) into `out`; BenchInputError if there is none.

    baseline: the --baseline text (default: the baseline the stored matrix named); kernels: kernel table files.
    """
    from bench.report.build import build_report, load_kernels
    from bench.spec.narrow import parse_pairs

    given = list(stores)
    stores = given or sorted(str(p) for p in Path("results").glob("*.jsonl"))
    profiles = list(profiles) or ([] if given else sorted(str(p) for p in Path("profiles").glob("*.jsonl")))
    if not stores and profiles:
        stores, profiles = profiles, []  # kernel profiles only: a dashboard with the kernel panel
    if not stores:
        raise BenchInputError("no result stores given and none found in results/: run `bench run` first")
    out = Path(out or ("dashboards/" + (_name(stores[0]) if len(stores) == 1 else "combined")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = build_report(stores, out, parse_pairs(baseline), kernels=load_kernels(list(kernels)),
                             profiles=profiles, pool=pool)
    printed = paths["report"].read_text() if "report" in paths else ""
    # The tables' own warnings are printed with them: once is enough.
    rest = tuple(w for w in dict.fromkeys(str(w.message) for w in caught) if w not in printed)
    return ReportBuilt(paths, printed, rest)


def _name(store: str) -> str:
    """Return the default report folder's name for a store, a folder of stores or a glob."""
    import glob

    p = Path(store)
    if glob.has_magic(store):
        return p.parent.name or "combined"
    return p.name if p.is_dir() else p.stem
