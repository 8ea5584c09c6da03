"""Subcommands: one module per `bench` subcommand, each with `register(subparsers)`; discovered by bench.cli.

A command parses its arguments and calls one library function. The last stage. May import:
every other stage (and bench.cli's argument helpers); nothing imports a command but the CLI
and other commands.
"""

# The order `bench --help` lists commands in: the order a user works (asv keeps such a list), not
# the alphabet. A command module missing here is listed after these, alphabetically
# (tests/test_cli.py checks that every module is placed).
WORKFLOW = (
    "presets", "run", "report", "compare", "study", "oom", "profile", "accuracy", "parity", "capacity",
    "kernels", "build", "workload",
)
