"""The doctor's report, in the shape docs/design.md documents: a verdict, findings with evidence and fixes, and
typed notes (about the run, or what could not be measured). `to_json` gives exactly the documented JSON.

The kinds a finding may have are the vocabulary of findings/ (`findings.KINDS`, one module per kind).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

SEVERITIES = ("high", "medium", "low", "info")
NoteKind = Literal["run", "unmeasured"]


@dataclass(frozen=True)
class Gain:
    measured: float  # the speed-up factor measured by an experiment (new samples/s ÷ old)
    how: str  # what was run, with the number of steps behind it


@dataclass(frozen=True)
class Finding:
    kind: str  # one of findings.KINDS
    severity: str  # one of SEVERITIES
    share: float  # fraction of step time this finding accounts for
    evidence: dict  # the numbers behind it
    fix: str  # in words
    snippet: str  # as code
    gain: Gain | None
    confidence: str  # "high" | "medium" | "low"

    def __post_init__(self):
        from gpufeed.doctor.findings import KINDS  # here: the finding modules import this one

        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")


@dataclass(frozen=True)
class Verdict:
    primary: str | None  # one of KINDS; None when no step was watched
    device_busy: float | None  # fraction of wall time the device computed; None when not measurable
    data_wait: float | None  # fraction of wall time spent waiting for batches; None when no step was watched
    steps: int
    device: str


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


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    findings: list[Finding]
    notes: list[Note] = field(default_factory=list)
    loader_samples_per_s: float | None = None  # what the input pipeline can supply
    model_samples_per_s: float | None = None  # what the model consumes when fed instantly
    script_error: str | None = None  # the script's exception, one line, when it raised
    # what the report was made from, for the page's timeline (an addition to verdict, findings, unmeasured):
    # {"steps": [StepRecord fields...], "samples": [HostSample fields...], "profile": [one dict per profiled step]}
    timeline: dict = field(default_factory=lambda: {"steps": [], "samples": []})

    @property
    def unmeasured(self) -> list[str]:
        """Every note's text, in order: the JSON's `unmeasured` list."""
        return [note.text for note in self.notes]

    def to_json(self) -> dict:
        findings = [dataclasses.asdict(finding) for finding in self.findings]
        for finding in findings:
            finding["gain"] = finding["gain"] and {"measured": finding["gain"]["measured"],
                                                   "how": finding["gain"]["how"]}
        return {"verdict": dataclasses.asdict(self.verdict), "findings": findings, "unmeasured": self.unmeasured,
                "notes": [note.text for note in self.notes if note.kind == "run"],
                "loader_samples_per_s": self.loader_samples_per_s, "model_samples_per_s": self.model_samples_per_s,
                "script_error": self.script_error, "timeline": copy.deepcopy(self.timeline)}
