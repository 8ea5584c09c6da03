"""`bench workload build|show|export`: freeze a workload to a file, inspect it, export it."""

from __future__ import annotations

from pathlib import Path

from bench.errors import BenchInputError
from bench.files import check_output_file, write_atomic


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




def spec_from_args(args, file: str | None = None):
    """Return the WorkloadSpec named by --preset/--matrix/--name/--set (or a file source)."""
    from bench.spec.cells import WorkloadSpec
    from bench.spec.matrix import load_matrix
    from bench.spec.narrow import coerce_cli_value

    overrides = {}
    for item in args.set:
        if "=" not in item:
            raise BenchInputError(f"--set wants KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = coerce_cli_value(value.strip())
    if file:
        name = args.name or Path(file).stem
        data = {"source": "file", "path": file, **overrides}
        data.setdefault("num_requests", _count_requests(file))
        return WorkloadSpec.from_dict(name, data)
    if args.matrix and args.preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    if not (args.matrix or args.preset):
        return WorkloadSpec.from_dict(args.name or "sharegpt", overrides)
    matrix = load_matrix(args.matrix) if args.matrix else load_matrix(args.preset, preset=True)
    specs = {c.workload.name: c.workload for c in matrix.cells}
    name = args.name or next(iter(specs))
    if name not in specs:
        raise BenchInputError(f"--name {name!r} is not a workload of matrix {matrix.name!r}; its workloads are {sorted(specs)}")
    base = {k: v for k, v in specs[name].to_dict().items() if k != "name"}
    return WorkloadSpec.from_dict(name, {**base, **overrides})


def _count_requests(file: str) -> int:
    """Return how many requests a workload JSON or JSONL file holds (to replay all of them)."""
    import json

    path = Path(file).expanduser()
    if not path.is_file():
        raise BenchInputError(f"workload file {file!r} does not exist")
    text = path.read_text(errors="replace")
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("requests"), list):
            return max(1, len(doc["requests"]))
    except ValueError:
        pass
    return max(1, sum(1 for line in text.splitlines() if line.strip()))


def cmd_build(args) -> int:
    from bench.workloads.lengths import format_stats
    from bench.workloads.workload import build_workload

    spec = spec_from_args(args)
    check_output_file(args.out or f"workloads/{spec.name}.json", "--out")
    wl = build_workload(spec)
    out = write_atomic(args.out or f"workloads/{spec.name}.json", wl.to_json())
    print(format_stats(wl))
    print(f"wrote {out}")
    return 0


def cmd_show(args) -> int:
    from bench.workloads.lengths import format_stats
    from bench.workloads.workload import build_workload

    if args.file and not args.set and Path(args.file).suffix == ".json":
        wl = _read_frozen(args.file)  # as built: with its own drop counts and parse report
    else:
        wl = build_workload(spec_from_args(args, file=args.file))
    print(format_stats(wl))
    return 0


def _read_frozen(file: str):
    from bench.workloads.workload import Workload

    path = Path(file).expanduser()
    if not path.is_file():
        raise BenchInputError(f"workload file {file!r} does not exist; make one with `bench workload build`")
    try:
        return Workload.from_json(path.read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchInputError(f"{file!r} is not a workload file from `bench workload build`: {exc}") from exc


def cmd_export(args) -> int:
    from bench.workloads.trtllm_dataset import to_trtllm_jsonl

    check_output_file(args.out, "--out")
    wl = _read_frozen(args.file)
    out = write_atomic(args.out, to_trtllm_jsonl(wl))
    print(f"wrote {len(wl.requests)} requests to {out} (trtllm-bench --dataset format)")
    return 0
