"""`bench parity --layers A B`: where two configurations of one model part, layer by layer.

    bench parity --matrix m.toml --layers precision=bf16 precision=int8wo
    bench parity --preset h200-study --only max_batch_size=1 --layers attn_implementation=sdpa attn_implementation=eager
    bench parity --matrix m.toml --layers model=./base-model model=./finetuned-export

Parses the flags and calls bench.accuracy.parity.layer_parity (the cell, the overrides, the
layers session); prints its table of per-layer errors and the first diverging layer.
"""

from __future__ import annotations

import sys

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    p = sub.add_parser("parity", help="per-layer errors between two configurations of one model, and the first "
                                      "layer where they jump (--layers A B)")
    add_matrix_arguments(p, "the cell both configurations start from (default: the matrix's baseline cell)")
    p.add_argument("--layers", nargs=2, metavar=("A", "B"), required=True,
                   help="two configurations as key=value overrides, e.g. precision=bf16 precision=int8wo")
    p.add_argument("--prompts", type=int, default=4, help="prompts of the workload to run (default 4)")
    p.add_argument("--tokens", type=int, default=256, help="tokens of each prompt (its first N; default 256)")
    p.add_argument("--jump-factor", type=float, default=None, help="a jump: relative error above this x every earlier one (default 4)")
    p.add_argument("--min-error", type=float, default=None, help="a jump: relative error above this (default 0.02)")
    p.add_argument("--path", default="both", choices=("both", "forward", "decode"),
                   help="what is hooked: a cacheless forward, each cell's own decode steps (its cache and loop), or both")
    p.add_argument("--decode-tokens", type=int, default=16, help="the decode path: each prompt's last N tokens as decode steps")
    p.add_argument("--out", default="results/parity", help="output folder (default results/parity/, git-ignored)")
    p.add_argument("--timeout", type=float, default=1800)
    p.set_defaults(func=cmd_parity, requests=None, trials=None)


def cmd_parity(args) -> int:
    from bench.accuracy.parity import LayerSettings, layer_parity

    settings = LayerSettings(prompts=args.prompts, tokens=args.tokens, jump_factor=args.jump_factor,
                             min_error=args.min_error, timeout=args.timeout, path=args.path,
                             decode_tokens=args.decode_tokens).checked()  # before the matrix loads
    found = layer_parity(load_selected_matrix(args), *args.layers, settings, args.out)
    if found.text is None:
        print(f"bench parity: {found.error}", file=sys.stderr)
        return 1
    print(found.text)
    print(f"parity: {found.result_file}", file=sys.stderr)
    return 0
