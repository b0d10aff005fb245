"""precision: float64 where float32 would do, or float32 where bf16 or fp16 would.

Found (high) when a float64 model input or parameter was seen or float64 operations were counted: the share is
the step time the dtype governs (wall less data wait, copies and syncs), a bound on what float32 can save; and
(medium) on a GPU when no outermost forward ran under torch.autocast: the share is the device's busy share.
The bf16 fix is the framework's switch (frameworks/words.py: TrainingArguments(bf16=True), Lightning's
precision="bf16-mixed", Accelerator(mixed_precision="bf16")).
--try (CUDA, float32 only): the outermost forward under bf16 autocast; float64 needs the script edited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import confidence, new_finding
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

KIND = "precision"
MEANING = "float64 where float32 would do, or float32 where bf16/fp16 would"


def detect(seen: Observation, notes: Notes) -> Finding | None:
    counted = [r for r in seen.steps if r.float64_ops > 0]
    totals = seen.totals
    if counted or seen.float64_seen:
        governed = counted or seen.steps  # the flag alone does not say which steps
        compute_s = sum(max(0.0, r.wall_s - r.data_wait_s - r.copy_s - r.sync_s) for r in governed)
        share = totals.share(compute_s)  # the step time the dtype governs: a bound on what float32 can save
        evidence = {"float64_ops_per_step": sum(r.float64_ops for r in seen.steps) / totals.steps,
                    "steps_with_float64": len(counted), "governed_share": share}
        return new_finding(KIND, "high", share, evidence, fix(True, seen.device_type),
                           confidence(len(counted)) if counted else "medium")
    if not seen.on_gpu:
        return None
    if seen.autocast_seen is None:
        notes.unmeasured("autocast: not known whether the step ran under torch.autocast")
        return None
    if seen.autocast_seen:
        return None
    busy = seen.device_busy()
    share = busy if busy is not None else 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"autocast_seen": False, "device_busy": busy, "governed_share": share,
                "framework": seen.setup.framework}
    words.explain(seen.setup, notes, site=False)
    return new_finding(KIND, "medium", share, evidence, fix(False, "cuda", seen.setup), confidence(totals.steps))


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
