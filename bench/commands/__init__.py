"""Subcommands: one module per `bench` subcommand, each with `register(subparsers)`; discovered by bench.cli.

A command parses its arguments and calls one library function. The last stage. May import:
every other stage (and bench.cli's argument helpers); nothing imports a command but the CLI
and other commands.
"""
