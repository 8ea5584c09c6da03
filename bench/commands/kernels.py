"""`bench kernels REPORT`: the kernel tables of an existing Nsight Systems or Nsight Compute export.

Reads an `nsys export --type sqlite` file (or a .nsys-rep, exported first with the nsys found as
`bench profile --tool nsys` finds it) into the same KernelTable and files a profile run writes:
kernel_table.json, kernel_table.md, categories.csv, under --out (default
profiles/imported/<report name>/), and prints the Markdown. For reports made outside the
harness (another program, another machine), or to re-read one made by `bench profile`.

An ncu raw-page CSV (`ncu --import R.ncu-rep --csv --page raw --print-units base`, the
`ncu_raw.csv` a `bench profile --tool ncu` writes; `.csv.gz` too) gives the roofline files as well
(roofline.json, roofline.md): against `--copy-bandwidth` GB/s, else the copy bandwidth the
profile measured (its session.json beside the CSV), else without the roofline columns.
"""

from __future__ import annotations

from pathlib import Path

from bench.errors import BenchInputError


def register(sub) -> None:
    p = sub.add_parser("kernels", help="kernel tables (per NVTX range and category) of an existing nsys SQLite export, "
                                       "or the roofline of an ncu CSV")
    p.add_argument("reports", nargs="+", help="nsys SQLite export(s) (`nsys export --type sqlite`), .nsys-rep files, or "
                                              "ncu raw CSVs (ncu_raw.csv, .csv.gz)")
    p.add_argument("--copy-bandwidth", type=float, default=None, metavar="GB/s",
                   help="ncu CSV: the roofline's bandwidth (default: the profile's measured copy bandwidth, read from "
                        "session.json beside the CSV)")
    p.add_argument("--out", help="output folder (default profiles/imported/<report name>/, for a profile's report.sqlite "
                                  "or ncu_raw.csv <its folder>-<name>/; one report only)")
    p.add_argument("--innermost", action="store_true",
                   help="count each kernel in its innermost range only (default: in every enclosing range, as nsys's "
                        "nvtx_kern_sum)")
    p.add_argument("--nsys", default=None, help="nsys executable, to export a .nsys-rep (default as bench profile's)")
    p.add_argument("--top", type=int, default=8, help="kernels listed per range in the printed table")
    p.set_defaults(func=cmd_kernels)


def cmd_kernels(args) -> int:
    from bench.commands.profile import write_side_tables
    from bench.profiling.nsys_collector import table_from_sqlite

    reports = [Path(r) for r in args.reports]
    if args.out and len(reports) > 1:
        raise BenchInputError("--out takes one report; give one report per call, or leave --out out "
                              "(each report gets profiles/imported/<name>/)")
    for r in reports:  # every input checked before any work
        if not r.is_file():
            raise BenchInputError(f"report {str(r)!r} does not exist")
        if r.suffix not in (".sqlite", ".nsys-rep", ".qdrep") and not _is_ncu_csv(r):
            raise BenchInputError(f"{str(r)!r} is not an nsys report or an ncu CSV: give the .sqlite of `nsys export "
                                  "--type sqlite` (or the .nsys-rep, which is exported first), or the CSV of `ncu --import "
                                  "R.ncu-rep --csv --page raw --print-units base` (.csv or .csv.gz)")
    if args.copy_bandwidth is not None and args.copy_bandwidth <= 0:
        raise BenchInputError(f"--copy-bandwidth must be a positive GB/s figure, not {args.copy_bandwidth}")
    for report in reports:
        out = Path(args.out) if args.out else Path("profiles") / "imported" / _import_name(report)
        out.mkdir(parents=True, exist_ok=True)
        if _is_ncu_csv(report):
            print(_ncu(report, out, args.copy_bandwidth))
            continue
        sqlite_path = _exported(report, out, args.nsys) if report.suffix != ".sqlite" else report
        table = table_from_sqlite(sqlite_path, innermost_only=args.innermost,
                                  meta={"imported_from": str(report.resolve())})
        path = table.save(out / "kernel_table.json")
        write_side_tables(path)
        print(f"## {report}\n\n" + table.to_markdown(top=args.top) + f"\nkernel table: {path}\n")
    return 0


def _exported(report: Path, out: Path, nsys: str | None) -> Path:
    """Return the SQLite export of a .nsys-rep, written into `out` by nsys."""
    import subprocess

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
    import json

    from bench.commands.profile import write_side_tables
    from bench.profiling import ncu_collector

    if report.suffix == ".gz":
        with gzip.open(report, "rt") as f:
            text = f.read()
    else:
        text = report.read_text()
    kernels = ncu_collector.parse_csv(text)
    bw, source = None, "none given or stored: no roofline columns"
    if copy_bandwidth_gbs is not None:
        bw, source = copy_bandwidth_gbs * 1e9, "--copy-bandwidth"
    elif (report.parent / "session.json").is_file():
        stored = (json.loads((report.parent / "session.json").read_text()).get("copy_bandwidth") or {})
        if stored.get("bandwidth_bytes_s"):
            bw, source = stored["bandwidth_bytes_s"], f"measured by the profile ({report.parent / 'session.json'})"
    meta = {"imported_from": str(report.resolve()), "range": ncu_collector.NCU_STEP, "copy_bandwidth_source": source}
    files = ncu_collector.write_roofline(kernels, bw, meta, out)
    write_side_tables(Path(files["kernel_table"]))
    return f"## {report}\n\nCopy bandwidth: {source}.\n\n" + Path(files["roofline_md"]).read_text() + \
        f"\nroofline: {files['roofline']}; kernel table: {files['kernel_table']}\n"
