"""`vak`: the command line. Each command lives in its own module with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from vak_context.errors import VakError

# Modules that add subcommands. Each defines register(subparsers) and sets a `func` default.
COMMAND_MODULES = [
    "vak_context.cli.ledger",
    "vak_context.cli.search",
    "vak_context.cli.serve",
    "vak_context.cli.probe_cmd",
    "vak_context.cli.imports",
    "vak_context.cli.chat",
    "vak_context.cli.farm",
]


class VakArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (what is wrong, where to read more), exit 2.

    ``add_subparsers`` builds the subcommands' parsers with this same class.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}. See `{self.prog} --help`.\n")


def build_parser() -> argparse.ArgumentParser:
    parser = VakArgumentParser(prog="vak", description="vak-context: a context engine for LLM agents")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed: a code, not an exit
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # inside the try: a reader that left shows here, not as a traceback at exit
        return code
    except BrokenPipeError:
        # `vak inspect | head`: the reader closed the pipe. Exit quietly with a SIGPIPE'd tool's
        # status, and point stdout at /dev/null so the interpreter's own flush at exit is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except VakError as exc:
        print(f"vak: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("vak: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
