"""Build the parser, run one command, map errors to exit statuses (0 done, 1 failed, 2 wrong input)."""

from __future__ import annotations

import argparse
import importlib
import sys

from gpufeed.errors import GpufeedError

# One module per command; each has `register(subparsers)` that sets `handler` on its parser.
COMMANDS = ("info", "pack", "train", "bench", "plan", "doctor", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufeed",
        description="Keep the accelerator fed, and say with measurements what a training needs.",
        epilog="Start with `gpufeed info`, then `gpufeed train` (trains on the built-in dataset).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"gpufeed.cli.{name}")
        except ModuleNotFoundError as error:
            if error.name == f"gpufeed.cli.{name}":
                continue  # command not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(words)
    args.argv = words  # the exact command, for the `about` block of saved documents
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except GpufeedError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
