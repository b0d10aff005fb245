"""compute_bound: healthy, the device is busy; the next gain is in the model or the kernels.

Judged last, over the other findings (`detect`'s `others`): none may claim INPUT_SHARE_MEDIUM of the step. On a
GPU the device must be busy at least DEVICE_BUSY_ENOUGH (measure/thresholds.py, the figure train's verdict reads
too); on the CPU the data wait must be under INPUT_SHARE_MEDIUM. It is also the primary kind when no finding is
high or medium. No --try experiment.

The advice names only changes whose premise was seen in the step's arithmetic (`Observation.arithmetic`, the
FLOPs FlopCounterMode counted in the last warm-up step, by operator and precision: observe/flops.py):
- convolutions whose input was not channels_last: channels_last (the layout cuDNN's and oneDNN's fastest
  convolutions take);
- matrix products or convolutions in fp32 (or tf32) on a device that computes bf16 natively (a GPU from Ampere
  on, as torch says; a CPU with AMX-BF16 or AVX512-BF16 in its flags, as train's auto precision reads them):
  bf16 autocast; on a device known to lack it, a sentence that bf16 would not help, and no code; unknown, none;
- products in fp64: float32 (the precision finding's change);
- products mostly in bf16 or fp16 already, or no FLOPs the counter sees (elementwise work): torch.compile, which
  fuses the operations between or instead of them.
Then a faster device, the busy device's own lever. Without the count, no change is named (a note says why).
The evidence adds the step's FLOPs, their precision, the achieved FLOP/s and their fraction of the peak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import INPUT_SHARE_MEDIUM, confidence, new_finding
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation, StepArithmetic

KIND = "compute_bound"
MEANING = "healthy: the device is busy; the next gain is in the model or the kernels"


def detect(seen: Observation, notes: Notes, others: list[Finding]) -> Finding | None:
    if any(other.share >= INPUT_SHARE_MEDIUM for other in others):
        return None
    totals = seen.totals
    wait_share = totals.share(totals.data_wait_s)
    busy = seen.busy()
    if seen.on_gpu:
        if busy is None or busy < DEVICE_BUSY_ENOUGH:  # healthy: busy enough (measure/thresholds.py)
            return None
        share = busy
    else:
        if wait_share >= INPUT_SHARE_MEDIUM:
            return None
        share = 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"device_busy": busy, "data_wait_share": wait_share, "compute_share": share}
    if seen.on_gpu:
        evidence.update(seen.gpu_activity())
    arithmetic = seen.arithmetic
    if arithmetic is not None:
        model_step_s = (totals.wall_s - totals.data_wait_s) / totals.steps
        peak = arithmetic.peak_flops_per_s
        evidence.update({"flops_per_step": arithmetic.flops_per_step, "precision": arithmetic.precision,
                         "achieved_flops_per_s": arithmetic.flops_per_step / model_step_s if model_step_s > 0
                         else None, "fraction_of_peak": arithmetic.flops_per_step / model_step_s / peak
                         if peak and model_step_s > 0 else None})
    supporting = seen.count(lambda r: r.data_wait_s < INPUT_SHARE_MEDIUM * r.wall_s)
    return new_finding(KIND, "info", share, evidence, fix(seen.device_type, arithmetic), confidence(supporting))


def levers(arithmetic: StepArithmetic, device_type: str) -> list[tuple[str, str]]:
    """(a sentence, code) for each change whose premise the step's arithmetic shows (the module docstring)."""
    found = []
    if arithmetic.nchw_convolution_flops:
        share = arithmetic.nchw_convolution_flops / arithmetic.flops_per_step
        found.append((f"Convolutions do {share:.0%} of the FLOPs on NCHW images: channels_last is the layout the "
                      f"fastest convolution kernels take.",
                      "model = model.to(memory_format=torch.channels_last)\n"
                      "images = images.to(memory_format=torch.channels_last)"))
    products, single = arithmetic.flops_per_step, arithmetic.flops_in("fp32", "tf32")
    if single and arithmetic.bf16_native:
        found.append((f"Matrix products and convolutions in fp32 do {single / arithmetic.flops_per_step:.0%} of the "
                      f"FLOPs, on a device that computes bf16 natively: bf16 autocast.",
                      f"with torch.autocast(\"{device_type}\", dtype=torch.bfloat16):\n"
                      f"    loss = criterion(model(inputs), targets)"))
    elif single and arithmetic.bf16_native is False:
        found.append(("The matrix products are in fp32, and this device computes no bf16 natively (a CPU without "
                      "AMX or AVX512-BF16, a GPU before Ampere): bf16 autocast would not speed them up.", ""))
    if arithmetic.flops_in("fp64"):
        found.append(("Matrix products run in float64: float32 does them at twice the rate or more.",
                      "model = model.float()  # and the inputs: inputs.float()"))
    low = arithmetic.flops_in("bf16", "fp16")
    if products and 2 * low > products:
        found.append(("The matrix products already run in bf16 or fp16: torch.compile fuses the operations "
                      "between them.", "model = torch.compile(model)"))
    elif arithmetic.flops_per_step == 0:
        found.append(("The step does no matrix products or convolutions (its time is elementwise work and memory "
                      "traffic): torch.compile fuses those operations.", "model = torch.compile(model)"))
    return found


def fix(device_type: str, arithmetic: StepArithmetic | None = None) -> tuple[str, str]:
    """The advice (module docstring): the changes the counted arithmetic backs, then a faster device."""
    faster = "a faster GPU" if device_type == "cuda" else "a GPU"
    if arithmetic is None:
        return (f"The device is busy: the next gain is in the model or the kernels, or {faster}. What the step "
                f"computes was not counted (see the notes), so no change to it is named.", "")
    found = levers(arithmetic, device_type)
    words = " ".join(text for text, _ in found)
    fix = f"The device is busy. {words} Beyond that, {faster}." if found else \
        f"The device is busy: the next gain is in the model or the kernels, or {faster}."
    return fix, "\n".join(code for _, code in found if code)

