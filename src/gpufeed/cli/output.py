"""Shared command-line output: JSON to a file or standard output, and the rich console."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpufeed.atomic import write_text_atomic
from gpufeed.errors import GpufeedError

# soft_wrap: long lines are not broken at the terminal width, so piped output stays one record per line
console = Console(stderr=False, highlight=False, soft_wrap=True)
error_console = Console(stderr=True, highlight=False, soft_wrap=True)
if not console.is_terminal:  # piped or captured: tables at a width that fits them, not the default 80
    console.width = max(console.width, 140)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths, numpy scalars and NaN made JSON-safe (NaN and infinities become null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
