"""`bench oom`: find the largest max_batch_size that fits for each configuration of a matrix.

Parses the flags and calls bench.oom.driver.search_matrix; prints the frontier table
(docs/guide/oom.md).
"""

from __future__ import annotations

from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    r = sub.add_parser(
        "oom",
        help="search the OOM boundary (largest max_batch_size that fits) per backend x precision x options x lengths",
        description="Probes each configuration of the matrix with one full batch of worst-case requests "
        "(see docs/guide/oom.md); the matrix's max_batch_sizes are ignored except as default bounds.",
    )
    add_matrix_arguments(r, "search only matching cells, e.g. precision=bf16")
    r.add_argument("--lengths", help="input x output lengths to search, e.g. 1024x1024,2048x2048 "
                   "(default: each workload's max_input_len x its longest output)")
    r.add_argument("--lower", type=int, help="smallest batch size to probe (default: the matrix's smallest)")
    r.add_argument("--upper", type=int, help="largest batch size to probe (default: the matrix's largest)")
    r.add_argument("--strategy", default="grow", help="grow (exponential growth, then bisection; default) or bisect")
    r.add_argument("--decode-steps", type=int, default=4, help="decode steps a probe runs at the final length")
    r.add_argument("--gpu-memory-gb", type=float, help="emulate a smaller device: cap the memory a cell may use (GB)")
    r.add_argument("--no-confirm", action="store_true", help="skip re-probing the largest fitting size")
    r.add_argument("--store", help="result store (default results/<matrix>-oom.jsonl)")
    r.add_argument("--report-dir", help="where oom-frontier.md goes (default dashboards/<matrix> for the default store, else dashboards/<store name>)")
    r.add_argument("--redo", action="store_true", help="probe again even where a probe is stored")
    r.set_defaults(func=cmd_oom)


def cmd_oom(args) -> int:
    from rich.console import Console

    from bench.oom.driver import OomSettings, parse_lengths, search_matrix
    matrix = load_selected_matrix(args)
    settings = OomSettings(lengths=tuple(parse_lengths(args.lengths)) if args.lengths else None, lower=args.lower,
                           upper=args.upper, strategy=args.strategy, decode_steps=args.decode_steps,
                           confirm=not args.no_confirm, gpu_memory_gb=args.gpu_memory_gb, redo=args.redo)
    store = Path(args.store or f"results/{matrix.name}-oom.jsonl")
    failed, table = search_matrix(matrix, settings, store, Console(stderr=True, soft_wrap=True),
                                  args.report_dir)
    print(table)
    return 1 if failed else 0
