"""`bench build`: write each build key's compiled and tuned engine as a portable artifact, measuring nothing."""

from __future__ import annotations

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    b = sub.add_parser("build", help="build a matrix's engines cold (compile, tune: the warm-up) and write each as an "
                                     "artifact for `bench run --engines`; measures nothing")
    add_matrix_arguments(b, "build only matching cells, e.g. precision=int8wo")
    b.add_argument("--artifacts", required=True, help="folder the artifacts (<build key>-<digest>.tar) are written to")
    b.add_argument("--requests", type=int, help="override every workload's num_requests (the warm-up's shapes)")
    b.set_defaults(func=cmd_build)


def cmd_build(args) -> int:
    from rich.console import Console

    from bench.runner.build import build_artifacts

    matrix = load_selected_matrix(args)
    console = Console(stderr=True)
    keys = {c.build_key().key_hash for c in matrix.cells}
    console.print(f"matrix [bold]{matrix.name}[/]: {len(keys)} build key(s), each built cold -> {args.artifacts}")

    def show(o):
        if o.artifact:
            tuned = o.tuned or {}
            print(f"{o.label}  build key {o.key_hash}: {o.artifact} ({o.bytes / 1e6:.1f} MB, digest {o.digest[:12]}, "
                  f"tuned digest {tuned.get('digest')}, {o.seconds:.0f} s)")
        else:
            print(f"{o.label}  build key {o.key_hash}: no artifact ({o.seconds:.0f} s): {o.error}")

    outcomes = build_artifacts(matrix, args.artifacts, on_outcome=show)
    return 1 if any(o.artifact is None for o in outcomes) else 0
