"""Collector 2: Nsight Systems. Runs a command under `nsys profile`, exports SQLite, reads it.

The reader gives nsys's `nvtx_kern_sum` semantics: a kernel belongs to every NVTX push/pop
or start/end range, on the thread that made the kernel's CUDA runtime API call, that encloses
that call; kernel and call are joined by correlationId within one process. Tables read:
CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS, StringIds. The export
schema differs between nsys versions (the reader checks which tables and columns exist):
tested on real exports from nsys 2022.2 (schema 2.9.1) and 2024.5 (schema 3.13.2).

Status: the reader has met those real exports; the collector (running nsys) has not met a
real nsys on our GPU machine, which has none. See docs/profiling.md.
"""

from __future__ import annotations

import bisect
import re
import shutil
import sqlite3
import subprocess
from collections import defaultdict
from pathlib import Path

from bench.errors import BenchInputError
from bench.profiling.kernels import AttributedKernel, KernelTable, build_kernel_table

# 2022.2 is the oldest nsys whose export the reader has been tested on; --capture-range,
# --cuda-graph-trace and `nsys export --type sqlite` all exist there.
MIN_NSYS_VERSION = (2022, 2)
NVTX_PUSHPOP = 59  # NVTX_EVENTS.eventType of nvtxRangePush/Pop ranges
NVTX_STARTEND = 60  # ... of nvtxRangeStart/End ranges
REQUIRED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds")


def parse_nsys_version(text: str) -> tuple[int, int, int]:
    """Return (year, minor, patch) from `nsys --version` output; BenchInputError if none."""
    m = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise BenchInputError(f"cannot read a version from `nsys --version`: {text.strip()[:200]!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def find_nsys(exe: str | None = None) -> tuple[str, tuple[int, int, int]]:
    """Return (path of nsys, its version); BenchInputError when missing or older than MIN_NSYS_VERSION."""
    path = shutil.which(exe or "nsys")
    if path is None:
        raise BenchInputError(
            "nsys (Nsight Systems) is not on PATH: install Nsight Systems >= "
            f"{'.'.join(map(str, MIN_NSYS_VERSION))} (or pass its path), or use `--tool torch`"
        )
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchInputError(f"cannot run {path} --version: {exc}") from exc
    version = parse_nsys_version(out.stdout + out.stderr)
    if version[:2] < MIN_NSYS_VERSION:
        raise BenchInputError(
            f"nsys {'.'.join(map(str, version))} at {path} is too old: need >= "
            f"{'.'.join(map(str, MIN_NSYS_VERSION))} (its SQLite export is what the reader is tested on)"
        )
    return path, version


def profile_command(nsys: str, output_base: str | Path, argv: list[str]) -> list[str]:
    """Return the `nsys profile` command line that records `argv` between cudaProfilerStart/Stop.

    The profiled program opens the capture range around its measured window only (warm-up is
    outside it); CUDA graphs are traced per node so their kernels are counted one by one.
    """
    return [
        nsys, "profile", "-t", "cuda,nvtx", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
        "--cuda-graph-trace=node", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
        "-o", str(output_base), *argv,
    ]


def export_command(nsys: str, report: str | Path, sqlite_path: str | Path) -> list[str]:
    """Return the `nsys export` command line that writes the report's SQLite database."""
    return [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite_path), str(report)]


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(con, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}


def read_sqlite(path: str | Path) -> tuple[list[AttributedKernel], dict[str, set], dict]:
    """Return (attributed kernels, NVTX range instances, info) of an nsys SQLite export.

    BenchInputError when the file is not an SQLite database or lacks the kernel tables. A
    report without NVTX_EVENTS (no ranges recorded) or without CUPTI_ACTIVITY_KIND_RUNTIME
    still gives every kernel, outside any range; `info["notes"]` says so.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchInputError(f"nsys SQLite export {str(path)!r} does not exist")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = _tables(con)
    except sqlite3.DatabaseError as exc:
        raise BenchInputError(f"{str(path)!r} is not an SQLite database ({exc}): give the .sqlite file "
                              "written by `nsys export --type sqlite`") from exc
    try:
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise BenchInputError(
                f"{str(path)!r} has no table(s) {missing}: it is not an nsys export with CUDA kernels "
                f"(profile with `nsys profile -t cuda,nvtx` and export with `nsys export --type sqlite`); "
                f"tables present: {sorted(tables)[:20]}"
            )
        return _read(con, tables)
    finally:
        con.close()


def _read(con, tables: set[str]) -> tuple[list[AttributedKernel], dict[str, set], dict]:
    notes = []
    kcols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_cols = [c for c in ("demangledName", "shortName") if c in kcols]
    if not name_cols:
        raise BenchInputError(f"CUPTI_ACTIVITY_KIND_KERNEL has no kernel-name column (columns: {sorted(kcols)})")
    name_expr = "COALESCE(" + ", ".join(f"(SELECT value FROM StringIds WHERE id = k.{c})" for c in name_cols) + ")"
    pid_expr = "k.globalPid" if "globalPid" in kcols else "NULL"
    kernels_rows = con.execute(
        f"SELECT k.start, k.end, k.correlationId, {pid_expr}, {name_expr} FROM CUPTI_ACTIVITY_KIND_KERNEL k"
        " ORDER BY k.start"
    ).fetchall()

    # One runtime call per (process, correlationId): older exports hold nested duplicates
    # (cudaLaunchKernel around cudaLaunchKernel_v7000); the outer span is the call.
    calls: dict[tuple, tuple[int, int, int]] = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for tid, corr, start, end in con.execute(
            "SELECT globalTid, correlationId, MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            " GROUP BY globalTid, correlationId"
        ):
            calls[(tid >> 24 if tid is not None else None, corr)] = (tid, start, end)
    else:
        notes.append("no CUPTI_ACTIVITY_KIND_RUNTIME table: kernels cannot be placed in NVTX ranges")

    ranges_by_tid: dict[int, list[tuple[int, int, str, int]]] = defaultdict(list)
    instances: dict[str, set] = defaultdict(set)
    if "NVTX_EVENTS" in tables:
        ncols = _columns(con, "NVTX_EVENTS")
        text = "COALESCE(n.text, (SELECT value FROM StringIds WHERE id = n.textId))" if "textId" in ncols else "n.text"
        for rowid, start, end, tid, label in con.execute(
            f"SELECT n.rowid, n.start, n.end, n.globalTid, {text} FROM NVTX_EVENTS n"
            f" WHERE n.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND n.end IS NOT NULL"
        ):
            label = label if label is not None else "(unnamed)"
            ranges_by_tid[tid].append((start, end, label, rowid))
            instances[label].add(rowid)
        for lst in ranges_by_tid.values():
            lst.sort()
    else:
        notes.append("no NVTX_EVENTS table: the report holds no NVTX ranges (was nvtx traced?)")

    starts = {tid: [r[0] for r in lst] for tid, lst in ranges_by_tid.items()}
    kernels: list[AttributedKernel] = []
    unmatched = 0
    for kstart, kend, corr, pid, name in kernels_rows:
        call = calls.get((pid >> 24 if pid is not None else None, corr))
        if call is None and pid is None:
            call = next((c for (p, cid), c in calls.items() if cid == corr), None)
        enclosing: list[tuple[int, int, str, int]] = []
        if call is None:
            unmatched += 1
        else:
            tid, cstart, cend = call
            lst = ranges_by_tid.get(tid, [])
            hi = bisect.bisect_right(starts.get(tid, []), cstart)
            enclosing = [r for r in lst[:hi] if r[1] >= cend]
            enclosing.sort(key=lambda r: (r[0], -r[1]))  # outermost first
        kernels.append(AttributedKernel(
            name or "(unnamed)", (kend - kstart) / 1000.0, tuple((r[2], r[3]) for r in enclosing)
        ))
    if unmatched and calls:
        notes.append(f"{unmatched} kernel(s) had no matching runtime call (correlationId)")
    meta = {}
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in tables:
            meta = dict(con.execute(f"SELECT name, value FROM {t}").fetchall())
            break
    info = {
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "export_schema": meta.get("EXPORT_SCHEMA_VERSION"),
        "kernels": len(kernels_rows),
        "nvtx_ranges": sum(len(v) for v in ranges_by_tid.values()),
        "notes": notes,
    }
    return kernels, dict(instances), info


def table_from_sqlite(path: str | Path, *, innermost_only: bool = False, meta: dict | None = None) -> KernelTable:
    """Return the KernelTable of an nsys SQLite export (GPU kernels, nvtx_kern_sum attribution)."""
    kernels, instances, info = read_sqlite(path)
    return build_kernel_table(kernels, instances, source="nsys", unit="gpu_kernel", innermost_only=innermost_only,
                              meta={**(meta or {}), **info, "sqlite": str(path)})
