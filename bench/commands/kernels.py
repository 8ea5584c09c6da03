"""`bench kernels REPORT.sqlite`: the kernel tables of an existing Nsight Systems export.

Reads an `nsys export --type sqlite` file (or a .nsys-rep, exported first with the nsys found as
`bench profile --tool nsys` finds it) into the same KernelTable and files a profile run writes:
kernel_table.json, kernel_table.md, categories.csv, under --out (default
profiles/imported/<report name>/), and prints the Markdown. For reports made outside the
harness (another program, another machine), or to re-read one made by `bench profile`.
"""

from __future__ import annotations

from pathlib import Path

from bench.errors import BenchInputError


def register(sub) -> None:
    p = sub.add_parser("kernels", help="kernel tables (per NVTX range and category) of an existing nsys SQLite export")
    p.add_argument("reports", nargs="+", help="nsys SQLite export(s) (`nsys export --type sqlite`), or .nsys-rep files")
    p.add_argument("--out", help="output folder (default profiles/imported/<report name>/; one report only)")
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
        if r.suffix not in (".sqlite", ".nsys-rep", ".qdrep"):
            raise BenchInputError(f"{str(r)!r} is not an nsys report: give the .sqlite of `nsys export --type sqlite` "
                                  "(or the .nsys-rep, which is exported first)")
    for report in reports:
        out = Path(args.out) if args.out else Path("profiles") / "imported" / report.stem
        out.mkdir(parents=True, exist_ok=True)
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
