"""`bench presets`: list the built-in matrices."""

from __future__ import annotations


def register(sub) -> None:
    sub.add_parser("presets", help="list built-in matrices").set_defaults(func=cmd_presets)


def cmd_presets(args) -> int:
    from bench.spec import list_presets, load_matrix

    for name in list_presets():
        m = load_matrix(name, preset=True)
        print(f"{name:16s} {len(m.cells):4d} cells  {m.description}")
    return 0
