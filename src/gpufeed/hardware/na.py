"""`NA`: a reading that could not be taken, with the reason why.

A hardware query that cannot answer (no GPU, no driver, a field the device does not support, a file
that is not readable) returns `NA("why")` instead of raising or inventing a zero. `NA` is falsy, so
`value or default` works, but code that must tell a real zero from a missing reading uses `is_na`.
`attempt(what, read)` turns a reading that raises into an `NA` naming `what` and the error.

In JSON (through `gpufeed.cli.output.to_jsonable`, which turns dataclasses into dicts) an `NA`
appears as `{"reason": "..."}`, so a reader tells it from a number by its type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class NA:
    """A value that could not be measured; `reason` says why, in one line."""

    reason: str

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return f"NA ({self.reason})"


def is_na(value: Any) -> TypeGuard[NA]:
    """True when `value` is a missing reading (an `NA`)."""
    return isinstance(value, NA)


def attempt(what: str, read: Callable[[], T]) -> T | NA:
    """`read()`, or NA naming `what` and the error."""
    try:
        return read()
    except Exception as error:
        return NA(f"{what}: {type(error).__name__}: {error}")
