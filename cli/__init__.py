"""The `vak` command line: argument parsing and printing only, over the library (the console script is `vak_context.cli.main:main`)."""
