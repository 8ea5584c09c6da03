"""`bench presets`: list the built-in matrices and what each needs to run (driver: bench.spec.presets)."""

from __future__ import annotations


def register(sub) -> None:
    sub.add_parser("presets", help="list built-in matrices and what each needs",
                   description="List the built-in matrices (use one with --preset NAME): cells, description, and "
                               "what each needs to run here (a CUDA GPU, optional packages such as torchao), with a "
                               "mark where that is missing. Listing imports no backend library."
                   ).set_defaults(func=cmd_presets)


def cmd_presets(args) -> int:
    from bench.spec.presets import preset_entries

    for entry in preset_entries():
        print(entry.text())
    return 0
