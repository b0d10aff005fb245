"""What every report must hold, checked on every report the doctor makes (diagnose.py, and again after --try
has measured the gains), so that the next contradiction between findings is caught by the suite, not by a user:

- shares: each in [0, 1]; the shares of the findings that claim time sum to at most 1 (shares.py);
- the verdict: its kind is a finding's, `verdict.share` is that finding's share; a waste verdict is over its
  kind's level and no other candidate (diagnose.candidates) has a larger share; compute_bound only when there is
  no candidate; input_bound is not the verdict while its workers keep up;
- input_bound: a part blamed ("takes the most") costs the loop at least MIN_BLAMED_MS a batch, and no pre-packing
  is advised when every part is under it;
- precision: float64 is claimed only where fp64 FLOPs were counted or a float64 tensor was seen;
- evidence: no path into an installed package's folder (site-packages): patching.shown_path's form;
- workers: while worker_memory projects the RAM running out, no other fix advises workers without their cost;
- rates: a loader without workers runs in series with the model, so the rates sentence never says it keeps up;
- gains: a measured --try gain beyond what its finding's share allows (1 / (1 - share), with GAIN_SLACK) comes
  with a note that says why (trials/runs.py).

`checked(report)` returns the report; a violation raises AssertionError when GPUFEED_STRICT_REPORTS=1 (the tests
set it: tests/conftest.py), and otherwise becomes a note asking to report it (a user's run is not lost to it).
"""

from __future__ import annotations

import dataclasses
import os

from gpufeed.doctor.findings import BY_KIND, shares
from gpufeed.doctor.findings.kinds import compute_bound, input_bound, precision
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
    claimed = sum(f.share for f in findings if shares.part_of(BY_KIND[f.kind], f) is not None)
    if claimed > 1.0 + TOLERANCE:
        found.append(f"the findings' shares sum to {claimed:.3f} > 1")
    if verdict.primary is not None:
        found += _verdict(report)
    for finding in findings:
        found += _finding(finding)
    runs_out = any(f.kind == "worker_memory" and f.severity == "high" for f in findings)
    for finding in findings:
        if runs_out and finding.kind != "worker_memory" and "num_workers" in finding.fix + finding.snippet \
                and "RAM" not in finding.fix:
            found.append(f"{finding.kind} advises workers without their RAM cost while the RAM runs out")
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
    wastes = candidates([f for f in report.findings if f is not primary], Notes(()))  # its notes are not kept
    if primary.kind == compute_bound.KIND:
        if wastes:
            found.append(f"compute_bound is the verdict, but {wastes[0].kind} is over its level "
                         f"({wastes[0].share:.1%})")
        return found
    if not reaches(primary):
        found.append(f"the verdict {primary.kind} has {primary.share:.1%}, not over its level")
    if primary.kind == input_bound.KIND and input_bound.keeps_up(primary):
        found.append("input_bound is the verdict while its workers keep up")
    larger = [f.kind for f in wastes if f.share > primary.share + TOLERANCE]
    if larger:
        found.append(f"{', '.join(larger)} has a larger share than the verdict {primary.kind}")
    return found


def _finding(finding: Finding) -> list[str]:
    found = []
    evidence = finding.evidence
    if finding.kind == input_bound.KIND:
        part = evidence.get("dominant_part")
        ms = {key: evidence.get(key) for key in input_bound.PART_KEYS}
        if part is not None and input_bound.cost_to_loop(ms, part, evidence.get("loader_workers")) \
                < input_bound.MIN_BLAMED_MS:
            found.append(f"input_bound blames {part}, under {input_bound.MIN_BLAMED_MS} ms a batch")
        if evidence.get("parts_below_blame") and "gpufeed pack" in finding.fix:
            found.append("input_bound advises pre-packing for loader parts under the blame level")
    if finding.kind == precision.KIND and "autocast_seen" not in evidence \
            and not evidence.get("fp64_flops_per_step") and not evidence.get("float64_tensor_seen"):
        found.append("precision claims float64 with no fp64 FLOPs counted and no float64 tensor seen")
    for key, value in evidence.items():
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
