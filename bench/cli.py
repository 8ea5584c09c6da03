"""Command line: argument parsing only; each command calls its verb's one driver and prints what it returns.

Every module in `bench/commands/` defines `register(subparsers)`, adding its subcommand with a
`func` default; this file discovers them, so adding a command touches no shared file. Command
modules import their driver (and heavy libraries) inside their functions: `bench --help` stays
fast. The helpers here choose a command's matrix (`add_matrix_arguments`, `load_selected_matrix`).

Exit status: 0 success, 1 a run finished with failed cells (error/timeout), 2 bad input
(nothing was run; a path that cannot be written is bad input too), 3 a record could not be stored
(disk full, I/O error: the run stopped, what was stored stays), 130 interrupted.

A bench process that seems stuck prints every thread's Python stack to stderr on SIGUSR1
(`kill -USR1 PID`; faulthandler), and keeps running.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from bench.errors import BenchInputError, StoreWriteError


def add_matrix_arguments(parser: argparse.ArgumentParser, only_help: str) -> None:
    """Add --preset, --matrix and --only, the flags that choose a command's cells (load_selected_matrix)."""
    parser.add_argument("--preset", help="built-in matrix (see `bench presets`)")
    parser.add_argument("--matrix", help="matrix TOML file")
    parser.add_argument("--only", help=only_help)


def load_selected_matrix(args, only: bool = True):
    """Return the matrix named by --matrix / --preset, narrowed by --only (and --requests/--trials/--runs and the
    executor flags if the command has them); only=False: without --only's narrowing. A --dry-run plans without
    the optional packages the cells need."""
    import warnings

    from bench.spec.matrix import check_cuda, check_packages, load_matrix
    from bench.spec.narrow import narrow, parse_pairs

    if args.matrix and args.preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    # Optional packages (torchao, gemlite, flash-attn) are checked for the cells --only keeps, not for the whole
    # matrix: a bf16 slice of a preset that also holds int4wo rows runs without torchao.
    with warnings.catch_warnings(record=True) as said:  # held back: a refusal below is then the one line printed
        warnings.simplefilter("always")
        matrix = (load_matrix(args.matrix, check_installed=False) if args.matrix
                  else load_matrix(args.preset or "default", preset=True, check_installed=False))
    selected = narrow(matrix, only=parse_pairs(args.only, "--only") if only else None, requests=getattr(args, "requests", None),
                    trials=getattr(args, "trials", None), runs=getattr(args, "runs", None),
                    executor=getattr(args, "executor", None), ray_address=getattr(args, "ray_address", None),
                    devices=getattr(args, "devices", None), tuning_builds=getattr(args, "tuning_builds", None),
                    engines=getattr(args, "engines", None), retune_on_mismatch=getattr(args, "retune_on_mismatch", False),
                    trust=getattr(args, "trust", None), trust_files=getattr(args, "trust_file", None),
                    cores=getattr(args, "cores", None))
    if not getattr(args, "dry_run", False):
        check_packages(selected.cells)
        if only:  # the cells that will run: GPU cells on a machine without CUDA are refused before any worker
            check_cuda(selected.cells)
    for w in dict.fromkeys(str(w.message) for w in said):
        warnings.warn(w, stacklevel=2)
    return selected


def build_parser() -> argparse.ArgumentParser:
    import bench.commands

    p = argparse.ArgumentParser(prog="bench", description="Benchmark LLM inference backends across a matrix of configurations.")
    sub = p.add_subparsers(dest="command", required=True)
    names = [m.name for m in pkgutil.iter_modules(bench.commands.__path__)]
    order = {name: i for i, name in enumerate(bench.commands.WORKFLOW)}
    for name in sorted(names, key=lambda n: (order.get(n, len(order)), n)):
        importlib.import_module(f"bench.commands.{name}").register(sub)
    return p


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Return a warning as the CLI prints it: 'bench: warning: ...' (no source file and line: they say nothing to a user)."""
    return f"bench: warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    import faulthandler
    import signal
    import warnings

    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID`: every thread's stack on stderr, the process goes on
        try:
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        except (AttributeError, OSError, RuntimeError, ValueError):  # stderr is no file (main() called in-process)
            pass
    warnings.formatwarning = _format_warning
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchInputError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    except StoreWriteError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:  # a file-system error no check foresaw: the path and the fix, not a traceback
        from bench.files import describe_os_error

        print(f"bench: error: {describe_os_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench: interrupted; every finished cell is in the store, re-run to continue", file=sys.stderr)
        return 130
