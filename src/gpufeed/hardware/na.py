"""`NA`: a reading that could not be taken, with the reason why.

A hardware query that cannot answer (no GPU, no driver, a field the device does not support, a file
that is not readable) returns `NA("why")` instead of raising or inventing a zero. `NA` is falsy, so
`value or default` works, but code that must tell a real zero from a missing reading uses `is_na`.

In JSON (through `gpufeed.cli.output.to_jsonable`, which turns dataclasses into dicts) an `NA`
appears as `{"reason": "..."}`, so a reader tells it from a number by its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard


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
