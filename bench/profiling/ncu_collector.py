"""Collector 3: Nsight Compute. Every kernel of one decode step against the DRAM roofline.

`bench profile --tool ncu` runs the session process under `ncu`, NVTX-filtered so that only
the kernels inside the first decode step's range (`decode_step:1`, domain `bench`) are
replayed, with the GPU clocks left as they are (`--clock-control none`, as in the measured
runs; ncu locks them to base by default), only in the root process (`--target-processes
application-only`: the decode step runs there; on the H200 a compiled cell's session crashed with a
segmentation fault right after ncu attached to a second process started during torch.compile, under
`all`). Five metrics per kernel (`--ncu-metrics full`, the default):

    gpu__time_duration.sum                                kernel duration
    dram__bytes_read.sum, dram__bytes_write.sum           DRAM traffic
    dram__throughput.avg.pct_of_peak_sustained_elapsed    DRAM bandwidth, % of ncu's peak
    sm__throughput.avg.pct_of_peak_sustained_elapsed      compute throughput (SM), % of peak

`--ncu-metrics traffic` keeps the first three: ncu's two "% of peak" figures are breakdowns over
many counters, and the five take 9 replay passes per kernel on the H200, about 0.45 s a kernel (the
compiled qwen-7b-shape step's 655 kernels: a 324 s session; the eager step's ~1,460 did not finish
in 530 s). The three take 1 pass: 49 s for the compiled step, 57-60 s for the eager one (2026-12-02).
The roofline columns (achieved bandwidth against the measured copy bandwidth) need only time and
bytes; the two ncu columns then print "-".

The roofline's bandwidth is the harness's own measured copy bandwidth
(bench/backends/speed_of_light.py: read + written bytes per second of a device copy), the
figure the speed-of-light column divides by; so a kernel's "% of copy bandwidth" is
(read + written bytes) / duration over it, and its time at that bandwidth is bytes / it.
The step's speed of light is not its measured DRAM traffic (which re-reads and spills inflate)
but the bytes it must read, as the `% SOL` column counts them (speed_of_light.decode_step_bytes:
the weights read whole, one embedding row per sequence, the KV cache at the step's context
lengths), passed in by the session as meta["step_bound"]; a step faster than that bound is
flagged impossible (IMPOSSIBLE), a timing or accounting bug.

Flags and metric names, from the Nsight Compute CLI documentation
(https://docs.nvidia.com/nsight-compute/NsightComputeCli/index.html): `--nvtx` with
`--nvtx-include "<domain>@<range>/"` (a trailing `/` names a push/pop range; `domain@` picks the
NVTX domain), `--clock-control none`, `--metrics a,b,...`, `-o`/`--export` a report and `-f`
(`--force-overwrite`); `--import REPORT --csv --page raw --print-units base` prints one CSV row
per profiled kernel, a header row of column names, then a row of units. ncu replays each kernel
(kernel replay, caches flushed between passes: `--cache-control all`, the default), so its
durations are of a kernel run alone, cold, not of the back-to-back stream nsys records.

Status: ran on an H200 (2026-12-02, docs/measurements/2026-12-02-h200-profilers-side-by-side.md):
the compiled and eager qwen-7b-shape steps, each in two processes, 655 and 1463 kernels as nsys
counts them. The parser is tested on a CSV hand-made from the documented format and on that run's
captured CSV (tests/data/ncu/); `bench kernels ncu_raw.csv` re-reads a stored one (write_roofline).
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.errors import BenchInputError
from bench.execution.kernels import (
    CATEGORIES,
    AttributedKernel,
    KernelTable,
    build_kernel_table,
    categorize,
)

NCU_ENV = "BENCH_NCU"
NCU_STEP = "decode_step:1"  # the range ncu replays: the window's first decode step
METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
REQUIRED = METRICS[:3]  # time and DRAM bytes: what the roofline columns need
METRIC_SETS = {"full": METRICS, "traffic": REQUIRED}  # --ncu-metrics
NCU_GLOBS = (
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/cuda*/bin/ncu",
    "/usr/local/cuda*/nsight-compute*/ncu",
)
# Units ncu prints (base units with --print-units base; scaled ones otherwise) -> factor to ns / bytes.
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_BYTES = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "kibyte": 1024.0, "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3}


def nvtx_include(domain: str | None, step: str = NCU_STEP) -> str:
    """Return ncu's --nvtx-include expression for the push/pop range `step` (in `domain`, or NVTX's default one)."""
    return f"{domain}@{step}/" if domain else f"{step}/"


def find_ncu(exe: str | None = None, globs: tuple[str, ...] = NCU_GLOBS) -> tuple[str, str]:
    """Return (path of ncu, its version text); BenchInputError naming the fix when there is none.

    Looks, in order: an explicit path (`--ncu`), $BENCH_NCU, PATH, NVIDIA's install folders.
    """
    if exe or os.environ.get(NCU_ENV):
        given = exe or os.environ[NCU_ENV]
        candidates = [shutil.which(given) or given]
    else:
        candidates = [p for p in [shutil.which("ncu")] if p]
        for pattern in globs:
            candidates += sorted(glob.glob(pattern), key=lambda p: [int(n) for n in re.findall(r"\d+", p)], reverse=True)
    path = next((p for p in candidates if os.path.isfile(p) and os.access(p, os.X_OK)), None)
    if path is None:
        raise BenchInputError(
            "ncu (Nsight Compute) not found: " + (f"{candidates[0]!r} is not an executable file" if candidates else
                                                  f"not on PATH, ${NCU_ENV} unset, none under {', '.join(globs)}")
            + "; install Nsight Compute, pass --ncu PATH or set $BENCH_NCU, or use `--tool torch`")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchInputError(f"cannot run {path} --version: {exc}") from exc
    text = (out.stdout + out.stderr).strip()
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", text)
    if not m:
        raise BenchInputError(f"cannot read a version from `{path} --version`: {text[:200]!r}")
    return path, m.group(1)


def profile_command(ncu: str, report_base: str | Path, argv: list[str], include: str,
                    metrics: tuple[str, ...] = METRICS) -> list[str]:
    """Return the `ncu` command line that replays the kernels of the NVTX range `include` of `argv`, clocks untouched,
    in the root process only."""
    return [ncu, "--nvtx", "--nvtx-include", include, "--clock-control", "none", "--metrics", ",".join(metrics),
            "--target-processes", "application-only", "-f", "-o", str(report_base), *argv]


def export_command(ncu: str, report: str | Path) -> list[str]:
    """Return the command line that prints a report's raw page as CSV, in base units (run it with export_env())."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def export_env() -> dict[str, str]:
    """Return the environment for export_command: the C locale, so numbers print as `1234.5`.

    ncu formats numbers for the user's locale, and parse_csv reads "," as a thousands separator:
    under a decimal-comma locale a value printed "9,00" (as in a public test of ncu CSV parsing)
    would read as 900.
    """
    import os

    return {**os.environ, "LC_ALL": "C"}


@dataclass(frozen=True)
class NcuKernel:
    """One profiled kernel launch: ncu's metrics, in ns, bytes and percent (None: not collected, `--ncu-metrics traffic`)."""

    name: str
    duration_ns: float
    dram_read_bytes: float
    dram_write_bytes: float
    dram_pct_of_peak: float | None
    sm_pct_of_peak: float | None


def _number(text: str) -> float:
    """Return a metric's value; ValueError for text that is no finite, non-negative number (nan, inf, -1, ...)."""
    text = text.strip().replace(",", "")  # ncu may group thousands: "1,048,576"
    if text in ("", "n/a", "N/A"):
        raise ValueError("no value")
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a finite, non-negative number")
    return value


def parse_csv(text: str) -> list[NcuKernel]:
    """Return the kernels of `ncu --csv --page raw` output, durations in ns and traffic in bytes.

    ncu's own lines (`==PROF==`, `==WARNING==`) are skipped; the row after the header holds
    the units (its ID cell is empty), and each value is scaled by its column's unit.
    BenchInputError when a metric column is missing or a value cannot be read.
    """
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        raise BenchInputError("ncu printed no CSV rows: did the NVTX filter match no kernel? (see session.log)")
    if "Metric Name" in rows[0] and "Metric Value" in rows[0]:
        rows = _long_to_raw(rows)
    header = rows[0]
    missing = [m for m in REQUIRED + ("Kernel Name",) if m not in header]
    if missing:
        raise BenchInputError(f"ncu CSV lacks column(s) {missing}: profile with --metrics {','.join(REQUIRED)} at "
                              f"least (columns present: {header[:12]}...)")
    if "ID" not in header:
        raise BenchInputError(f"ncu CSV lacks the ID column (columns present: {header[:12]}...): give the CSV of "
                              "`ncu --import R.ncu-rep --csv --page raw --print-units base`")
    present = tuple(m for m in METRICS if m in header)  # the required three, and the % of peak ones if collected
    col = {name: header.index(name) for name in present + ("Kernel Name", "ID")}
    width = max(col.values()) + 1
    for i, row in enumerate(rows[1:], 1):
        if len(row) < width:  # a truncated file, or a row of other columns
            raise BenchInputError(f"ncu CSV row {i + 1} has {len(row)} column(s), the header {len(header)}: a truncated "
                                  f"or edited file ({row[:6]})")
    units = {m: "" for m in present}
    body = rows[1:]
    if body and not body[0][col["ID"]].strip():
        units = {m: body[0][col[m]].strip().lower() for m in present}
        body = body[1:]

    def scaled(row: list[str], metric: str, table: dict | None) -> float | None:
        if metric not in col:
            return None
        value = _number(row[col[metric]])
        if table is None:
            return value
        unit = units[metric] or next(iter(table))
        if unit not in table:
            raise BenchInputError(f"ncu CSV column {metric} has unit {unit!r}; known: {sorted(table)}")
        return value * table[unit]

    kernels = []
    for i, row in enumerate(body):
        try:
            kernels.append(NcuKernel(
                name=row[col["Kernel Name"]],
                duration_ns=scaled(row, METRICS[0], _TIME),
                dram_read_bytes=scaled(row, METRICS[1], _BYTES),
                dram_write_bytes=scaled(row, METRICS[2], _BYTES),
                dram_pct_of_peak=scaled(row, METRICS[3], None),
                sm_pct_of_peak=scaled(row, METRICS[4], None),
            ))
        except (ValueError, IndexError) as exc:
            raise BenchInputError(f"ncu CSV data row {i + 1} cannot be read ({exc}): {row[:6]}") from exc
    if not kernels:
        raise BenchInputError("ncu profiled no kernel: the NVTX filter matched no launch (is the `nvtx` package "
                              "installed where the session runs, so that the range is in the `bench` domain?)")
    return kernels


def _long_to_raw(rows: list[list[str]]) -> list[list[str]]:
    """Return the raw page's layout (a header, a units row, one row per launch) of ncu's details-page CSV.

    Without `--page raw` (an older ncu, or a CSV made with a plain `ncu --csv`), ncu prints one row per
    metric and launch: its launch columns, then "Section Name", "Metric Name", "Metric Unit", "Metric
    Value" (newer releases add "Kernel Time" and rule columns). Units there may be scaled per value
    ("Kbyte" in one launch, "Mbyte" in the next), so each value is converted to base units here.
    """
    header = rows[0]
    lacking = [c for c in ("Metric Name", "Metric Unit", "Metric Value", "ID", "Kernel Name") if c not in header]
    if lacking:
        raise BenchInputError(f"ncu CSV (one row per metric) lacks column(s) {lacking}: give the CSV of `ncu --import "
                              "R.ncu-rep --csv --page raw --print-units base`")
    name, unit, value, launch_id = (header.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value", "ID"))
    kernel = header.index("Kernel Name")
    base = {METRICS[0]: ("nsecond", _TIME), METRICS[1]: ("byte", _BYTES), METRICS[2]: ("byte", _BYTES)}
    launches: dict[str, tuple[str, dict[str, str]]] = {}
    for row in rows[1:]:
        if len(row) <= max(name, unit, value, launch_id, kernel):
            continue
        found = launches.setdefault(row[launch_id], (row[kernel], {}))[1]
        metric, text = row[name], row[value]
        if metric in base and metric not in found:
            unit_name = row[unit].strip().lower() or base[metric][0]
            if unit_name not in base[metric][1]:
                raise BenchInputError(f"ncu CSV column {metric} has unit {unit_name!r}; known: {sorted(base[metric][1])}")
            try:
                text = repr(_number(text) * base[metric][1][unit_name])
            except ValueError:
                pass  # left as printed: the data row's reader names it
        found.setdefault(metric, text)
    # the required metrics, and ncu's % of peak ones where any launch has them (`--ncu-metrics full`)
    present = [m for m in METRICS if m in REQUIRED or any(m in found for _, found in launches.values())]
    out = [["ID", "Kernel Name", *present], ["", "", *(base[m][0] if m in base else "" for m in present)]]
    for launch, (kernel_name, found) in launches.items():
        if not all(m in found for m in present):
            missing = [m for m in present if m not in found]
            raise BenchInputError(f"ncu CSV lacks metric(s) {missing} for launch {launch}: profile with --metrics "
                                  f"{','.join(present)}")
        out.append([launch, kernel_name, *(found[m] for m in present)])
    return out


@dataclass(frozen=True)
class RooflineRow:
    """A kernel (or a category's kernels together) against the measured copy bandwidth."""

    name: str
    category: str
    kernels: int
    duration_us: float
    dram_read_mb: float
    dram_write_mb: float
    achieved_gb_s: float  # (read + written bytes) / duration
    pct_of_copy_bandwidth: float | None  # achieved over the measured copy bandwidth, %
    time_at_copy_bandwidth_us: float | None  # the bytes at the measured copy bandwidth: the kernel's roofline time
    dram_pct_of_peak: float | None  # ncu's own % of peak DRAM throughput (time-weighted mean for a group; None: not collected)
    sm_pct_of_peak: float | None  # ncu's compute (SM) throughput % of peak (time-weighted mean for a group; None: not collected)


LONGEST = "Longest "  # starts the line of roofline.md above its longest kernels (the report leaves that list out)
IMPOSSIBLE = "**impossible**"  # a measured step faster than its own bound: never printed as a plain % SOL


def step_sol(step_bound: dict | None, duration_us: float, bandwidth_bytes_s: float | None) -> dict | None:
    """Return the step's bound against its kernels' time: {"bytes", "time_us", "sol_pct", "impossible"}, or None
    without a bound or a bandwidth. The bytes are speed_of_light.decode_step_bytes's, as the session recorded them."""
    if not step_bound or not step_bound.get("bytes") or not bandwidth_bytes_s or duration_us <= 0:
        return None
    bound_us = step_bound["bytes"] / bandwidth_bytes_s * 1e6
    pct = 100.0 * bound_us / duration_us
    return {"bytes": step_bound["bytes"], "time_us": bound_us, "sol_pct": pct, "impossible": pct > 100.0}


@dataclass
class RooflineTable:
    """Every kernel of one decode step under ncu, per category, and the step against its roofline.

    `groups`: the kernels of one name that read the same DRAM bytes (to the MB), one row each (the
    96 MLP projections of a qwen-7b-shape step are one or two groups, the lm_head one), ordered by
    the time they lose against the roofline (duration less time at copy bandwidth): where a step's
    distance from its speed of light goes, kernel by kernel. Empty without a copy bandwidth.
    """

    kernels: list[RooflineRow]
    categories: list[RooflineRow]
    total: RooflineRow
    copy_bandwidth_bytes_s: float | None
    meta: dict = field(default_factory=dict)
    groups: list[RooflineRow] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        from bench.files import write_atomic

        return write_atomic(path, json.dumps(self.to_dict(), indent=1, sort_keys=True, allow_nan=False))

    def to_markdown(self, top: int = 25) -> str:
        """Return Markdown: the step against its roofline, the categories, the longest kernels."""
        bw = self.copy_bandwidth_bytes_s
        t = self.total
        head = (f"One decode step under ncu ({t.kernels} kernels, each replayed alone with caches flushed; clocks "
                "not locked). Roofline bandwidth: the measured copy bandwidth "
                + (f"{bw / 1e9:.0f} GB/s (read + written bytes per second)" if bw else "(not measured: no % columns)")
                + ".")
        if bw:
            head += (f" The step's kernels take {t.duration_us:.0f} us for {(t.dram_read_mb + t.dram_write_mb):.0f} MB "
                     f"of DRAM traffic, {t.time_at_copy_bandwidth_us:.0f} us at that bandwidth: "
                     f"{t.pct_of_copy_bandwidth:.0f}% of the copy bandwidth.")
        sol = step_sol(self.meta.get("step_bound"), t.duration_us, bw)
        if sol:
            b = self.meta["step_bound"]
            head += (f" Its speed of light: the {sol['bytes'] / 1e6:.0f} MB a step must read ({b.get('weight_bytes', 0) / 1e6:.0f} "
                     f"MB of weights read whole, {b.get('embedding_row_bytes', 0) / 1e6:.2f} MB of embedding rows, "
                     f"{b.get('kv_bytes', 0) / 1e6:.1f} MB of KV cache at the step's context lengths; the `% SOL` column's "
                     f"accounting), {sol['time_us']:.0f} us at the copy bandwidth: {sol['sol_pct']:.0f}% SOL"
                     + (f", {IMPOSSIBLE}: faster than its own bound, a timing or accounting bug." if sol["impossible"] else "."))
        cols = ("| {} | category | kernels | us | DRAM read MB | DRAM write MB | GB/s | % of copy bw | us at copy bw "
                "| DRAM % of peak (ncu) | SM % of peak (ncu) |")
        sep = "|---|---|---|---|---|---|---|---|---|---|---|"

        def short(name: str) -> str:  # a kernel name as a table cell: at most 80 characters, no pipe
            return "`" + (name if len(name) <= 80 else name[:77] + "...").replace("|", "/") + "`"

        def line(r: RooflineRow, name: str) -> str:
            pct = "-" if r.pct_of_copy_bandwidth is None else f"{r.pct_of_copy_bandwidth:.0f}"
            sol = "-" if r.time_at_copy_bandwidth_us is None else f"{r.time_at_copy_bandwidth_us:.1f}"
            dram, sm = ("-" if v is None else f"{v:.0f}" for v in (r.dram_pct_of_peak, r.sm_pct_of_peak))
            return (f"| {name} | {r.category} | {r.kernels} | {r.duration_us:.1f} | {r.dram_read_mb:.2f} | "
                    f"{r.dram_write_mb:.2f} | {r.achieved_gb_s:.0f} | {pct} | {sol} | {dram} | {sm} |")

        out = [head, "", cols.format("categories"), sep]
        out += [line(c, c.category) for c in self.categories] + [line(t, "**decode step**")]
        if self.groups and t.time_at_copy_bandwidth_us is not None:
            lost = t.duration_us - t.time_at_copy_bandwidth_us
            shown = self.groups[:top]
            out += ["", f"Where the {lost:.0f} us above the roofline go: kernels of one name reading the same DRAM bytes, "
                    f"most time lost first ({len(shown)} of {len(self.groups)} groups; us lost = us - us at copy bw):", "",
                    "| kernel | category | kernels | us | DRAM read MB each | % of copy bw | us at copy bw | us lost "
                    "| % of the step's lost us |", "|---|---|---|---|---|---|---|---|---|"]
            for g in shown:
                g_lost = g.duration_us - g.time_at_copy_bandwidth_us
                out.append(f"| {short(g.name)} | {g.category} | {g.kernels} | {g.duration_us:.1f} | "
                           f"{g.dram_read_mb / g.kernels:.2f} | {g.pct_of_copy_bandwidth:.0f} | "
                           f"{g.time_at_copy_bandwidth_us:.1f} | {g_lost:.1f} | {100 * g_lost / lost if lost else 0:.0f} |")
        out += ["", f"{LONGEST}{min(top, len(self.kernels))} kernels:", "", cols.format("kernel"), sep]
        out += [line(r, short(r.name)) for r in sorted(self.kernels, key=lambda r: -r.duration_us)[:top]]
        return "\n".join(out) + "\n"


def _row(name: str, category: str, ks: list[NcuKernel], bw: float | None) -> RooflineRow:
    ns = sum(k.duration_ns for k in ks)
    nbytes = sum(k.dram_read_bytes + k.dram_write_bytes for k in ks)

    def weighted(attr: str) -> float | None:
        if any(getattr(k, attr) is None for k in ks):
            return None  # not collected (--ncu-metrics traffic)
        return sum(getattr(k, attr) * k.duration_ns for k in ks) / ns if ns else 0.0

    achieved = nbytes / (ns * 1e-9) if ns else 0.0
    return RooflineRow(
        name=name, category=category, kernels=len(ks), duration_us=ns / 1e3,
        dram_read_mb=sum(k.dram_read_bytes for k in ks) / 1e6, dram_write_mb=sum(k.dram_write_bytes for k in ks) / 1e6,
        achieved_gb_s=achieved / 1e9, pct_of_copy_bandwidth=100 * achieved / bw if bw else None,
        time_at_copy_bandwidth_us=nbytes / bw * 1e6 if bw else None,
        dram_pct_of_peak=weighted("dram_pct_of_peak"), sm_pct_of_peak=weighted("sm_pct_of_peak"),
    )


def roofline_table(kernels: list[NcuKernel], copy_bandwidth_bytes_s: float | None, meta: dict | None = None) -> RooflineTable:
    """Return every kernel, each category and the whole step against the measured copy bandwidth."""
    rows = [_row(k.name, categorize(k.name), [k], copy_bandwidth_bytes_s) for k in kernels]
    by_cat: dict[str, list[NcuKernel]] = defaultdict(list)
    for k in kernels:
        by_cat[categorize(k.name)].append(k)
    cats = [_row(c, c, by_cat[c], copy_bandwidth_bytes_s) for c in CATEGORIES if c in by_cat]
    groups: list[RooflineRow] = []
    if copy_bandwidth_bytes_s:
        by_group: dict[tuple[str, int], list[NcuKernel]] = defaultdict(list)
        for k in kernels:
            by_group[(k.name, round(k.dram_read_bytes / 1e6))].append(k)
        groups = sorted((_row(name, categorize(name), ks, copy_bandwidth_bytes_s) for (name, _), ks in by_group.items()),
                        key=lambda g: -(g.duration_us - g.time_at_copy_bandwidth_us))
    return RooflineTable(rows, cats, _row("decode step", "all", kernels, copy_bandwidth_bytes_s), copy_bandwidth_bytes_s,
                         dict(meta or {}), groups)


def write_roofline(kernels: list[NcuKernel], copy_bandwidth_bytes_s: float | None, meta: dict, out_dir: Path) -> dict:
    """Write roofline.json, roofline.md and kernel_table.json of parsed ncu kernels into out_dir; return their paths.

    The one writer of an ncu profile's files: `bench profile --tool ncu` after its session, and
    `bench kernels ncu_raw.csv` re-reading a stored export.
    """
    roofline = roofline_table(kernels, copy_bandwidth_bytes_s, meta)
    roofline.save(out_dir / "roofline.json")
    (out_dir / "roofline.md").write_text(roofline.to_markdown())
    path = kernel_table(kernels, meta=meta).save(out_dir / "kernel_table.json")
    total = {k: getattr(roofline.total, k) for k in ("kernels", "duration_us", "time_at_copy_bandwidth_us", "pct_of_copy_bandwidth")}
    sol = step_sol(meta.get("step_bound"), roofline.total.duration_us, copy_bandwidth_bytes_s)
    if sol:
        total.update(step_bound_us=sol["time_us"], sol_pct=sol["sol_pct"], impossible=sol["impossible"])
    return {"kernel_table": str(path), "roofline": str(out_dir / "roofline.json"), "roofline_md": str(out_dir / "roofline.md"),
            "roofline_total": total}


def kernel_table(kernels: list[NcuKernel], step: str = NCU_STEP, meta: dict | None = None) -> KernelTable:
    """Return the KernelTable of the profiled step (every kernel in its one range instance), for the kernel panel."""
    attributed = [AttributedKernel(k.name, k.duration_ns / 1e3, ((step, 0),)) for k in kernels]
    return build_kernel_table(attributed, {step: {0}}, source="ncu", unit="gpu_kernel",
                              meta={**(meta or {}), "median_kernel_us": statistics.median(k.duration_ns / 1e3 for k in kernels)})
