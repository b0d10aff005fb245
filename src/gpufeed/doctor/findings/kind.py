"""A finding kind is a declared contract: `Kind`, the class each module in kinds/ subclasses once, and what its
methods are given (`Judged`) or give back (`Evidence`). Generic code (diagnose.py, shares.py, verdict.py,
invariants.py, report.py's sentences, trials/plan.py and trials/runs.py, the pages) reads a kind only through
this interface, from the registry (registry.py's `KINDS`), and never tests a kind's name.

Why a base class and not a Protocol: most of the contract has a default that most kinds keep (no per-step field,
yielding to no kind, nothing to add to the others' fixes or to the timeline, no --try experiment, no words of its
own in the verdict's line, no invariant of its own); a base class holds each default once, a kind overrides what
it has, and `__init_subclass__` checks when its module is imported that it declares what has no default. A
Protocol would have every kind restate every default, or generic code read the optional parts with getattr,
which is what this replaces.

The contract, in the order of a report's making:
- `NAME`, `MEANING`: its name in the vocabulary (the JSON's `kind`) and its meaning in a line (the page's);
- `detect(seen, notes, judged) -> Finding | None`, one signature for every kind: the finding an `Observation`
  shows, adding to `notes` what it could not judge. `judged` is empty for all but the `HEALTHY` kind
  (compute_bound), which is judged last, over the others' findings with their shares made disjoint and what
  they left of each part of the step, and is the verdict when no waste reaches its level (diagnose.py);
- `PART` (the part of the step its cause lives in) or `claims(finding)` where that depends on the evidence;
  `CLAIMS_TIME = False` for a kind whose time is not measured (it claims no share); `PER_STEP`, the StepRecord
  field that measures it per step (its share's interval), or None; `YIELDS_TO`, the kinds it gives way to on an
  equal share (shares.py);
- `RECOMMEND_AT`, the share over which it may be the verdict (None: never), and `RECOMMEND_SOURCE`, where that
  level comes from; `set_aside(finding)`: why a finding over its level is not the verdict after all, as the
  note that says so (verdict.py); `JUDGED_AFTER`, the kinds whose fix changes what this kind measured: while one
  of them reaches its level, this kind is not the verdict (verdict.py);
- `annotate(findings)`: the report's findings with what this kind adds to the others' (worker_memory: each
  worker's RAM cost in the fixes that advise workers), called for every kind once the findings are sorted;
- `timeline(seen)`: what it adds to the report's timeline under its name (worker_memory's readings), or None;
- `violations(finding, findings)`: the invariants of its own that a report must hold (invariants.py);
- `verdict_words(share, finding)` and `verdict_addendum(finding)`: its words in the verdict's line, as the
  verdict and beside another verdict (report.verdict_headline, on a saved document's dicts); `next_remedy(finding)`:
  what the line names instead when --try measured the recommended fix and it gained nothing real; `OLD_REPORT_KEYS`:
  report keys that documents saved before them kept in this kind's evidence (report.rates_sentence);
- `experiments(finding, cuda)`: its --try experiments as data (experiments.py), built and run by trials/, and
  why none or no more are tried; `BEYOND_SHARE_CAUSE`: why a measured gain may exceed what its share allows;
- `FIGURES`: the evidence keys every finding of the kind carries, the figures that carry it (new_finding,
  grading.py, checks them); where other code reads its evidence, a typed view of those keys (an `Evidence`
  subclass) while the finding's `evidence` dict, the JSON's, stays as its detection wrote it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from gpufeed.doctor.findings.experiments import NO_EXPERIMENT, Declared

if TYPE_CHECKING:
    from gpufeed.doctor.findings.report import Finding
    from gpufeed.doctor.notes import Notes
    from gpufeed.doctor.observation import Observation


@dataclass(frozen=True)
class Judged:
    """What the HEALTHY kind is judged over: the other kinds' findings, their shares already disjoint, and what
    their claims left of each part of the step (shares.py). Empty for every other kind, judged first."""

    findings: tuple[Finding, ...] = ()
    left: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evidence:
    """A kind's typed view of the evidence keys read outside its detection (its --try experiments, its invariants,
    the pages): each field is the evidence key of its name, None where a finding lacks it (a saved document
    older than the key, a hand-made finding). Subclasses name their fields; `of` reads them."""

    @classmethod
    def of(cls, evidence: Mapping) -> Evidence:
        return cls(**{each.name: evidence.get(each.name) for each in dataclasses.fields(cls)})


class Kind:
    """One finding kind's contract (the module docstring). Subclass it once in the kind's module, set what has no
    default, override what differs; its instance goes in the registry (findings/__init__.py)."""

    NAME: ClassVar[str]
    MEANING: ClassVar[str]
    RECOMMEND_AT: ClassVar[float | None]
    RECOMMEND_SOURCE: ClassVar[str]
    FIGURES: ClassVar[tuple[str, ...]]
    PART: ClassVar[str | None] = None
    CLAIMS_TIME: ClassVar[bool] = True
    PER_STEP: ClassVar[str | None] = None
    YIELDS_TO: ClassVar[tuple[str, ...]] = ()
    HEALTHY: ClassVar[bool] = False
    JUDGED_AFTER: ClassVar[tuple[str, ...]] = ()
    OLD_REPORT_KEYS: ClassVar[tuple[str, ...]] = ()
    BEYOND_SHARE_CAUSE: ClassVar[str] = ("the change also sped up a part of the step the share does not count, or "
                                         "the pairs differ by noise")

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in ("NAME", "MEANING", "RECOMMEND_AT", "RECOMMEND_SOURCE", "FIGURES")
                   if not hasattr(cls, name)]
        if cls.detect is Kind.detect:
            missing.append("detect")
        if missing:
            raise TypeError(f"the finding kind {cls.__name__} does not declare {', '.join(missing)} "
                            f"(doctor/findings/kind.py)")
        if cls.CLAIMS_TIME and cls.PART is None and cls.claims is Kind.claims:
            raise TypeError(f"the finding kind {cls.NAME} claims time but names no PART and no claims(finding)")
        if not cls.CLAIMS_TIME and cls.RECOMMEND_AT is not None:
            raise TypeError(f"the finding kind {cls.NAME} claims no time, so it has no level (RECOMMEND_AT None)")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        """The finding `seen` shows, or None; what could not be judged goes into `notes`."""
        raise NotImplementedError

    def claims(self, finding: Finding) -> str | None:
        """The part of the step `finding`'s cause lives in (shares.py); None for a kind that claims no time."""
        return self.PART if self.CLAIMS_TIME else None

    def set_aside(self, finding: Finding) -> str | None:
        """Why `finding`, over its level, is not the verdict, as the note that says so; None: it may be."""
        return None

    def annotate(self, findings: list[Finding]) -> list[Finding]:
        """The report's findings, sorted, with what this kind adds to them."""
        return findings

    def timeline(self, seen: Observation) -> dict | None:
        """What this kind adds to the report's timeline under its name, or None."""
        return None

    def violations(self, finding: Finding, findings: list[Finding]) -> list[str]:
        """Each invariant of this kind's own that `finding` (among the report's `findings`) breaks, in words."""
        return []

    def verdict_words(self, share: float | None, finding: dict) -> str | None:
        """The verdict's line's words for its share when this kind is the verdict (`finding`: its saved dict, or
        {} when the document has none); None: the share and the grade."""
        return None

    def verdict_addendum(self, finding: dict) -> str:
        """What the verdict's line adds for this kind's `finding` (its saved dict) whatever the verdict is."""
        return ""

    def next_remedy(self, finding: dict) -> str | None:
        """What to try when --try measured this kind's recommended fix and it gained nothing real (said in the
        verdict's line, which then no longer leads with that fix); None: no other remedy is named."""
        return None

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """The --try experiments that test `finding`'s fix on this device, and why none or no more are tried."""
        return [], NO_EXPERIMENT
