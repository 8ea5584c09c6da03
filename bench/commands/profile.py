"""`bench profile`: kernel tables and a timeline for a short fixed window of selected cells.

Each selected cell runs in its own worker process (bench.profiling.session), optionally under
nsys; the parent never touches the GPU. Per cell it writes, under
profiles/<matrix>/<cell_id>-<tool>/: kernel_table.json (+ .md, categories.csv), the Chrome
trace (torch) or the nsys report and its SQLite export (nsys), session.log; and it appends one
record to profiles/<matrix>.jsonl whose extra["kernel_table"] and extra["trace"] point there.
`profile_matrix` is the library entry (`bench study` calls it too).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix
from bench.errors import BenchInputError

PROFILABLE_BACKENDS = ("hf",)  # backends whose loaded object exposes a torch model (`.model`)


def register(sub) -> None:
    p = sub.add_parser("profile", help="kernel counts per RMSNorm/attention call and a trace, for a few decode steps",
                       description="Profile a few decode steps of each selected hf cell in a fresh worker: kernels per "
                                   "RMSNorm and attention call (NVTX ranges per module), their GPU time, and a trace "
                                   "(torch.profiler, or nsys with --tool nsys); one profile record per cell in "
                                   "profiles/<matrix>.jsonl, which `bench report` turns into the kernel panel "
                                   "(docs/guide/profiling.md).")
    add_matrix_arguments(p, "profile only matching cells, e.g. precision=bf16,max_batch_size=1")
    p.add_argument("--tool", choices=("torch", "nsys", "ncu"), default="torch",
                   help="collector: torch.profiler (default), nsys (Nsight Systems), ncu (Nsight Compute: one decode step "
                        "against the roofline)")
    p.add_argument("--decode-steps", type=int, default=4,
                   help="decode steps in the window (after one prefill; harness-loop cells: the steps alone)")
    p.add_argument("--batches", type=int, default=1,
                   help="batches of max_batch_size requests in the window (generate cells; harness-loop cells "
                        "profile the first batch's decode steps)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured windows before timing")
    p.add_argument("--patterns", default=None,
                   help="comma-separated module class/name patterns for ranges (default *RMSNorm,*Attention,*MLP,*DecoderLayer,lm_head)")
    p.add_argument("--out", default="profiles", help="output folder (default profiles/)")
    p.add_argument("--store", help="profile record store (default <out>/<matrix>.jsonl)")
    p.add_argument("--nsys", default=None,
                   help="nsys executable (default: $BENCH_NSYS, else nsys on PATH, else NVIDIA's install folders)")
    p.add_argument("--ncu", default=None,
                   help="ncu executable (default: $BENCH_NCU, else ncu on PATH, else NVIDIA's install folders)")
    p.add_argument("--ncu-metrics", choices=("full", "traffic"), default="full",
                   help="ncu's metrics per kernel: full (time, DRAM bytes, ncu's DRAM and SM %% of peak; 9 replay passes "
                        "a kernel on an H200) or traffic (time and DRAM bytes, the roofline columns alone; 1 pass: the "
                        "eager qwen-7b-shape step in about a minute)")
    p.add_argument("--no-progress", action="store_true", help="no per-cell progress lines on stderr")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per cell before the session is killed")
    p.set_defaults(func=cmd_profile, requests=None, trials=None)


@dataclass(frozen=True)
class ProfileSettings:
    """How `bench profile` profiles each cell (its flags)."""

    tool: str = "torch"
    decode_steps: int = 4
    batches: int = 1
    warmup: int = 1
    timeout: float = 1800.0
    patterns: tuple[str, ...] = ()  # () = bench.profiling.nvtx.DEFAULT_PATTERNS
    nsys: str | None = None  # the nsys executable (tool nsys), already checked
    ncu: str | None = None  # the ncu executable (tool ncu), already checked
    tool_version: str | None = None  # what `nsys --version` / `ncu --version` said
    ncu_metrics: str = "full"  # --ncu-metrics: a key of bench.profiling.ncu_collector.METRIC_SETS
    progress: bool = True  # a line on stderr as each cell starts

    def check(self) -> None:
        from bench.checks import check_number

        check_number(self.decode_steps, "--decode-steps", integer=True, minimum=1, maximum=100_000)
        check_number(self.batches, "--batches", integer=True, minimum=1, maximum=10_000)
        check_number(self.warmup, "--warmup", integer=True, minimum=0, maximum=10_000)
        check_number(self.timeout, "--timeout", above=0, hint="seconds per cell before the session is killed")


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


def cmd_profile(args) -> int:
    from bench.profiling.nvtx import DEFAULT_PATTERNS

    patterns = [p.strip() for p in args.patterns.split(",") if p.strip()] if args.patterns else list(DEFAULT_PATTERNS)
    if not patterns:
        raise BenchInputError("--patterns is empty: give class-name globs such as '*RMSNorm,*Attention'")
    settings = ProfileSettings(tool=args.tool, decode_steps=args.decode_steps, batches=args.batches, warmup=args.warmup,
                               timeout=args.timeout, patterns=tuple(patterns), progress=not args.no_progress)
    settings.check()
    matrix = load_selected_matrix(args)
    check_profilable(matrix.cells)
    if args.tool == "nsys":
        from bench.profiling.nsys_collector import find_nsys

        nsys, version = find_nsys(args.nsys)  # missing or too old: BenchInputError before any work
        settings = replace(settings, nsys=nsys, tool_version=".".join(map(str, version)))
    elif args.tool == "ncu":
        from bench.profiling.ncu_collector import find_ncu

        ncu, version = find_ncu(args.ncu)
        settings = replace(settings, ncu=ncu, tool_version=version, ncu_metrics=args.ncu_metrics)
    store_path = Path(args.store) if args.store else Path(args.out) / f"{matrix.name}.jsonl"
    _, failed = profile_matrix(matrix, settings, Path(args.out), store_path)
    return 1 if failed else 0


def profile_matrix(matrix, settings: ProfileSettings, out_root: Path, store_path: Path, printer=print) -> tuple[list, int]:
    """Profile every cell of the matrix in its own session process; return (the Profile records, how many failed).

    Records go to store_path (one per cell, appended as each finishes); files under
    out_root/<matrix>/<cell_id>-<tool>/. `printer` gets each cell's summary text.
    """
    from bench.files import check_output_dir
    from bench.profiling.kernels import KernelTable
    from bench.profiling.nvtx import DEFAULT_PATTERNS
    from bench.results.query import check_store_path
    from bench.results.records import new_context
    from bench.results.store import ResultStore

    settings.check()
    check_profilable(matrix.cells)
    if not settings.patterns:
        settings = replace(settings, patterns=tuple(DEFAULT_PATTERNS))
    store_path = check_store_path(store_path, must_exist=False)
    check_output_dir(out_root, "--out")
    context = new_context("profile", matrix=matrix.name, warmup=settings.warmup)
    failed, records = 0, []
    with ResultStore(store_path).writer() as store:
        for i, cell in enumerate(matrix.cells, 1):
            if settings.progress:
                print(f"profiling {i}/{len(matrix.cells)}: {cell.label} ({settings.tool})", file=sys.stderr, flush=True)
            record = profile_cell(cell, matrix, settings, list(settings.patterns), Path(out_root) / matrix.name,
                                  settings.nsys, context)
            store.append(record)
            records.append(record)
            if record.status != "ok":
                failed += 1
                print(f"{cell.label}: {record.status}: {record.error[:2000]}", file=sys.stderr)
                continue
            printer(_profile_text(cell, record, settings.tool, KernelTable.load(record.kernel_table)))
    print(f"profile records: {store_path}", file=sys.stderr)
    return records, failed


def _profile_text(cell, record, tool: str, table) -> str:
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


def profile_cell(cell, matrix, settings, patterns: list[str], out_root: Path, nsys: str | None, context):
    """Return the Profile record of one cell after running its session (and nsys export)."""
    from bench.results.records import new_record
    from bench.workloads.workload import cached_workload

    wl, wl_file = cached_workload(cell.workload, Path("workloads/cache"))
    out_dir = (out_root / f"{cell.cell_id}-{settings.tool}").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    job = {
        "build_key": cell.build_key().to_dict(), "cell": cell.to_dict(), "workload_file": str(Path(wl_file).resolve()),
        "engines_dir": str(Path("engines").resolve()), "tool": settings.tool, "decode_steps": settings.decode_steps,
        "batches": settings.batches, "warmup": settings.warmup, "patterns": patterns, "out_dir": str(out_dir),
    }
    job_file, result_file = out_dir / "job.json", out_dir / "session.json"
    job_file.write_text(json.dumps(job, indent=1))
    result_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "bench.profiling.session", str(job_file), str(result_file)]
    for stale in [*out_dir.glob("report*.nsys-rep"), *out_dir.glob("report*.qdstrm"), *out_dir.glob("report*.ncu-rep")]:
        stale.unlink()  # a report left by an earlier run must not pass for this one's
    if nsys:
        from bench.profiling.nsys_collector import profile_command

        argv = profile_command(nsys, out_dir / "report", argv)
    elif settings.tool == "ncu":
        from bench.profiling import ncu_collector

        argv = ncu_collector.profile_command(settings.ncu or "ncu", out_dir / "report", argv,
                                             ncu_collector.nvtx_include(_nvtx_domain()),
                                             ncu_collector.METRIC_SETS[settings.ncu_metrics])
    outcome = {"trial": 0, "status": "ok", "metrics": None, "extra": {"tool": settings.tool}, "error": None,
               "started_at": time.time()}
    environment = {}
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    log_path = out_dir / "session.log"
    try:
        t0 = time.perf_counter()
        with open(log_path, "wb") as log:
            returncode = _run_session(argv, log, env, settings.timeout)
        session_wall_s = time.perf_counter() - t0  # the whole process, the profiler's own work included
        if returncode != 0 or not result_file.is_file():
            raise RuntimeError(f"profiling session exited with status {returncode}; log {log_path}:\n"
                               + _tail(log_path))
        session = json.loads(result_file.read_text())
        session["session_wall_s"] = session_wall_s
        if settings.tool_version:
            session[f"{settings.tool}_version"] = settings.tool_version
        if nsys:
            session.update(_read_nsys(nsys, out_dir, cell))
        elif settings.tool == "ncu":
            session.update(_read_ncu(settings.ncu or "ncu", out_dir, cell, session), ncu_metrics=settings.ncu_metrics)
        outcome["extra"] = {"tool": settings.tool, "kernel_table": session.pop("kernel_table"),
                            "trace": session.pop("trace", None),
                            "profile": {k: v for k, v in session.items() if k != "environment"}}
        environment = session.get("environment", {})
        write_side_tables(Path(outcome["extra"]["kernel_table"]))
    except subprocess.TimeoutExpired:
        outcome.update(status="timeout", error=f"profiling session ran past {settings.timeout} s; log {log_path}")
    except (RuntimeError, BenchInputError, OSError, ValueError, KeyError) as exc:
        outcome.update(status="error", error=f"{type(exc).__name__}: {exc}")
    outcome["ended_at"] = time.time()
    return new_record("profile", cell, outcome, context=context, workload=wl.summary(), environment=environment)


def _run_session(argv: list[str], log, env: dict, timeout: float) -> int:
    """Run the session (under ncu or nsys, if argv says so) in its own process group; return its exit status.

    On a timeout the whole group is killed, not only argv[0]: killing ncu alone left the session it was
    replaying running on the H200 (2026-12-01: its log went on from kernel 1,174 to 1,182 after the timeout),
    holding the GPU while the next cell ran. subprocess.TimeoutExpired is raised again for the caller.
    """
    from bench.execution.supervisor import kill_group

    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except BaseException:  # the timeout, or Ctrl-C: nothing of the session outlives this call
        kill_group(proc)
        raise


def _nvtx_domain() -> str | None:
    """Return the NVTX domain the session's ranges will use (bench.profiling.nvtx): `bench` with the nvtx package."""
    import importlib.util

    from bench.profiling.nvtx import NVTX_DOMAIN

    return NVTX_DOMAIN if importlib.util.find_spec("nvtx") is not None else None


def _read_nsys(nsys: str, out_dir: Path, cell) -> dict:
    from bench.profiling.nsys_collector import (
        export_command,
        report_file,
        table_from_sqlite,
    )

    report = report_file(out_dir, _tail(out_dir / "session.log", 20000))  # only a .qdstrm: the libdw fix, named
    sqlite_path = out_dir / "report.sqlite"
    done = subprocess.run(export_command(nsys, report, sqlite_path), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"nsys export failed ({done.returncode}): {done.stderr[-2000:]}")
    table = table_from_sqlite(sqlite_path, meta={"cell_id": cell.cell_id, "label": cell.label})
    path = table.save(out_dir / "kernel_table.json")
    schema = {k: table.meta.get(k) for k in ("nsys_version", "export_schema", "metadata_table", "tables_read",
                                             "graph_kernels", "graph_kernels_by_time", "notes")}
    return {"kernel_table": str(path), "trace": str(report), "sqlite": str(sqlite_path), "nsys_export": schema}


def _read_ncu(ncu: str, out_dir: Path, cell, session: dict) -> dict:
    from bench.profiling import ncu_collector

    reports = sorted(out_dir.glob("report*.ncu-rep"))
    if not reports:
        raise RuntimeError(f"ncu wrote no report in {out_dir}: the NVTX filter matched no kernel or ncu failed "
                           f"(see {out_dir / 'session.log'})")
    done = subprocess.run(ncu_collector.export_command(ncu, reports[-1]), capture_output=True, text=True, timeout=900,
                          env=ncu_collector.export_env())
    if done.returncode != 0:
        raise RuntimeError(f"ncu --import failed ({done.returncode}): {done.stderr[-2000:]}")
    (out_dir / "ncu_raw.csv").write_text(done.stdout)
    kernels = ncu_collector.parse_csv(done.stdout)
    bw = (session.get("copy_bandwidth") or {}).get("bandwidth_bytes_s")
    meta = {"cell_id": cell.cell_id, "label": cell.label, "ncu_version": session.get("ncu_version"),
            "range": ncu_collector.NCU_STEP}
    return {**ncu_collector.write_roofline(kernels, bw, meta, out_dir), "trace": str(reports[-1])}


def write_side_tables(table_path: Path) -> None:
    """Write kernel_table.md and categories.csv next to the kernel table (one place writes them)."""
    from bench.profiling.kernels import KernelTable

    table = KernelTable.load(table_path)
    table_path.with_suffix(".md").write_text(table.to_markdown())
    with open(table_path.with_name("categories.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["category", "kernels", "total_us", "share"])
        for c in table.categories:
            w.writerow([c.category, c.kernels, f"{c.total_us:.3f}", f"{c.share:.6f}"])


def _tail(path: Path, n: int = 3000) -> str:
    data = path.read_bytes()
    return data[-n:].decode(errors="replace")
