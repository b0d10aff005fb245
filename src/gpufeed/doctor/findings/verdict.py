"""How the verdict is chosen among the findings, their shares already disjoint (shares.py).

The verdict (`choose`) is the waste with the largest share among those whose share is over the level at which the
field's tools recommend a fix for that kind (each kind's RECOMMEND_AT, with its source: kind.py); a grade never
outranks a larger share. A finding its own kind sets aside (`Kind.set_aside`: an input_bound finding whose
background workers keep up) is not a candidate, with a note; nor is one whose measurement another candidate's fix
would change (`Kind.JUDGED_AFTER`: small_batch's probe timed the padded batch that padding_waste's cut changes, so
the batch is judged again after the cut), with a note. When no waste is over its level the verdict is the
HEALTHY kind's (compute_bound: diagnose.py). Kinds over their level whose shares' 95% intervals (shares.py)
overlap the verdict's are `Verdict.tied_with`: a near-tie is said, not picked silently.
"""

from __future__ import annotations

from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes


def reaches(finding: Finding) -> bool:
    """The finding's share is over its kind's level (RECOMMEND_AT); a kind without a level never is."""
    level = KINDS[finding.kind].RECOMMEND_AT
    return level is not None and round(finding.share, 12) > level


def candidates(findings: list[Finding], notes: Notes) -> list[Finding]:
    """The wastes that may be the verdict: over their level, less those their kind sets aside and those judged
    after another that reaches its level (noted)."""
    chosen = []
    reaching = {finding.kind for finding in findings if reaches(finding)}
    for finding in findings:
        kind = KINDS[finding.kind]
        if kind.HEALTHY or not reaches(finding):
            continue
        aside = kind.set_aside(finding)
        before = [name for name in kind.JUDGED_AFTER if name in reaching]
        if aside is None and before:
            aside = (f"{finding.kind}: not the verdict while {', '.join(before)} reaches its level: that fix changes "
                     f"what {finding.kind} measured, so it is judged again after it")
        if aside is not None:
            notes.run(aside)
            continue
        chosen.append(finding)
    return chosen


def _overlap(first: Finding, second: Finding) -> bool:
    """The two shares' 95% intervals overlap (a share without one is its own point)."""
    low, high = first.evidence.get("share_interval") or (first.share, first.share)
    other_low, other_high = second.evidence.get("share_interval") or (second.share, second.share)
    return low <= other_high and other_low <= high


def choose(wastes: list[Finding]) -> tuple[Finding | None, list[str]]:
    """The verdict's finding among the candidates (the largest share; ties: the registry's order) and the kinds
    tied with it; (None, []) when there is none."""
    if not wastes:
        return None, []
    best = max(wastes, key=lambda f: (f.share, -KINDS.index(f.kind)))
    return best, [f.kind for f in wastes if f is not best and _overlap(best, f)]
