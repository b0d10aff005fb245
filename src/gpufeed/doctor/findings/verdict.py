"""How the verdict is chosen among the findings, their shares already disjoint (shares.py).

The verdict (`choose`) is the waste with the largest share among those whose share is over the level at which the
field's tools recommend a fix for that kind (each module's RECOMMEND_AT, with its source); a grade never outranks
a larger share. An input_bound finding whose background workers keep up (input_bound.keeps_up) is set aside, with
a note. When no waste is over its level the verdict is compute_bound. Kinds over their level whose shares' 95%
intervals (shares.py) overlap the verdict's are `Verdict.tied_with`: a near-tie is said, not picked silently.
"""

from __future__ import annotations

from gpufeed.doctor.findings import BY_KIND, KINDS
from gpufeed.doctor.findings.kinds import compute_bound, input_bound
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes


def reaches(finding: Finding) -> bool:
    """The finding's share is over its kind's level (RECOMMEND_AT); a kind without a level never is."""
    level = BY_KIND[finding.kind].RECOMMEND_AT
    return level is not None and round(finding.share, 12) > level


def candidates(findings: list[Finding], notes: Notes) -> list[Finding]:
    """The wastes that may be the verdict: over their level, less an input wait whose workers keep up (noted)."""
    chosen = []
    for finding in findings:
        if finding.kind == compute_bound.KIND or not reaches(finding):
            continue
        if finding.kind == input_bound.KIND and input_bound.keeps_up(finding):
            notes.run(f"verdict: not input_bound, though the steps wait {finding.share:.0%} for data: the "
                      f"{finding.evidence['loader_workers']} workers prepare "
                      f"{finding.evidence['workers_supply_ratio']:.1f}x the batches the model consumes, so the "
                      f"wait is not the loader's throughput (workers starting, or the queue run dry once)")
            continue
        chosen.append(finding)
    return chosen


def _overlap(first: Finding, second: Finding) -> bool:
    """The two shares' 95% intervals overlap (a share without one is its own point)."""
    low, high = first.evidence.get("share_interval") or (first.share, first.share)
    other_low, other_high = second.evidence.get("share_interval") or (second.share, second.share)
    return low <= other_high and other_low <= high


def choose(wastes: list[Finding]) -> tuple[Finding | None, list[str]]:
    """The verdict's finding among the candidates (the largest share; ties: the vocabulary's order) and the kinds
    tied with it; (None, []) when there is none."""
    if not wastes:
        return None, []
    best = max(wastes, key=lambda f: (f.share, -KINDS.index(f.kind)))
    return best, [f.kind for f in wastes if f is not best and _overlap(best, f)]
