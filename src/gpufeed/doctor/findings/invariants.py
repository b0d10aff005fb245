"""What every report must hold, checked on every report the doctor makes (diagnose.py, and again after --try
has measured the gains), so that the next contradiction between findings is caught by the suite, not by a user:

- shares: each in [0, 1]; the shares of the findings that claim time sum to at most 1 (shares.py);
- the verdict: its kind is a finding's, `verdict.share` is that finding's share; a waste verdict is over its
  kind's level and no other candidate (verdict.candidates) has a larger share; the HEALTHY kind (compute_bound)
  only when there is no candidate; no finding its own kind sets aside (input_bound while its workers keep up);
- each kind's own (`Kind.violations`, kind.py): input_bound blames no loader part under MIN_BLAMED_MS a batch and
  advises no pre-packing when every part is under it; precision claims float64 only where fp64 FLOPs were counted
  or a float64 tensor was seen; while worker_memory projects the RAM running out, no other fix advises workers
  without their cost;
- evidence: no path into an installed package's folder (site-packages): patching.shown_path's form;
- rates: a loader without workers runs in series with the model, so the rates sentence never says it keeps up;
- gains: a measured --try gain beyond what its finding's share allows (1 / (1 - share), with GAIN_SLACK) comes
  with a note that says why (trials/runs.py).

`checked(report)` returns the report; a violation raises AssertionError when GPUFEED_STRICT_REPORTS=1 (the tests
set it: tests/conftest.py), and otherwise becomes a note asking to report it (a user's run is not lost to it).
"""

from __future__ import annotations

import dataclasses
import os

from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import Finding, Report, rates_sentence
from gpufeed.doctor.findings.verdict import candidates, reaches
from gpufeed.doctor.notes import Note, Notes

STRICT = "GPUFEED_STRICT_REPORTS"
# gpufeed's choice: runs of one script in one process differ by several percent (trials/runs.py), so a gain may
# exceed its share's bound by 10% before it needs a reason.
GAIN_SLACK = 0.10
BEYOND_SHARE = "beyond what its share allows"  # the words of trials/runs.py's note on such a gain
TOLERANCE = 1e-6


def gain_allowed(share: float) -> float:
    """The largest speed-up removing a `share` of the step can give, with GAIN_SLACK: 1 / (1 - share)."""
    return (1.0 / (1.0 - share) if share < 1.0 else float("inf")) * (1.0 + GAIN_SLACK)


def violations(report: Report) -> list[str]:
    """Each invariant the report breaks, in words; [] when it holds them all."""
    found: list[str] = []
    findings, verdict = report.findings, report.verdict
    for finding in findings:
        if not -TOLERANCE <= finding.share <= 1.0 + TOLERANCE:
            found.append(f"{finding.kind}: share {finding.share} outside [0, 1]")
    claimed = sum(f.share for f in findings if KINDS[f.kind].claims(f) is not None)
    if claimed > 1.0 + TOLERANCE:
        found.append(f"the findings' shares sum to {claimed:.3f} > 1")
    if verdict.primary is not None:
        found += _verdict(report)
    for finding in findings:
        found += KINDS[finding.kind].violations(finding, findings) + _finding(finding)
    if report.loader_workers == 0 and "keeps up" in rates_sentence(report.to_json()):
        found.append("the rates sentence says a loader without workers keeps up")
    return found


def _verdict(report: Report) -> list[str]:
    verdict, kinds = report.verdict, [f.kind for f in report.findings]
    if verdict.primary not in kinds:
        return [f"the verdict {verdict.primary} is not among the findings {kinds}"]
    primary = report.findings[kinds.index(verdict.primary)]
    found = []
    if verdict.share is None or abs(verdict.share - primary.share) > TOLERANCE:
        found.append(f"verdict.share {verdict.share} is not {primary.kind}'s share {primary.share}")
    # judged over every finding (a kind judged after another reaching its level is no candidate); notes not kept
    wastes = [f for f in candidates(report.findings, Notes(())) if f is not primary]
    kind = KINDS[primary.kind]
    if kind.HEALTHY:
        if wastes:
            found.append(f"{primary.kind} is the verdict, but {wastes[0].kind} is over its level "
                         f"({wastes[0].share:.1%})")
        return found
    if not reaches(primary):
        found.append(f"the verdict {primary.kind} has {primary.share:.1%}, not over its level")
    aside = kind.set_aside(primary)
    if aside is not None:
        found.append(f"{primary.kind} is the verdict, though its kind sets it aside ({aside})")
    larger = [f.kind for f in wastes if f.share > primary.share + TOLERANCE]
    if larger:
        found.append(f"{', '.join(larger)} has a larger share than the verdict {primary.kind}")
    return found


def _finding(finding: Finding) -> list[str]:
    """The invariants every finding holds, whatever its kind."""
    found = []
    for key, value in finding.evidence.items():
        if isinstance(value, str) and ("site-packages" in value or "dist-packages" in value):
            found.append(f"{finding.kind}: evidence {key} is an installed package's full path: {value}")
    gain = finding.gain
    for value in (gain.measured, gain.bound) if gain is not None else ():
        if value is not None and finding.share > 0 and value > gain_allowed(finding.share) \
                and BEYOND_SHARE not in gain.how:
            found.append(f"{finding.kind}: a gain of {value:.2f}x beside a share of {finding.share:.0%} "
                         f"(at most {gain_allowed(finding.share):.2f}x) with no reason given")
    return found


def checked(report: Report) -> Report:
    """The report, its invariants checked (the module docstring)."""
    broken = violations(report)
    if not broken:
        return report
    if os.environ.get(STRICT) == "1":
        raise AssertionError("the report contradicts itself: " + "; ".join(broken))
    note = Note("unmeasured", "gpufeed's own check: the report contradicts itself (" + "; ".join(broken)
                + "); please report it with this output")
    return dataclasses.replace(report, notes=[*report.notes, note])
