"""One module per subcommand, each with `register(subparsers)`; discovered by bench.cli."""
