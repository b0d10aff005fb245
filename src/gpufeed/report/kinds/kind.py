"""`DocumentKind`, the contract every kind of saved document keeps, and the `about` block they share.

A kind is the command that writes it, the keys only its body has (a body without them was written by another
command, or its `about.command` was edited), the shape of what its page reads (its body check: shapes.py), the
page itself, and how a document saved under older key names reads under today's. Generic code (report/document.py,
compare/) looks a kind up by `about.command` in KINDS (kinds/__init__.py) and never tests its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.report.kinds.shapes import Anything, Either, EmptyOr, ListOf, MapOf, Problem, Record, Shape

if TYPE_CHECKING:
    from gpufeed.report.html import Page

# What every page's conditions block (report/html.py: conditions_block) reads of the `about` block's machine: the
# rest it shows as it is, whatever its kind. A reading the probe could not take is {"reason": ...}.
MACHINE = Record({"cpu?": EmptyOr(MapOf()), "accelerators?": EmptyOr(Either(ListOf(Anything), MapOf())),
                  "unmeasured?": EmptyOr(ListOf(Anything))})
# Keys renamed within format 1, old name -> current: documents saved before still make their page. Train's result
# and each of bench's precision runs carry them (each kind's `current_names`).
RENAMED_KEYS = {"test_accuracy": "validation_accuracy", "test_loss": "validation_loss"}


def renamed(record: dict) -> dict:
    """`record` with its old key names replaced by the current ones (a current name already there wins); the
    record itself when none is there."""
    if not any(old in record for old in RENAMED_KEYS):
        return record
    return {RENAMED_KEYS.get(key, key): value for key, value in record.items()
            if key not in RENAMED_KEYS or RENAMED_KEYS[key] not in record}


def _same(document: dict) -> dict:
    return document


@dataclass(frozen=True)
class DocumentKind:
    """One kind of saved document. `page(document)` builds its page from a checked document (a function that
    imports its page module when called: matplotlib loads only when a page is made); `current_names(document)`
    is the document under today's key names (a copy when anything is renamed); `has_verdict`: its results carry a
    verdict and findings, which a comparison of two of them shows side by side."""

    command: str
    body_keys: tuple[str, ...]
    body: Shape
    page: Callable[[dict], Page]
    current_names: Callable[[dict], dict] = _same
    has_verdict: bool = False

    def problem(self, document: dict) -> Problem | None:
        """The first thing its page could not read in a document of this kind (under today's names), or None."""
        machine = document["about"].get("machine")
        if isinstance(machine, dict) and "reason" not in machine:
            found = MACHINE.problem(machine, "about.machine")
            if found is not None:
                return found
        return self.body.problem(document, "")
