"""`bench build`: write each build key's compiled and tuned engine as a portable artifact, measuring nothing.

Parses the flags and calls bench.runner.build.build_artifacts; prints each build's artifact or
why it has none.
"""

from __future__ import annotations

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    b = sub.add_parser("build", help="build a matrix's engines cold (compile, tune: the warm-up) and write each as an "
                                     "artifact for `bench run --engines`; measures nothing",
                       description="Build each build key of a matrix cold in a fresh worker (compile and tune: the "
                                   "warm-up) and write its engine as an artifact. An artifact is code, as a pickle "
                                   "is: loading one runs what it holds. Each artifact built here is recorded as "
                                   "trusted on this machine (a ledger under ~/.local/state/bench, or "
                                   "$BENCH_TRUSTED_ARTIFACTS), so `bench run --engines` loads it here; on another "
                                   "machine it loads only with --trust DIGEST. See docs/guide/trust.md.")
    add_matrix_arguments(b, "build only matching cells, e.g. precision=int8wo")
    b.add_argument("--artifacts", required=True, help="folder the artifacts (<build key>-<digest>.tar) are written to")
    b.add_argument("--requests", type=int, help="override every workload's num_requests (the warm-up's shapes)")
    b.set_defaults(func=cmd_build)


def cmd_build(args) -> int:
    from rich.console import Console

    from bench.runner.build import build_artifacts

    outcomes = build_artifacts(load_selected_matrix(args), args.artifacts, console=Console(stderr=True),
                               on_outcome=lambda o: print(o.text()))
    return 1 if any(o.artifact is None for o in outcomes) else 0
