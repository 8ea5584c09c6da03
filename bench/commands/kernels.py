"""`bench kernels REPORT`: the kernel tables of an existing Nsight Systems or Nsight Compute export.

Reads an `nsys export --type sqlite` file (or a .nsys-rep, exported first with the nsys found as
`bench profile --tool nsys` finds it) into the same KernelTable and files a profile run writes:
kernel_table.json, kernel_table.md, categories.csv, under --out (default
profiles/imported/<report name>/), and prints the Markdown. For reports made outside the
harness (another program, another machine), or to re-read one made by `bench profile`.
The driver is bench.profiling.readback.read_reports.

An ncu raw-page CSV (`ncu --import R.ncu-rep --csv --page raw --print-units base`, the
`ncu_raw.csv` a `bench profile --tool ncu` writes; `.csv.gz` too) gives the roofline files as well
(roofline.json, roofline.md): against `--copy-bandwidth` GB/s, else the copy bandwidth the
profile measured (its session.json beside the CSV), else without the roofline columns.
"""

from __future__ import annotations


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
    from bench.profiling.readback import read_reports

    read_reports(args.reports, args.out, copy_bandwidth_gbs=args.copy_bandwidth, innermost=args.innermost,
                 nsys=args.nsys, top=args.top)
    return 0
