"""One module per subcommand: add_arguments(parser) and run(args) -> int; cli.py imports only the one asked for."""
