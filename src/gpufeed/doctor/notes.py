"""The lines of a report besides its findings: how the run was read ("run") and what could not be measured
("unmeasured"). Every stage adds them (the watch, the profile, the findings, --try), so they sit below all of
them; the report (findings/report.py) carries them in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

NoteKind = Literal["run", "unmeasured"]


@dataclass(frozen=True)
class Note:
    """One line of the report besides the findings. `kind` "run": how the run was read (what a step was, which
    beat the window can show, an incomplete watch); "unmeasured": what could not be measured, and why. The
    terminal prints the first as "note:", the second as "not measured:"; the page puts them under two headings."""

    kind: NoteKind
    text: str  # "subject: what and why"

    def __post_init__(self):
        if self.kind not in ("run", "unmeasured"):
            raise ValueError(f"unknown note kind {self.kind!r}")

    @property
    def subject(self) -> str:
        return self.text.split(":", 1)[0]


def unmeasured(lines: Iterable[str]) -> list[Note]:
    """Notes of kind "unmeasured", one per line."""
    return [Note("unmeasured", line) for line in lines]


class Notes:
    """The notes of a report in the order they were made. `add` keeps one per subject: a subject already
    explained (by the instrumentation, say) is not repeated; the notes it starts from are kept as they are."""

    def __init__(self, notes: Iterable[Note] = ()) -> None:
        self.items: list[Note] = list(notes)

    def add(self, kind: NoteKind, text: str) -> None:
        note = Note(kind, text)
        if all(existing.subject != note.subject for existing in self.items):
            self.items.append(note)

    def unmeasured(self, text: str) -> None:
        self.add("unmeasured", text)

    def run(self, text: str) -> None:
        self.add("run", text)
