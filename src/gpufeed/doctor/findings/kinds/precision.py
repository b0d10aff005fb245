"""precision: float64 where float32 would do, or float32 where bf16 or fp16 would.

Found (high) when a float64 model input or parameter was seen or float64 FLOPs were counted (the warm-up step's
arithmetic, observe/flops.py: `fp64_flops_per_step` and their fraction of the step's FLOPs in the evidence; None
when nothing was counted): the share is the step time the dtype governs (wall less input, copies and syncs;
input: the data wait or the loop's own input work, StepRecord.input_s), a bound on what float32 can save; and
(medium) on a GPU when no outermost forward ran under torch.autocast: the share is the device's busy share.
The bf16 fix is the framework's switch (frameworks/words.py: TrainingArguments(bf16=True), Lightning's
precision="bf16-mixed", Accelerator(mixed_precision="bf16")).
--try (CUDA, float32 only): the outermost forward under bf16 autocast; float64 needs the script edited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import Autocast, Declared
from gpufeed.doctor.findings.grading import OWN_LEVEL, OWN_LEVEL_SOURCE, confidence, new_finding
from gpufeed.doctor.findings.kind import Evidence, Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation


@dataclass(frozen=True)
class PrecisionEvidence(Evidence):
    """The evidence read beside the detection: by the --try plan (`experiments`) and the invariants
    (`violations`). `autocast_seen` is False in the bf16 finding and absent (None) in the float64 one."""

    autocast_seen: bool | None
    framework: str | None
    fp64_flops_per_step: int | None
    float64_tensor_seen: bool | None


class Precision(Kind):
    NAME = "precision"
    MEANING = "float64 where float32 would do, or float32 where bf16/fp16 would"
    PART = "model"  # shares.py: the dtype governs the model's own time
    RECOMMEND_AT, RECOMMEND_SOURCE = OWN_LEVEL, OWN_LEVEL_SOURCE
    FIGURES = ("governed_share",)

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        totals = seen.totals
        arithmetic = seen.arithmetic
        fp64 = arithmetic.flops_in("fp64") if arithmetic is not None else None
        if fp64 or seen.float64_seen:
            compute_s = sum(max(0.0, r.wall_s - r.input_s - r.copy_s - r.sync_s) for r in seen.steps)
            share = totals.share(compute_s)  # the step time the dtype governs: a bound on what float32 can save
            evidence = {"fp64_flops_per_step": fp64, "fp64_flop_fraction": fp64 / arithmetic.flops_per_step
                        if fp64 is not None and arithmetic.flops_per_step else None,
                        "float64_tensor_seen": seen.float64_seen, "governed_share": share}
            return new_finding(self.NAME, "high", share, evidence, fix(True, seen.device_type),
                               confidence(totals.steps) if fp64 else "medium")
        if not seen.on_gpu:
            return None
        if seen.autocast_seen is None:
            notes.unmeasured("autocast: not known whether the step ran under torch.autocast")
            return None
        if seen.autocast_seen:
            return None
        busy = seen.device_busy()
        share = busy if busy is not None else 1.0 - totals.share(totals.input_s + totals.copy_s + totals.sync_s)
        evidence = {"autocast_seen": False, "device_busy": busy, "governed_share": share,
                    "framework": seen.setup.framework}
        words.explain(seen.setup, notes, site=False)
        return new_finding(self.NAME, "medium", share, evidence, fix(False, "cuda", seen.setup),
                           confidence(totals.steps))

    def violations(self, finding: Finding, findings: list[Finding]) -> list[str]:
        """float64 is claimed only where fp64 FLOPs were counted or a float64 tensor was seen."""
        evidence = PrecisionEvidence.of(finding.evidence)
        if evidence.autocast_seen is None and not evidence.fp64_flops_per_step and not evidence.float64_tensor_seen:
            return ["precision claims float64 with no fp64 FLOPs counted and no float64 tensor seen"]
        return []

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """bf16 autocast on CUDA for the float32 finding; float64 to float32 is the script's to change."""
        evidence = PrecisionEvidence.of(finding.evidence)
        if evidence.autocast_seen is None:
            return [], "not tried: float64 to float32 needs the model and its data cast in the script"
        if not cuda:
            return [], "bf16 autocast: not tried, the device is the CPU"
        return [Autocast("bf16_autocast", "cuda", words.autocast_path(evidence.framework or "torch"))], None


def fix(float64: bool, device_type: str, setup: Setup = PLAIN) -> tuple[str, str]:
    if float64:
        fix = ("Some operations run in float64, where float32 would do: float64 runs at half the CPU's vector "
               "width and at 1/2 to 1/64 of a GPU's float32 rate. NumPy arrays are float64 by default; convert "
               "inputs with .float() and keep the model in float32.")
        snippet = ("images = torch.from_numpy(array).float()  # NumPy gives float64\n"
                   "model = model.float()\n"
                   "torch.set_default_dtype(torch.float32)")
        return fix, snippet
    switch, snippet = words.mixed_precision(setup, device_type)
    fix = ("The model trains in float32 without autocast. bf16 autocast runs matrix products on tensor cores "
           f"at several times the float32 rate and halves activation memory (Ampere or newer): {switch}.")
    return fix, snippet
