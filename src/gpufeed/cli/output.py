"""Shared command-line output: JSON to a file or standard output, and the rich console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpufeed.atomic import write_text_atomic
from gpufeed.errors import GpufeedError
from gpufeed.report.document import to_jsonable

# soft_wrap: long lines are not broken at the terminal width, so piped output stays one record per line
console = Console(stderr=False, highlight=False, soft_wrap=True)
error_console = Console(stderr=True, highlight=False, soft_wrap=True)
if not console.is_terminal:  # piped or captured: tables at a width that fits them, not the default 80
    console.width = max(console.width, 140)


def add_json_flag(parser, help_text: str = "write the result as JSON to PATH ('-' for standard output)") -> None:
    parser.add_argument("--json", metavar="PATH", default=None, help=help_text)


def emit_json(result: Any, path: str | None) -> None:
    """Write `result` as JSON to `path` (atomically) or to standard output for '-'."""
    if path is None:
        return
    text = json.dumps(to_jsonable(result), indent=2, sort_keys=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(path)
    if not target.parent.exists():
        raise GpufeedError(f"cannot write {path}: folder {target.parent} does not exist; create it first")
    write_text_atomic(target, text)


def add_html_flag(parser) -> None:
    parser.add_argument("--html", metavar="PATH", default=None,
                        help="also write a self-contained HTML page with charts to PATH (opens from disk)")


def check_output_paths(args, inputs: tuple[str | Path, ...] = ()) -> None:
    """Fail before the work when --json, --html or --markdown names a file in a folder that does not exist, a
    folder, one of the command's `inputs`, or the same file as another of these flags (one would overwrite the
    other); only --json may be '-'."""
    chosen = {}
    for flag in ("json", "html", "markdown"):
        path = getattr(args, flag, None)
        if path is None or (path == "-" and flag == "json"):
            continue
        if path == "-":
            raise GpufeedError(f"--{flag} needs a file name (it does not go to standard output)")
        if not Path(path).parent.exists():
            raise GpufeedError(f"cannot write --{flag} {path}: folder {Path(path).parent} does not exist; "
                               f"create it first")
        if Path(path).is_dir():
            raise GpufeedError(f"cannot write --{flag} {path}: it is a folder; give a file name, such as "
                               f"{Path(path) / ('run.' + ('md' if flag == 'markdown' else flag))}")
        for source in inputs:
            if _same_file(path, source):
                raise GpufeedError(f"--{flag} {path} is the command's input {source}: writing it would destroy it; "
                                   f"give another file name")
        for other, other_path in chosen.items():
            if _same_file(path, other_path):
                raise GpufeedError(f"--{other} and --{flag} name the same file ({path}): one would overwrite the "
                                   f"other; give each its own name")
        chosen[flag] = path


def _same_file(first: str | Path, second: str | Path) -> bool:
    """Whether two paths name one file (existing or not)."""
    return Path(first).resolve() == Path(second).resolve()


def emit_document(result: Any, command: str, args, machine: dict | None = None) -> dict | None:
    """The command's result as its saved document (`about` block first) to --json, and its page to --html.

    Returns the document, or None when neither flag was given (the machine is then not probed)."""
    from gpufeed.report.document import about, check_document, render
    from gpufeed.report.html import write_html

    json_path, html_path = getattr(args, "json", None), getattr(args, "html", None)
    if json_path is None and html_path is None:
        return None
    body = to_jsonable(result)
    document = {"about": about(command, getattr(args, "argv", None), machine=machine), **body}
    emit_json(document, json_path)
    if html_path is not None:
        write_html(html_path, render(check_document(document)))
        (error_console if json_path == "-" else console).print(f"page: {html_path}")
    return document
