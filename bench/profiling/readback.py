"""Kernel tables read back from a profiler's report: `bench profile` after its session, and `bench kernels`.

`read_nsys` exports a session's nsys report to SQLite and reads it into a KernelTable;
`read_ncu` imports a session's ncu report as the raw CSV and writes its roofline; both beside the
session's other files (kernel_table.md and categories.csv beside each table: bench.execution.kernels.write_side_tables).
`read_reports` is the driver of `bench kernels REPORT`: the same tables (and, for an ncu raw CSV, the roofline) of reports made outside the harness or re-read
later, written under profiles/imported/<report name>/ unless an output folder is given.
"""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

from bench.checks import check_number
from bench.errors import BenchInputError
from bench.execution.kernels import write_side_tables


def read_nsys(nsys: str, out_dir: Path, cell) -> dict:
    """Return the session entries of a profile's nsys report (kernel table, trace, SQLite export, export schema)."""
    from bench.execution.launcher import log_tail
    from bench.profiling.nsys_collector import (
        export_command,
        report_file,
        table_from_sqlite,
    )

    report = report_file(out_dir, log_tail(out_dir / "session.log", 20000))  # only a .qdstrm: the libdw fix, named
    sqlite_path = out_dir / "report.sqlite"
    done = subprocess.run(export_command(nsys, report, sqlite_path), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"nsys export failed ({done.returncode}): {done.stderr[-2000:]}")
    table = table_from_sqlite(sqlite_path, meta={"cell_id": cell.cell_id, "label": cell.label})
    path = table.save(out_dir / "kernel_table.json")
    schema = {k: table.meta.get(k) for k in ("nsys_version", "export_schema", "metadata_table", "tables_read",
                                             "graph_kernels", "graph_kernels_by_time", "notes")}
    return {"kernel_table": str(path), "trace": str(report), "sqlite": str(sqlite_path), "nsys_export": schema}


def read_ncu(ncu: str, out_dir: Path, cell, session: dict) -> dict:
    """Return the session entries of a profile's ncu report (roofline files, kernel table, trace); RuntimeError if none."""
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
            "range": ncu_collector.NCU_STEP, "step_bound": session.get("step_bound")}
    return {**ncu_collector.write_roofline(kernels, bw, meta, out_dir), "trace": str(reports[-1])}


def read_reports(reports: list[str | Path], out: str | Path | None = None, *, copy_bandwidth_gbs: float | None = None,
                 innermost: bool = False, nsys: str | None = None, top: int = 8, printer=print) -> list[str]:
    """Write the kernel tables (and an ncu CSV's roofline) of each report; return each report's Markdown.

    Every input is checked before any work (BenchInputError). Without `out`, each report's files go to
    profiles/imported/<its name>/. `printer` gets each report's Markdown as soon as it is read.
    """
    from bench.profiling.nsys_collector import table_from_sqlite

    reports = [Path(r) for r in reports]
    if out and len(reports) > 1:
        raise BenchInputError("--out takes one report; give one report per call, or leave --out out "
                              "(each report gets profiles/imported/<name>/)")
    for r in reports:  # every input checked before any work
        if not r.is_file():
            raise BenchInputError(f"report {str(r)!r} does not exist")
        if r.suffix not in (".sqlite", ".nsys-rep", ".qdrep") and not _is_ncu_csv(r):
            raise BenchInputError(f"{str(r)!r} is not an nsys report or an ncu CSV: give the .sqlite of `nsys export "
                                  "--type sqlite` (or the .nsys-rep, which is exported first), or the CSV of `ncu --import "
                                  "R.ncu-rep --csv --page raw --print-units base` (.csv or .csv.gz)")
    if copy_bandwidth_gbs is not None:
        check_number(copy_bandwidth_gbs, "--copy-bandwidth", above=0, hint="the roofline's bandwidth: a positive GB/s figure")
    check_number(top, "--top", integer=True, minimum=1, maximum=10_000, hint="kernels listed per range")
    texts = []
    for report in reports:
        folder = Path(out) if out else Path("profiles") / "imported" / _import_name(report)
        folder.mkdir(parents=True, exist_ok=True)
        if _is_ncu_csv(report):
            text = _ncu(report, folder, copy_bandwidth_gbs)
        else:
            sqlite_path = _exported(report, folder, nsys) if report.suffix != ".sqlite" else report
            table = table_from_sqlite(sqlite_path, innermost_only=innermost, meta={"imported_from": str(report.resolve())})
            path = table.save(folder / "kernel_table.json")
            write_side_tables(path)
            text = f"## {report}\n\n" + table.to_markdown(top=top) + f"\nkernel table: {path}\n"
        printer(text)
        texts.append(text)
    return texts


def _exported(report: Path, out: Path, nsys: str | None) -> Path:
    """Return the SQLite export of a .nsys-rep, written into `out` by nsys."""
    from bench.profiling.nsys_collector import export_command, find_nsys

    exe, _ = find_nsys(nsys)
    sqlite_path = out / (report.stem + ".sqlite")
    done = subprocess.run(export_command(exe, report, sqlite_path), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise BenchInputError(f"nsys export of {report} failed ({done.returncode}): {done.stderr[-2000:]}")
    return sqlite_path


def _import_name(report: Path) -> str:
    """Return the folder name under profiles/imported/ for a report: its name, less every suffix.

    The names `bench profile` gives its files (report.sqlite, ncu_raw.csv) are the same in every
    profile folder, so those are prefixed with the folder's name (`<cell_id>-<tool>`): two
    profiles' reports re-read without --out do not overwrite each other.
    """
    name = report.name.split(".")[0]
    return f"{report.resolve().parent.name}-{name}" if name in ("report", "ncu_raw") else name


def _is_ncu_csv(path: Path) -> bool:
    return path.name.endswith((".csv", ".csv.gz"))


def _ncu(report: Path, out: Path, copy_bandwidth_gbs: float | None) -> str:
    """Write the roofline and kernel tables of an ncu raw CSV into `out`; return the printed Markdown."""
    import gzip

    from bench.profiling import ncu_collector

    try:
        if report.suffix == ".gz":
            with gzip.open(report, "rb") as f:
                data = f.read()
        else:
            data = report.read_bytes()
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BenchInputError(f"ncu CSV {str(report)!r} is not UTF-8 text ({exc.reason} at byte {exc.start}): give the "
                              "CSV ncu printed") from exc
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise BenchInputError(f"ncu CSV {str(report)!r} cannot be read ({type(exc).__name__}: {exc}): a truncated or "
                              "damaged file; copy it again") from exc
    try:
        kernels = ncu_collector.parse_csv(text)
    except BenchInputError as exc:
        raise BenchInputError(f"ncu CSV {str(report)!r}: {str(exc).removeprefix('ncu CSV ')}") from exc
    bw, source = None, "none given or stored: no roofline columns"
    if copy_bandwidth_gbs is not None:
        bw, source = copy_bandwidth_gbs * 1e9, "--copy-bandwidth"
    elif (report.parent / "session.json").is_file():
        bw = _stored_bandwidth(report.parent / "session.json")
        if bw:
            source = f"measured by the profile ({report.parent / 'session.json'})"
    meta = {"imported_from": str(report.resolve()), "range": ncu_collector.NCU_STEP, "copy_bandwidth_source": source,
            "step_bound": _stored_step_bound(report.parent / "session.json")}  # the bytes the step must read, if said
    files = ncu_collector.write_roofline(kernels, bw, meta, out)
    write_side_tables(Path(files["kernel_table"]))
    return (f"## {report}\n\nCopy bandwidth: {source}.\n\n" + Path(files["roofline_md"]).read_text()
            + f"\nroofline: {files['roofline']}; kernel table: {files['kernel_table']}\n")


def _stored_step_bound(session: Path):
    """Return the step bound a profile's session.json stored (bench.backends.speed_of_light), or None (none, unreadable)."""
    import json

    try:
        stored = json.loads(session.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    bound = stored.get("step_bound") if isinstance(stored, dict) else None
    return bound if isinstance(bound, dict) else None


def _stored_bandwidth(session: Path) -> float | None:
    """Return the copy bandwidth (bytes/s) a profile's session.json measured; BenchInputError naming it if unreadable."""
    import json

    try:
        stored = json.loads(session.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"{str(session)!r} beside the ncu CSV cannot be read ({exc}): give --copy-bandwidth, or "
                              "move the file away") from exc
    value = ((stored.get("copy_bandwidth") or {}) if isinstance(stored, dict) else {}).get("bandwidth_bytes_s")
    if value is None:
        return None
    check_number(value, f"copy_bandwidth.bandwidth_bytes_s in {str(session)!r}", above=0,
                 hint="give --copy-bandwidth instead")
    return value
