"""Collector 2: Nsight Systems. Runs a command under `nsys profile`, exports SQLite, reads it.

The reader gives nsys's `nvtx_kern_sum` semantics: a kernel belongs to every NVTX push/pop
or start/end range, on the thread that made the kernel's CUDA runtime API call, that encloses
that call; kernel and call are joined by correlationId within one process. Tables read:
CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS, StringIds. The export
schema differs between nsys versions (the reader checks which tables and columns exist):
tested on real exports from nsys 2022.2 (schema 2.9.1) and 2024.5 (schema 3.13.2).

CUDA graphs: with `--cuda-graph-trace=node` every node's kernel is its own kernel row, with a
`graphNodeId`; CUPTI gives it the correlationId of the API call that launched the graph
(CUpti_ActivityKernel*: "identical to the correlation ID in the driver or runtime API activity
record that launched the kernel"), so it joins the cudaGraphLaunch call and sits in the NVTX
ranges enclosing that launch, as torch.profiler puts a replay's kernels in the enclosing range.
A graph kernel whose correlationId matches no call is placed by time: in the ranges of the
latest cudaGraphLaunch of its process that began before it (`info["graph_kernels_by_time"]`).

nsys discovery (`find_nsys`): an explicit path (`--nsys`), else $BENCH_NSYS, else PATH, else
NVIDIA's install folders (NSYS_GLOBS), newest first; the H200 image's only nsys is the copy
bundled inside Nsight Compute (scripts/nsys-on-device.sh).

Status: the reader has met the real exports above; the collector ran on an H200 on 2026-12-01
with the nsys 2025.3.1 bundled in Nsight Compute (docs/guide/profiling.md).
"""

from __future__ import annotations

import bisect
import glob
import math
import os
import re
import shutil
import sqlite3
import subprocess
from collections import defaultdict
from pathlib import Path

from bench.errors import BenchInputError
from bench.execution.kernels import (
    STEP_GROUP,
    AttributedKernel,
    KernelTable,
    RangeSpan,
    build_kernel_table,
    range_group,
)

# 2022.2 is the oldest nsys whose export the reader has been tested on; --capture-range,
# --cuda-graph-trace and `nsys export --type sqlite` all exist there.
MIN_NSYS_VERSION = (2022, 2)
NVTX_PUSHPOP = 59  # NVTX_EVENTS.eventType of nvtxRangePush/Pop ranges
NVTX_STARTEND = 60  # ... of nvtxRangeStart/End ranges
NVTX_DOMAIN_CREATE = 75  # ... of nvtxDomainCreate: its text is the domain's name, its domainId the domain's id
REQUIRED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds")


def parse_nsys_version(text: str) -> tuple[int, int, int]:
    """Return (year, minor, patch) from `nsys --version` output; BenchInputError if none."""
    m = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise BenchInputError(f"cannot read a version from `nsys --version`: {text.strip()[:200]!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


NSYS_ENV = "BENCH_NSYS"
# NVIDIA's usual install folders, searched after PATH: Nsight Systems' own installer, the CUDA
# toolkit's copy, and the nsys CLI that Nsight Compute bundles (host/target-linux-x64/), which is
# the only one on the H200 image (/opt/nvidia/nsight-compute/2025.3.1/..., see nsys-on-device.sh).
NSYS_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda*/nsight-compute*/host/target-linux-x64/nsys",
)


def _version_key(path: str) -> tuple:
    """Return a sort key: the numbers in the path's folders (2025.3.1 > 2024.5.1), then the path."""
    return tuple(int(n) for n in re.findall(r"\d+", path)), path


def nsys_candidates(exe: str | None = None, globs: tuple[str, ...] = NSYS_GLOBS) -> list[tuple[str, str]]:
    """Return [(path, where it came from)] of the nsys executables to try, in order.

    An explicit `exe` is the only candidate (a wrong one is an error, not a fallback); else
    $BENCH_NSYS alone; else nsys on PATH, then each install folder's, newest version first.
    """
    if exe:
        return [(shutil.which(exe) or exe, "--nsys")]
    if os.environ.get(NSYS_ENV):
        return [(shutil.which(os.environ[NSYS_ENV]) or os.environ[NSYS_ENV], f"${NSYS_ENV}")]
    found = []
    on_path = shutil.which("nsys")
    if on_path:
        found.append((on_path, "PATH"))
    for pattern in globs:
        for p in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if os.access(p, os.X_OK) and all(os.path.realpath(p) != os.path.realpath(f) for f, _ in found):
                found.append((p, pattern))
    return found


def find_nsys(exe: str | None = None, globs: tuple[str, ...] = NSYS_GLOBS) -> tuple[str, tuple[int, int, int]]:
    """Return (path of nsys, its version); BenchInputError when missing or older than MIN_NSYS_VERSION.

    Where it looks: see nsys_candidates (explicit path, $BENCH_NSYS, PATH, NSYS_GLOBS).
    """
    candidates = nsys_candidates(exe, globs)
    path = next((p for p, _ in candidates if os.path.isfile(p) and os.access(p, os.X_OK)), None)
    if path is None:
        where = f"{candidates[0][1]} names {candidates[0][0]!r}, which is not an executable file" if candidates else (
            f"not on PATH, ${NSYS_ENV} unset, and none under {', '.join(globs)}")
        raise BenchInputError(
            f"nsys (Nsight Systems) not found: {where}. Install Nsight Systems >= "
            f"{'.'.join(map(str, MIN_NSYS_VERSION))}, pass its path with --nsys PATH or ${NSYS_ENV}, or use `--tool torch`"
            " (on the H200 image: `source scripts/nsys-on-device.sh env` puts Nsight Compute's bundled nsys on PATH)"
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


def report_file(out_dir: str | Path, log_text: str = "") -> Path:
    """Return the .nsys-rep (or .qdrep) nsys wrote in out_dir; BenchInputError naming the fix when there is none.

    When only a .qdstrm is there, nsys ran but its QdstrmImporter could not turn the raw stream
    into a report: on the H200 image it cannot load libdw.so.1 (docs/guide/profiling.md).
    """
    out_dir = Path(out_dir)
    reports = sorted(out_dir.glob("report*.nsys-rep")) or sorted(out_dir.glob("report*.qdrep"))
    if reports:
        return reports[-1]
    streams = sorted(out_dir.glob("report*.qdstrm"))
    if streams:
        why = next((line.strip() for line in log_text.splitlines() if "libdw" in line or "QdstrmImporter" in line), "")
        raise BenchInputError(
            f"nsys wrote only {streams[-1]} and no .nsys-rep: its QdstrmImporter could not convert the capture"
            + (f" ({why[:300]})" if why else "") + ". It needs libdw.so.1 and libelf.so.1: install them "
            "(Debian/Ubuntu: apt-get install libdw1 libelf1), or, where nothing can be installed (the H200 "
            "image), run `bash scripts/nsys-on-device.sh prepare` on a machine with apt, carry .nsyslib/ to the GPU "
            "machine and `source scripts/nsys-on-device.sh env` there before `bench profile --tool nsys`"
        )
    raise BenchInputError(f"nsys wrote no report in {out_dir} (did the window reach cudaProfilerStart?)")


def export_schema(con, tables: set[str]) -> dict:
    """Return what an export says about itself: nsys version, schema version, the metadata table's name, and
    which of the tables the reader uses are present."""
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
    meta = dict(con.execute(f"SELECT name, value FROM {meta_table}").fetchall()) if meta_table else {}
    used = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
            "CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS")
    return {"nsys_version": meta.get("EXPORT_PRODUCT_VERSION"), "export_schema": meta.get("EXPORT_SCHEMA_VERSION"),
            "metadata_table": meta_table, "tables_read": sorted(t for t in used if t in tables)}


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
    return _read_sqlite(path)[:3]


def _read_sqlite(path: str | Path) -> tuple[list[AttributedKernel], dict[str, set], dict, list[RangeSpan]]:
    """read_sqlite, and the host spans (µs) of the NVTX ranges on the threads that pushed decode-step ranges."""
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
        try:
            return _read(con, tables)
        except BenchInputError as exc:
            raise BenchInputError(f"{str(path)!r}: {exc}") from exc
        except sqlite3.Error as exc:  # a truncated file, or tables without the columns nsys writes
            raise BenchInputError(f"{str(path)!r} cannot be read as an nsys export ({type(exc).__name__}: {exc}): give "
                                  "the whole file `nsys export --type sqlite` wrote") from exc
        except (TypeError, ValueError, OverflowError) as exc:  # text where nsys writes numbers, NULL times, ...
            raise BenchInputError(f"{str(path)!r} holds a value nsys does not write in its kernel, runtime or NVTX "
                                  f"tables ({type(exc).__name__}: {exc}): an edited or damaged export") from exc
    finally:
        con.close()


def _read(con, tables: set[str]) -> tuple[list[AttributedKernel], dict[str, set], dict, list[RangeSpan]]:
    notes = []
    kcols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_cols = [c for c in ("demangledName", "shortName") if c in kcols]
    if not name_cols:
        raise BenchInputError(f"CUPTI_ACTIVITY_KIND_KERNEL has no kernel-name column (columns: {sorted(kcols)})")
    names = [f"(SELECT value FROM StringIds WHERE id = k.{c})" for c in name_cols]
    name_expr = f"COALESCE({', '.join(names)})" if len(names) > 1 else names[0]  # SQLite's COALESCE takes 2 or more
    pid_expr = "k.globalPid" if "globalPid" in kcols else "NULL"
    graph_expr = "k.graphNodeId" if "graphNodeId" in kcols else "NULL"
    kernels_rows = con.execute(
        f"SELECT k.start, k.end, k.correlationId, {pid_expr}, {name_expr}, {graph_expr}"
        " FROM CUPTI_ACTIVITY_KIND_KERNEL k ORDER BY k.start"
    ).fetchall()

    # One runtime call per (process, correlationId): older exports hold nested duplicates
    # (cudaLaunchKernel around cudaLaunchKernel_v7000); the outer span is the call.
    calls: dict[tuple, tuple[int, int, int]] = {}
    graph_launches: dict[object, list[tuple[int, int, int]]] = defaultdict(list)  # pid -> [(start, end, tid)]
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        rcols = _columns(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
        is_graph = ("MAX((SELECT value FROM StringIds WHERE id = r.nameId) LIKE 'cudaGraphLaunch%')"
                    if "nameId" in rcols else "0")
        for tid, corr, start, end, graph in con.execute(
            f"SELECT r.globalTid, r.correlationId, MIN(r.start), MAX(r.end), {is_graph} FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
            " GROUP BY r.globalTid, r.correlationId"
        ):
            calls[(tid >> 24 if tid is not None else None, corr)] = (tid, start, end)
            if graph:
                graph_launches[tid >> 24 if tid is not None else None].append((start, end, tid))
        for lst in graph_launches.values():
            lst.sort()
    else:
        notes.append("no CUPTI_ACTIVITY_KIND_RUNTIME table: kernels cannot be placed in NVTX ranges")

    ranges_by_tid: dict[int, list[tuple[int, int, str, int]]] = defaultdict(list)
    instances: dict[str, set] = defaultdict(set)
    if "NVTX_EVENTS" in tables:
        rows, domains = nvtx_ranges(con)
        for rowid, start, end, tid, label in rows:
            label = label if label is not None else "(unnamed)"
            ranges_by_tid[tid].append((start, end, label, rowid))
            instances[label].add(rowid)
        for lst in ranges_by_tid.values():
            lst.sort()
    else:
        domains = {"nvtx_domain": None, "nvtx_ranges_left_out": {}}
        notes.append("no NVTX_EVENTS table: the report holds no NVTX ranges (was nvtx traced?)")

    starts = {tid: [r[0] for r in lst] for tid, lst in ranges_by_tid.items()}
    kernels: list[AttributedKernel] = []
    unmatched = 0
    graph_kernels = by_time = 0
    for kstart, kend, corr, pid, name, graph_node in kernels_rows:
        call = calls.get((pid >> 24 if pid is not None else None, corr))
        if call is None and pid is None:
            call = next((c for (p, cid), c in calls.items() if cid == corr), None)
        if graph_node:  # a node of a replayed CUDA graph (--cuda-graph-trace=node)
            graph_kernels += 1
            if call is None:  # no call of its correlationId: the latest graph launch before it
                launches = graph_launches.get(pid >> 24 if pid is not None else None, [])
                i = bisect.bisect_right(launches, (kstart, float("inf"), float("inf")))
                if i:
                    start, end, tid = launches[i - 1]
                    call = (tid, start, end)
                    by_time += 1
        enclosing: list[tuple[int, int, str, int]] = []
        if call is None:
            unmatched += 1
        else:
            tid, cstart, cend = call
            lst = ranges_by_tid.get(tid, [])
            hi = bisect.bisect_right(starts.get(tid, []), cstart)
            enclosing = [r for r in lst[:hi] if r[1] >= cend]
            enclosing.sort(key=lambda r: (r[0], -r[1]))  # outermost first
        duration_us = (kend - kstart) / 1000.0
        if not math.isfinite(duration_us) or duration_us < 0:
            raise ValueError(f"kernel {name!r} runs from {kstart} to {kend} ns")
        kernels.append(AttributedKernel(
            name if isinstance(name, str) else "(unnamed)", duration_us, tuple((r[2], r[3]) for r in enclosing), kstart
        ))
    if unmatched and calls:
        notes.append(f"{unmatched} kernel(s) had no matching runtime call (correlationId)")
    info = {
        **export_schema(con, tables),
        "kernels": len(kernels_rows),
        "graph_kernels": graph_kernels,
        "graph_kernels_by_time": by_time,
        "nvtx_ranges": sum(len(v) for v in ranges_by_tid.values()),
        **domains,
        "notes": notes,
    }
    # Host spans for the time each module range holds inside a step (kernels.host_time_by_module): the threads that
    # pushed decode-step ranges only (another thread's ranges would nest into the steps by time alone).
    step_tids = {tid for tid, lst in ranges_by_tid.items() if any(range_group(r[2]) == STEP_GROUP for r in lst)}
    spans = [RangeSpan(label, start / 1e3, end / 1e3) for tid in step_tids for start, end, label, _ in ranges_by_tid[tid]
             if end >= start]
    return kernels, dict(instances), info, spans


def nvtx_ranges(con) -> tuple[list[tuple], dict]:
    """Return the NVTX ranges the reader uses, (rowid, start, end, globalTid, label) in start order, and their domain.

    When the export holds the harness's own domain (bench.execution.nvtx.NVTX_DOMAIN), only that
    domain's ranges: libraries push ranges of their own, which torch.profiler never sees (the
    H200's eager qwen-7b-shape window, 2026-12-02: CUB's `cub::DeviceScan::InclusiveScan` in the
    CCCL domain, around 2 of generate's kernels). Else, where NVTX's default domain holds the
    harness's decode-step ranges (a session without the `nvtx` package pushes them through
    torch.cuda.nvtx, in that domain), only the default domain's: the H100's eager window (2026-12-06), made without the `nvtx`
    package, had CUB's range again, as a `cub` range group torch's table cannot have. Else (an
    export made outside the harness: an MPI program's own ranges and its MPI library's) every domain's. The
    dict: {"nvtx_domain": the domain read ("(default)" for NVTX's default one) or None for all,
    "nvtx_ranges_left_out": {domain name: ranges}}.
    """
    from bench.execution.nvtx import NVTX_DOMAIN

    ncols = _columns(con, "NVTX_EVENTS")
    text = "COALESCE(n.text, (SELECT value FROM StringIds WHERE id = n.textId))" if "textId" in ncols else "n.text"
    domain_col = "n.domainId" if "domainId" in ncols else "0"
    rows = con.execute(
        f"SELECT n.rowid, n.start, n.end, n.globalTid, {text}, {domain_col} FROM NVTX_EVENTS n"
        f" WHERE n.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND n.end IS NOT NULL ORDER BY n.start"
    ).fetchall()
    names = {}
    if "domainId" in ncols:
        names = {dom: name for dom, name in con.execute(
            f"SELECT n.domainId, {text} FROM NVTX_EVENTS n WHERE n.eventType = {NVTX_DOMAIN_CREATE}")}
    ours = next((dom for dom, name in names.items() if name == NVTX_DOMAIN), None)

    def domain(dom) -> int | None:  # NVTX's default domain: 0 (or no id) in the export
        return dom if dom else None

    if ours is None:
        harness = any(domain(r[5]) is None and isinstance(r[4], str) and range_group(r[4]) == STEP_GROUP for r in rows)
        if not harness or all(domain(r[5]) is None for r in rows):
            return [r[:5] for r in rows], {"nvtx_domain": None, "nvtx_ranges_left_out": {}}
        read, read_name = None, "(default)"
    else:
        read, read_name = ours, NVTX_DOMAIN
    left_out: dict[str, int] = defaultdict(int)
    for r in rows:
        if domain(r[5]) != read:
            left_out[names.get(r[5], "(default)" if not r[5] else f"domain {r[5]}")] += 1
    return ([r[:5] for r in rows if domain(r[5]) == read],
            {"nvtx_domain": read_name, "nvtx_ranges_left_out": dict(left_out)})


def table_from_sqlite(path: str | Path, *, innermost_only: bool = False, meta: dict | None = None) -> KernelTable:
    """Return the KernelTable of an nsys SQLite export (GPU kernels, nvtx_kern_sum attribution), with the host time
    of each module range per decode step where the export has decode-step ranges."""
    kernels, instances, info, spans = _read_sqlite(path)
    return build_kernel_table(kernels, instances, source="nsys", unit="gpu_kernel", innermost_only=innermost_only,
                              meta={**(meta or {}), **info, "sqlite": str(path)}, spans=spans)


def timeline_spans(path: str | Path, group: str | None = "decode_step", limit: int = 3) -> dict:
    """Return the first `limit` instances of an NVTX range group and the GPU kernels launched inside each.

    group None: the group of the innermost range around the first kernel launched in one.

    {"group", "ranges": [{"label", "start_us", "end_us"}], "kernels": [{"range", "name", "category",
    "start_us", "end_us"}]}: times in us from the start of the kernel's own range (the CPU-side
    NVTX range; its kernels run on the GPU, possibly after the range has closed). A kernel
    belongs to the innermost chosen range enclosing its launch (as in read_sqlite). {} ranges
    when the export holds none of the group.
    """
    kernels, _, _ = read_sqlite(path)
    try:
        return _spans(path, kernels, group, limit)
    except (sqlite3.Error, TypeError, ValueError, AttributeError) as exc:  # NVTX rows an nsys export does not hold
        raise BenchInputError(f"{str(path)!r}: its NVTX ranges cannot be read ({type(exc).__name__}: {exc}): an "
                              "edited or damaged export") from exc


def _spans(path, kernels: list, group: str | None, limit: int) -> dict:
    from bench.execution.kernels import categorize, range_group

    if group is None:
        first = next((k for k in kernels if k.ranges), None)
        if first is None:
            return {"group": None, "ranges": [], "kernels": []}
        group = range_group(first.ranges[-1][0])
    con = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        tables = _tables(con)
        if "NVTX_EVENTS" not in tables:
            return {"group": group, "ranges": [], "kernels": []}
        rows, _ = nvtx_ranges(con)
    finally:
        con.close()
    chosen = [r for r in rows if r[4] is not None and range_group(r[4]) == group][:limit]
    origin = {rowid: (start, label) for rowid, start, _, _, label in chosen}
    out_kernels = []
    for k in kernels:
        key = next((key for label, key in reversed(k.ranges) if key in origin and origin[key][1] == label), None)
        if key is None or k.start_ns is None:
            continue
        start, label = origin[key]
        t0 = (k.start_ns - start) / 1000.0
        out_kernels.append({"range": label, "name": k.name, "category": categorize(k.name),
                            "start_us": t0, "end_us": t0 + k.duration_us})
    return {"group": group,
            "ranges": [{"label": label, "start_us": 0.0, "end_us": (end - start) / 1000.0}
                       for _, start, end, _, label in chosen],
            "kernels": out_kernels}
