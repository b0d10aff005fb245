"""Build the parser, run one command, map errors to exit statuses (0 done, 1 failed, 2 wrong input).

Any other exception is a bug of gpufeed's, not the user's: its traceback, then one line asking for a report
(exit status 1)."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from typing import NoReturn

from gpufeed.errors import GpufeedError

# One module per command; each has `register(subparsers)` that sets `handler` on its parser.
COMMANDS = ("info", "pack", "train", "bench", "plan", "doctor", "compare", "report")


class UsageError(SystemExit):
    """The command line was used wrongly; the one-line error is already on standard error. Exit status 2."""


class CommandLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line naming the command and the fix, not the whole usage.

    `add_subparsers` makes every command's parser of this class too, so `self.prog` is `gpufeed train` there.
    """

    commands: dict[str, argparse.ArgumentParser]  # the command parsers, by name; set by build_parser

    def error(self, message: str) -> NoReturn:
        message = message.replace("\n", " ")
        print(f"error: {self.prog}: {message}; see {self.prog} --help", file=sys.stderr)
        raise UsageError(2)


def build_parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="gpufeed",
        description="Keep the accelerator fed, and say with measurements what a training needs.",
        epilog="Start with `gpufeed info`, then `gpufeed train` (trains on the built-in dataset).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"gpufeed.cli.{name}").register(subparsers)
    parser.commands = subparsers.choices
    return parser


def parse_words(parser: CommandLineParser, words: list[str]) -> argparse.Namespace:
    """Parse the command line; an argument no parser knows is an error of the command it was given to.

    The command is the first word that is not an option (`gpufeed` itself takes none with a value). It is
    found in `words`, not in `args.command`, which a command's own positional of that name may overwrite.
    """
    args, unknown = parser.parse_known_args(words)
    if unknown:
        command = next((word for word in words if not word.startswith("-")), None)
        parser.commands.get(command, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_words(parser, words)
    except UsageError:
        return 2  # already said in one line; --help still exits 0 through argparse's own SystemExit
    args.argv = words  # the exact command, for the `about` block of saved documents
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except GpufeedError as error:
        print(f"error: {error.for_command_line()}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:  # neither the input nor the work: a bug of ours
        return report_bug()


def report_bug() -> int:
    """The exception being handled, shown as a bug: its traceback and one line asking for a report. Exit status 1."""
    from gpufeed import __version__

    traceback.print_exc(file=sys.stderr)
    print(f"error: this is a bug in gpufeed {__version__}; please report it with the traceback above",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
