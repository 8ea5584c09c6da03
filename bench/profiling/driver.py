"""The driver of `bench profile`: kernel tables and a timeline for a short fixed window of selected cells.

Each selected cell runs in its own session process (bench.profiling.session, started through
bench.execution.launcher, wrapped by nsys or ncu where the tool says so); the parent never
touches the GPU. Per cell it writes, under <out>/<matrix>/<cell_id>-<tool>/: kernel_table.json
(+ .md, categories.csv), the Chrome trace (torch) or the nsys report and its SQLite export
(nsys), ncu's raw CSV and roofline (ncu), session.log; and it appends one record to the profile
store whose extra["kernel_table"] and extra["trace"] point there. `profile_matrix` is the entry
(`bench study` calls it too); a cell's printed text is `profile_text`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.errors import BenchInputError
from bench.execution.profile_window import (
    BATCHES,
    DECODE_STEPS,
    PROFILABLE_BACKENDS,
    WARMUP,
)

SESSION = "bench.profiling.session"  # the session process's module (python -m)


@dataclass(frozen=True)
class ProfileSettings:
    """How `bench profile` profiles each cell (its flags)."""

    tool: str = "torch"
    # the window of bench.execution.profile_window: the one `bench compare --profile` and `bench run --profile-window` make
    decode_steps: int = DECODE_STEPS
    batches: int = BATCHES
    warmup: int = WARMUP
    timeout: float = 1800.0
    patterns: tuple[str, ...] = ()  # () = bench.execution.nvtx.DEFAULT_PATTERNS
    # The nsys (tool nsys) or ncu (tool ncu) executable: as given (None: found as find_nsys / find_ncu find it),
    # found and checked by profile_matrix before any work unless tool_version says it already was.
    nsys: str | None = None
    ncu: str | None = None
    tool_version: str | None = None  # what `nsys --version` / `ncu --version` said
    ncu_metrics: str = "full"  # --ncu-metrics: a key of bench.profiling.ncu_collector.METRIC_SETS
    progress: bool = True  # a line on stderr as each cell starts
    # Session processes per cell, one window each: a host-bound step moves from process to process, and attribution
    # (bench.results.attribution) reads the mean of one invocation's windows of a cell.
    processes: int = 1

    def check(self) -> None:
        from bench.checks import check_number

        check_number(self.decode_steps, "--decode-steps", integer=True, minimum=1, maximum=100_000)
        check_processes(self.processes)
        check_number(self.batches, "--batches", integer=True, minimum=1, maximum=10_000)
        check_number(self.warmup, "--warmup", integer=True, minimum=0, maximum=10_000)
        check_number(self.timeout, "--timeout", above=0, hint="seconds per cell before the session is killed")


def check_processes(value, flag: str = "--processes") -> None:
    """Raise BenchInputError unless `value` is a whole number of session processes per cell, 1 to 100."""
    from bench.checks import check_number

    check_number(value, flag, integer=True, minimum=1, maximum=100,
                 hint="session processes per cell, one profile window each")


def parse_patterns(text: str | None) -> tuple[str, ...]:
    """Return the module patterns of --patterns ('*RMSNorm,*Attention'); () for none given; BenchInputError if empty."""
    if text is None:
        return ()
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    if not patterns:
        raise BenchInputError("--patterns is empty: give class-name globs such as '*RMSNorm,*Attention'")
    return patterns


def check_profilable(cells) -> None:
    """Raise BenchInputError unless every cell's backend can be profiled (a torch model to put ranges on)."""
    if not cells:
        raise BenchInputError("no cell to profile: the selection (--only) matches nothing")
    bad = sorted({c.backend for c in cells if c.backend not in PROFILABLE_BACKENDS})
    if bad:
        raise BenchInputError(
            f"bench profile puts ranges on a torch model; backend(s) {bad} have none: narrow with "
            f"--only backend=hf (profilable: {list(PROFILABLE_BACKENDS)}), or profile an engine with nsys directly"
        )


def _with_tool(settings: ProfileSettings) -> ProfileSettings:
    """Return the settings with the tool's executable found and checked (BenchInputError: missing or too old)."""
    if settings.tool == "nsys" and settings.tool_version is None:
        from bench.profiling.nsys_collector import find_nsys

        nsys, version = find_nsys(settings.nsys)
        return replace(settings, nsys=nsys, ncu=None, tool_version=".".join(map(str, version)))
    if settings.tool == "ncu" and settings.tool_version is None:
        from bench.profiling.ncu_collector import find_ncu

        ncu, version = find_ncu(settings.ncu)
        return replace(settings, ncu=ncu, nsys=None, tool_version=version)
    return replace(settings, nsys=settings.nsys if settings.tool == "nsys" else None,
                   ncu=settings.ncu if settings.tool == "ncu" else None)


def profiled_cells(records, settings: ProfileSettings) -> set[str]:
    """Return the ids of the cells these records hold a whole profile of, as `settings` would make it: an ok session
    window (`bench profile`'s, not a timed process's) of the same tool, decode steps and batches from every process
    the settings ask for. `bench study` resumed without --redo profiles only the others."""
    from bench.results.records import Profile

    runs: dict[str, set] = {}
    for r in records:
        if not isinstance(r, Profile) or r.status != "ok" or r.from_timed_process or r.tool != settings.tool:
            continue
        window = r.profile.get("window") if isinstance(r.profile.get("window"), dict) else {}
        if window.get("decode_steps") == settings.decode_steps and window.get("batches", 1) == settings.batches:
            runs.setdefault(r.cell_id, set()).add(r.run)
    return {cell_id for cell_id, done in runs.items() if set(range(settings.processes)) <= done}


def profile_matrix(matrix, settings: ProfileSettings, out_root: Path, store_path: Path, printer=print) -> tuple[list, int]:
    """Profile every cell of the matrix in its own session process; return (the Profile records, how many failed).

    Records go to store_path (one per cell and session process, appended as each finishes; a record's `run` is
    its process, 0 to settings.processes - 1, all of one invocation's context); files under
    out_root/<matrix>/<cell_id>-<tool>/ (process 0), <cell_id>-<tool>-p<N>/ (process N-1). `printer` gets each
    session's summary text.
    """
    from bench.execution.kernels import KernelTable
    from bench.execution.nvtx import DEFAULT_PATTERNS
    from bench.files import check_output_dir
    from bench.machine.failures import first_line
    from bench.results.query import check_store_path
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    settings.check()
    check_profilable(matrix.cells)
    settings = _with_tool(settings)  # missing or too old: BenchInputError before any work
    if not settings.patterns:
        settings = replace(settings, patterns=tuple(DEFAULT_PATTERNS))
    store_path = check_store_path(store_path, must_exist=False)
    check_output_dir(out_root, "--out")
    context = new_context("profile", matrix=matrix.name, warmup=settings.warmup, runs=settings.processes)
    failed, records = 0, []
    n = settings.processes
    with ResultStore(store_path).writer() as store:
        for i, cell in enumerate(matrix.cells, 1):
            for run in range(n):
                if settings.progress:
                    which = f", process {run + 1} of {n}" if n > 1 else ""
                    print(f"profiling {i}/{len(matrix.cells)}: {cell.label} ({settings.tool}{which})", file=sys.stderr,
                          flush=True)
                record = profile_cell(cell, settings, Path(out_root) / matrix.name, context, run)
                store.append(record)
                records.append(record)
                if record.status != "ok":
                    failed += 1
                    print(f"{cell.label}: {record.status}: {first_line(record.error)} (whole text in {store_path})",
                          file=sys.stderr)
                    continue
                printer(profile_text(cell, record, settings.tool, KernelTable.load(record.kernel_table)))
    print(f"profile records: {store_path}", file=sys.stderr)
    return records, failed


def profile_text(cell, record, tool: str, table) -> str:
    """Return the printed summary of one Profile record: its window, wall times, top kernels and files."""
    prof = record.extra["profile"]
    window = prof["window"]
    what = (f"{window['decode_steps']} decode steps after the prefill (harness loop)" if window.get("kind") == "decode"
            else f"{window['decode_steps']} decode steps")
    step = f"; {prof['step_ms']:.3f} ms per decode step unprofiled" if prof.get("step_ms") else ""
    roofline = ""
    if prof.get("roofline_md"):
        roofline = "\n" + Path(prof["roofline_md"]).read_text()
    session = f"; session process {prof['session_wall_s']:.1f} s" if prof.get("session_wall_s") else ""
    return (f"## {cell.label} ({tool})\n\n"
            f"window: {what}; static cache {window.get('static_cache_len') or '-'}; wall {prof['profiled_window_s'] * 1e3:.1f} ms "
            f"profiled vs {prof['unprofiled_window_s'] * 1e3:.1f} ms unprofiled "
            f"({prof['profiled_window_s'] / prof['unprofiled_window_s']:.2f}x){step}{session}\n\n"
            + table.to_markdown(top=5) + roofline
            + f"\nkernel table: {record.kernel_table}; trace: {record.extra.get('trace')}\n")


def profile_cell(cell, settings: ProfileSettings, out_root: Path, context, process: int = 0):
    """Return the Profile record of one cell after running its session (and reading the profiler's report back).

    settings: as profile_matrix passes them (patterns filled in, the tool's executable found); process: which of
    the invocation's session processes of this cell it is (0 first; the record's `run`; its folder's -p<process+1>).
    """
    from bench.execution.kernels import write_side_tables
    from bench.execution.launcher import run_session
    from bench.execution.supervisor import session_preload
    from bench.profiling.readback import read_ncu, read_nsys
    from bench.results.records import PROFILING_SESSION, Profile, new_record
    from bench.workloads.workload import cached_workload

    wl, wl_file = cached_workload(cell.workload, Path("workloads/cache"))
    out_dir = (out_root / (f"{cell.cell_id}-{settings.tool}" + (f"-p{process + 1}" if process else ""))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    job = {
        "build_key": cell.build_key().to_dict(), "cell": cell.to_dict(), "workload_file": str(Path(wl_file).resolve()),
        "engines_dir": str(Path("engines").resolve()), "tool": settings.tool, "decode_steps": settings.decode_steps,
        "batches": settings.batches, "warmup": settings.warmup, "patterns": list(settings.patterns),
        "out_dir": str(out_dir),
    }
    job_file, result_file = out_dir / "job.json", out_dir / "session.json"
    job_file.write_text(json.dumps(job, indent=1))
    argv = [sys.executable, "-m", SESSION, str(job_file), str(result_file)]
    for stale in [*out_dir.glob("report*.nsys-rep"), *out_dir.glob("report*.qdstrm"), *out_dir.glob("report*.ncu-rep")]:
        stale.unlink()  # a report left by an earlier run must not pass for this one's
    wrapped = bool(settings.nsys) or settings.tool == "ncu"
    if settings.nsys:
        from bench.profiling.nsys_collector import profile_command

        argv = profile_command(settings.nsys, out_dir / "report", argv)
    elif settings.tool == "ncu":
        from bench.profiling import ncu_collector

        argv = ncu_collector.profile_command(settings.ncu or "ncu", out_dir / "report", argv,
                                             ncu_collector.nvtx_include(_nvtx_domain()),
                                             ncu_collector.METRIC_SETS[settings.ncu_metrics])
    outcome = {"trial": 0, "status": "ok", "metrics": None, "extra": {"tool": settings.tool}, "error": None,
               "started_at": time.time()}
    environment = {}
    try:
        # Under nsys or ncu the session's parent is the profiler: the kill of the whole process group reaches it.
        run = run_session(argv, result_file, out_dir / "session.log", timeout=settings.timeout,
                          what="profiling session", watch_parent=not wrapped,
                          preload=None if wrapped else session_preload([cell], SESSION))  # nsys/ncu start it
        if run.status == "timeout":
            outcome.update(status="timeout", error=run.error)
        elif run.status != "ok":  # the text stored since the session's death was raised as a RuntimeError
            outcome.update(status=run.status, error=f"RuntimeError: {run.error}")
        else:
            session = run.result
            session["session_wall_s"] = run.wall_s  # the whole process, the profiler's own work included
            if settings.tool_version:
                session[f"{settings.tool}_version"] = settings.tool_version
            if settings.nsys:
                session.update(read_nsys(settings.nsys, out_dir, cell))
            elif settings.tool == "ncu":
                session.update(read_ncu(settings.ncu or "ncu", out_dir, cell, session), ncu_metrics=settings.ncu_metrics)
            if wrapped:  # a table read back from the profiler's report (the torch tool's window wrote its own)
                write_side_tables(Path(session["kernel_table"]))
            outcome["extra"] = Profile.extra_of(session, PROFILING_SESSION)
            environment = session.get("environment", {})
    except (RuntimeError, BenchInputError, OSError, ValueError, KeyError) as exc:
        outcome.update(status="error", error=f"{type(exc).__name__}: {exc}")
    outcome["ended_at"] = time.time()
    return new_record("profile", cell, outcome, context=context, run=process, workload=wl.summary(),
                      environment=environment)


def _nvtx_domain() -> str | None:
    """Return the NVTX domain the session's ranges will use (bench.execution.nvtx): `bench` with the nvtx package."""
    import importlib.util

    from bench.execution.nvtx import NVTX_DOMAIN

    return NVTX_DOMAIN if importlib.util.find_spec("nvtx") is not None else None
