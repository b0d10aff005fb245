"""host_to_device: copies to the device take a large share of the step, or come from pageable memory.

Found on a GPU when the host's time in host-to-device copies is at least COPY_SHARE of the step, or most copied
bytes come from pageable memory (PAGEABLE_FRACTION); a cheap pageable copy is graded low by its share.
The fix names the loader's site (`evidence.site`) and the framework's switches (frameworks/words.py).
--try: pin_memory=True on every DataLoader (CUDA, when the loader does not pin already).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import Declared, LoaderChange
from gpufeed.doctor.findings.grading import confidence, new_finding, severity
from gpufeed.doctor.findings.kind import Evidence, Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# gpufeed's choice: some copy is unavoidable, so twice the 5% input threshold before copies alone are flagged.
COPY_SHARE = 0.10
# gpufeed's choice: when most copied bytes come from pageable memory, pinning is the first fix to try.
PAGEABLE_FRACTION = 0.50


@dataclass(frozen=True)
class HostToDeviceEvidence(Evidence):
    """The evidence the --try plan reads (`experiments`)."""

    pin_memory: bool | None
    framework: str | None


class HostToDevice(Kind):
    NAME = "host_to_device"
    MEANING = "copies to the device take a large share of the step"
    PART, PER_STEP = "copy", "copy_s"  # shares.py: the part of the step its cause lives in
    RECOMMEND_AT = 0.05
    RECOMMEND_SOURCE = ("gpufeed's choice: the input share's level (the TensorFlow profiler counts host-to-device "
                        "copies in its input time, whose \"moderately input-bound\" starts at 5%)")
    FIGURES = ("copy_share", "mean_copy_ms", "pageable_fraction")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        totals = seen.totals
        if not seen.on_gpu or (totals.copy_bytes == 0 and totals.copy_s == 0):
            return None
        share = totals.share(totals.copy_s)
        pageable = totals.copy_pageable_bytes / totals.copy_bytes if totals.copy_bytes else 0.0
        if share < COPY_SHARE and pageable < PAGEABLE_FRACTION:
            return None
        evidence = {"copy_share": share, "mean_copy_ms": 1000.0 * totals.copy_s / totals.steps,
                    "copy_mib_per_step": totals.copy_bytes / totals.steps / 2**20, "pageable_fraction": pageable,
                    "copy_gb_per_s": totals.copy_bytes / totals.copy_s / 1e9 if totals.copy_s > 0 else None,
                    "pin_memory": seen.loader.pin_memory, **words.loader_evidence(seen.setup, ("pin_memory",), notes)}
        supporting = seen.count(lambda r: r.copy_s >= COPY_SHARE * r.wall_s or r.copy_pageable_bytes > 0)
        return new_finding(self.NAME, severity(share), share, evidence, fix(seen.setup), confidence(supporting))

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """pin_memory=True on every DataLoader, on CUDA while the loader does not pin."""
        evidence = HostToDeviceEvidence.of(finding.evidence)
        if cuda and evidence.pin_memory is not True:
            path = words.experiment_path(evidence.framework or "torch", {"pin_memory": "True"})
            return [LoaderChange("pin_memory", pin_memory=True, path=path)], None
        return [], "not tried: the loader already pins memory, or the device is not CUDA"


def fix(setup: Setup = PLAIN) -> tuple[str, str]:
    """Pinned memory and copies that overlap compute, in the words of `setup`'s framework."""
    pinned, snippet = words.pinned_copies(setup)
    fix = ("Copies to the device take a large share of the step, or come from pageable memory that the driver "
           f"must stage first. Copy from pinned memory: {pinned}; send uint8 and convert on the device (4x fewer "
           "bytes than float32); keep a dataset that fits on the device there (gpufeed.Feed does this with "
           "resident=\"auto\").")
    return fix, snippet
