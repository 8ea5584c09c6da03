"""Subcommands: one module per `bench` verb, each with `register(subparsers)`; discovered by bench.cli.

One shape per verb (asv's commands): a command parses its arguments, calls the one driver of its
verb in that driver's pipeline stage (tests/test_layout.py lists them: bench.runner.build,
bench.oom.driver, bench.study.driver, ...) and prints what it returns. The last stage. May import:
bench.cli's argument helpers, bench.errors and its verb's driver, nothing else of the package;
nothing imports a command but the CLI.
"""

# The order `bench --help` lists commands in: the order a user works (asv keeps such a list), not
# the alphabet. A command module missing here is listed after these, alphabetically
# (tests/test_cli.py checks that every module is placed).
WORKFLOW = (
    "presets", "run", "report", "compare", "study", "oom", "profile", "accuracy", "parity", "capacity",
    "kernels", "build", "workload",
)
