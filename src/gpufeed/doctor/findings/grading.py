"""How the finding modules (findings/kinds/<kind>.py) grade what they find and build a `Finding`: the shares' shared
thresholds, severity from a share, confidence from a count of supporting steps (and, after `--try`, from the
spread of the measured gain's pairs), the host-bound gate that launch_overhead and small_batch both pass
through, and the check that a forward and backward timed after the watch (the batch probe, the padding trial)
timed the step's work (`timed_elsewhere`).

A share is a fraction of the total wall time of the watched steps (`Totals.share`). Thresholds are named
constants with their source; "gpufeed's choice" marks those no published tool fixes, with the reason.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import Finding
from gpufeed.measure.difference import PairedRatios

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# TensorFlow profiler, input-pipeline analysis (op_stats_to_input_pipeline_analysis.cc): input share >= 5% is
# "moderately", >= 20% "highly" input-bound. torch-tb-profiler (RunProfile.analyze) also warns above 5% DataLoader
# time. We grade every share that has no threshold of its own with these two.
INPUT_SHARE_MEDIUM = 0.05
INPUT_SHARE_HIGH = 0.20
# timed_elsewhere: how much slower than the slowest watched step a run timed after the watch may be and still time the
# step's work. gpufeed's choice: on a shared 2-core VM the same forward and backward, timed as the fastest of 7
# rounds a few seconds after 10 watched steps, came 5-10% slower than the slowest of them in about 1 run in 6
# (tests/doctor/test_language_model_loops.py's T5, one thread); the probe the issue (#32) caught was 5x slower.
DRIFT = 1.25
# a kind's level (kind.py: RECOMMEND_AT) where no tool gives one for its cause, and that level's source
OWN_LEVEL = INPUT_SHARE_MEDIUM
OWN_LEVEL_SOURCE = ("gpufeed's choice: the input share's medium grade (grading.py), as no tool gives a level for "
                    "this cause")
# torch-tb-profiler (_analyze_gpu_metrics): "low utilization ... increase batch size" below 50% GPU utilization.
LOW_DEVICE_BUSY = 0.50
# gpufeed's choice: confidence from the number of steps (or samples) that show the symptom.
CONFIDENT_STEPS, SOME_STEPS = 20, 5
CONFIDENCES = ("low", "medium", "high")
# gpufeed's choice: a --try gain is trusted as far as its pairs agree. Runs of one script in one process differ by
# several percent (trials/runs.py), so a spread within 10% of the median is "high", within 25% "medium".
SPREAD_HIGH, SPREAD_MEDIUM = 0.10, 0.25


def severity(share: float, medium_at: float = INPUT_SHARE_MEDIUM, high_at: float = INPUT_SHARE_HIGH) -> str:
    share = round(share, 12)  # 1.0 - 0.8 is 0.19999999999999996: compare the share a person would compute
    return "high" if share >= high_at else "medium" if share >= medium_at else "low"


def confidence(supporting: int, high_at: int = CONFIDENT_STEPS, medium_at: int = SOME_STEPS) -> str:
    return "high" if supporting >= high_at else "medium" if supporting >= medium_at else "low"


def spread_confidence(ratios: list[float]) -> str:
    """How far a measured gain can be trusted from its pairs' ratios: "low" when measure/difference.py's rule does
    not call the change real (one pair, no spread to judge by; or a range of ratios not clear of MIN_CHANGE on one
    side, such as pairs that disagree on whether the change helped); else by the spread (max - min) / median
    against SPREAD_HIGH and SPREAD_MEDIUM. A 1.00-1.45x range about 1.2 is "low"."""
    paired = PairedRatios(tuple(ratios))
    if len(ratios) < 2 or not paired.real:
        return "low"
    spread = round((paired.high - paired.low) / paired.median, 12)  # 2.1 - 1.9 is 0.20000000000000018
    return "high" if spread <= SPREAD_HIGH else "medium" if spread <= SPREAD_MEDIUM else "low"


def lower_confidence(first: str, second: str) -> str:
    """The less trusting of two confidences."""
    return min(first, second, key=CONFIDENCES.index)


def new_finding(kind: str, grade: str, share: float, evidence: dict, remedy: tuple[str, str],
                trust: str) -> Finding:
    """A finding not yet tried (`gain` None); `remedy` is the module's (fix, snippet). The kind's FIGURES (kind.py)
    must be in `evidence`: a figure it declares that its detection does not fill is our error, not the user's."""
    missing = [key for key in KINDS[kind].FIGURES if key not in evidence]
    assert not missing, f"the {kind} finding's evidence lacks its FIGURES {missing}"
    return Finding(kind, grade, share, evidence, remedy[0], remedy[1], None, trust)


def unexplained_idle(seen: Observation, busy: float) -> float:
    """The device's idle share that input waits, copies and syncs do not account for."""
    totals = seen.totals
    return max(0.0, 1.0 - busy - totals.share(totals.input_s + totals.copy_s + totals.sync_s))


def host_bound_gate(seen: Observation) -> float | None:
    """Device busy (`device_busy()`) when it is below LOW_DEVICE_BUSY and neither input waits nor syncs explain
    it; else None."""
    totals = seen.totals
    busy = seen.device_busy()
    if not seen.on_gpu or busy is None or busy >= LOW_DEVICE_BUSY:
        return None
    if totals.share(totals.input_s) >= INPUT_SHARE_MEDIUM or totals.share(totals.sync_s) >= INPUT_SHARE_MEDIUM:
        return None
    return busy



def watched_model_s(seen: Observation, batches: int) -> list[float]:
    """Each watched step's forward_s + backward_s per batch (`batches` accumulated), for the steps that carry both."""
    return [(r.forward_s + r.backward_s) / batches for r in seen.steps
            if r.forward_s is not None and r.backward_s is not None]


def timed_elsewhere(seen: Observation, seconds: float, batches: int, subject: str, what: str) -> str | None:
    """Why a forward and backward of a watched batch timed after the watch (`seconds`, the fastest of its rounds:
    observe/probe.py) did not time the step's work, or None: it agrees. Each watched step's
    forward_s + backward_s holds that work and more (the loss, zero_grad, the loop's Python), per batch when
    `batches` are accumulated; so a fastest run slower than DRIFT times the slowest watched step's forward and
    backward did not measure the step (the machine much busier while it ran, or another model), and is not used:
    the note says so, under its own subject ("<subject> not used"), as the run's note on `subject` is already
    there. Not judged when the steps do not carry forward_s and backward_s. `what` names the batch timed."""
    parts = watched_model_s(seen, batches)
    if not parts or seconds <= DRIFT * max(parts):
        return None
    return (f"{subject} not used: its fastest forward and backward {what} took "
            f"{1000.0 * seconds:.3g} ms, against {1000.0 * statistics.median(parts):.3g} ms for the watched steps' "
            f"forward and backward (median; slowest {1000.0 * max(parts):.3g} ms): more than {DRIFT:g}x the slowest, "
            f"it did not measure the step it times (the machine busier while it ran?)")
