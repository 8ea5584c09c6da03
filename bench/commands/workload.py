"""`bench workload build|show|export`: freeze a workload to a file, inspect it, export it.

Parses the flags and calls bench.workloads.driver (build_file, show, export); prints what each returns.
"""

from __future__ import annotations


def register(sub) -> None:
    w = sub.add_parser("workload", help="build a frozen workload file, show its statistics, export it")
    wsub = w.add_subparsers(dest="workload_command", required=True)

    def spec_args(p) -> None:
        p.add_argument("--preset", help="take the workload from this built-in matrix")
        p.add_argument("--matrix", help="take the workload from this matrix TOML file")
        p.add_argument("--name", help="which [workload.NAME] of the matrix (default: its only or first one)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a workload field, e.g. --set num_requests=500 --set request_rate=4")

    b = wsub.add_parser("build", help="build a workload and write its frozen file (ids, token ids, lengths, arrivals)")
    spec_args(b)
    b.add_argument("--out", help="output file (default workloads/<name>.json)")
    b.set_defaults(func=cmd_build)

    s = wsub.add_parser("show", help="print counts, drops by rule and length distribution")
    s.add_argument("file", nargs="?", help="a frozen workload file or trtllm-bench JSONL (else build from the spec)")
    spec_args(s)
    s.set_defaults(func=cmd_show)

    e = wsub.add_parser("export", help="export a frozen workload file to trtllm-bench's JSONL dataset format")
    e.add_argument("file", help="frozen workload file (from `bench workload build`)")
    e.add_argument("--out", required=True, help="JSONL file to write")
    e.set_defaults(func=cmd_export)


def _spec_flags(args) -> dict:
    return {"preset": args.preset, "matrix": args.matrix, "name": args.name, "sets": args.set}


def cmd_build(args) -> int:
    from bench.workloads.driver import build_file, workload_spec

    stats, path = build_file(workload_spec(**_spec_flags(args)), args.out)
    print(stats)
    print(f"wrote {path}")
    return 0


def cmd_show(args) -> int:
    from bench.workloads.driver import show

    print(show(args.file, **_spec_flags(args)))
    return 0


def cmd_export(args) -> int:
    from bench.workloads.driver import export

    print(export(args.file, args.out))
    return 0
