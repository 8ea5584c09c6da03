"""`bench accuracy`: every cell against the matrix's baseline cell of the same model, on the same prompts.

Parses the flags and calls bench.accuracy.driver.accuracy_matrix, which runs the sessions, stores
one `accuracy` record per cell and prints each cell's figures and verdict
(docs/guide/accuracy.md).
"""

from __future__ import annotations

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    p = sub.add_parser("accuracy", help="KL, top-1, perplexity, ROUGE and a verdict of each cell against the "
                                        "matrix's baseline cell of the same model, on the same prompts")
    add_matrix_arguments(p, "measure only matching cells (their baselines are measured too), e.g. precision=int8wo")
    p.add_argument("--store", help="accuracy record store (default results/<matrix>-accuracy.jsonl)")
    p.add_argument("--prompts", type=int, help="prompts per cell (overrides [accuracy] prompts)")
    p.add_argument("--answer-tokens", type=int, help="reference-answer tokens scored per prompt")
    p.add_argument("--generate-tokens", type=int, help="greedy tokens per prompt for generation parity")
    p.add_argument("--redo", action="store_true", help="measure again what the store already holds (a second process)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per cell before its session is killed")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="accuracy sessions run at once (default 1: one after another); above 1, an hf cell is "
                        "measured in an early session beside its baseline's and scored once the baseline's Reference "
                        "is written, and a session that runs out of memory beside others is run again alone")
    p.set_defaults(func=cmd_accuracy, requests=None, trials=None)


def cmd_accuracy(args) -> int:
    from pathlib import Path

    from bench.accuracy.driver import accuracy_matrix, settings_with

    matrix = load_selected_matrix(args)
    full = load_selected_matrix(args, only=False)  # the baselines of the selected cells may lie outside --only
    settings = settings_with(matrix.accuracy, args.prompts, args.answer_tokens, args.generate_tokens)
    store = Path(args.store) if args.store else Path("results") / f"{matrix.name}-accuracy.jsonl"
    _, failed = accuracy_matrix(matrix, full.cells, settings, store, redo=args.redo, timeout=args.timeout,
                                parallel=args.parallel)
    return 1 if failed else 0
