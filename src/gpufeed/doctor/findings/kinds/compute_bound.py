"""compute_bound: no waste reaches the level at which a fix is recommended; the step's time is the model's own
arithmetic, and the next gain is in the model or the kernels.

The HEALTHY kind (kind.py): judged last, over the other findings (`detect`'s `judged`, their shares already
disjoint: shares.py), and made only when none of them reaches its kind's level (diagnose.py: the verdict). Its
share is what the others leave of the device's busy part (on the CPU, of the model's part). On a GPU busy less than
DEVICE_BUSY_ENOUGH (measure/thresholds.py,
the figure train's verdict reads too) the fix says how much of the step the device idled with no cause found above
its level. No --try experiment.

The advice names only changes whose premise was seen in the step's arithmetic (`Observation.arithmetic`, the
FLOPs FlopCounterMode counted in the last warm-up step, by operator and precision: observe/flops.py):
- convolutions whose input was not channels_last: channels_last (the layout cuDNN's and oneDNN's fastest
  convolutions take);
- matrix products or convolutions in fp32 (or tf32) on a device that computes bf16 natively (a GPU from Ampere
  on, as torch says; a CPU with AMX-BF16 or AVX512-BF16 in its flags, as train's auto precision reads them):
  bf16 mixed precision in the framework's words (frameworks/words.py's `mixed_precision`: bf16=True in the
  Trainer's TrainingArguments, at its line when known; Lightning's precision="bf16-mixed"; the Accelerator's
  mixed_precision="bf16"; else torch.autocast); on a device known to lack it, a sentence that bf16 would not
  help, and no code; unknown, none;
- products in fp64: float32 (the precision finding's change);
- products mostly in bf16 or fp16 already, or no FLOPs the counter sees (elementwise work): torch.compile, which
  fuses the operations between or instead of them.
Then a faster device, the busy device's own lever. Without the count, no change is named (a note says why).
The evidence adds the step's FLOPs, their precision, the achieved FLOP/s and their fraction of the peak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import INPUT_SHARE_MEDIUM, confidence, new_finding
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation, StepArithmetic

class ComputeBound(Kind):
    NAME = "compute_bound"
    MEANING = ("no waste reaches its level: the step is the model's own work; the next gain is in the model or "
               "kernels")
    HEALTHY = True  # judged last, over the others; the verdict when no waste reaches its level (diagnose.py)
    PART = "busy"  # shares.py: the model's own arithmetic; not a waste, so it has no level
    RECOMMEND_AT = None
    RECOMMEND_SOURCE = "no level: not a waste, but the verdict when no waste reaches its own"
    FIGURES = ("compute_share", "device_busy", "claimed_by_others")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding:
        """The healthy finding over the others (the module docstring): `judged.findings`, their shares already
        disjoint, and `judged.left`, what their claims left of each part of the step (shares.py)."""
        totals = seen.totals
        wait_share = totals.share(totals.input_s)
        busy = seen.busy()
        share = max(0.0, judged.left["busy"])
        enough = busy >= DEVICE_BUSY_ENOUGH if seen.on_gpu and busy is not None else None
        evidence = {"device_busy": busy, "busy_enough": enough, "data_wait_share": wait_share,
                    "compute_share": share, "claimed_by_others": sum(other.share for other in judged.findings)}
        if seen.on_gpu:
            evidence.update(seen.gpu_activity())
        arithmetic = seen.arithmetic
        if arithmetic is not None:
            model_step_s = (totals.wall_s - totals.input_s) / totals.steps
            peak = arithmetic.peak_flops_per_s
            evidence.update({"flops_per_step": arithmetic.flops_per_step, "precision": arithmetic.precision,
                             "achieved_flops_per_s": arithmetic.flops_per_step / model_step_s if model_step_s > 0
                             else None, "fraction_of_peak": arithmetic.flops_per_step / model_step_s / peak
                             if peak and model_step_s > 0 else None})
        supporting = seen.count(lambda r: r.input_s < INPUT_SHARE_MEDIUM * r.wall_s)
        idle = busy if enough is False else None
        return new_finding(self.NAME, "info", share, evidence, fix(seen.device_type, arithmetic, idle, seen.setup),
                           confidence(supporting))

    def verdict_words(self, share: float | None, finding: dict) -> str | None:
        """Not a waste's share but what the wastes left: the model's own work."""
        return (f"no waste reaches its level; the model's own work is {share:.0%} of the step"
                if share is not None else "no waste reaches its level")


def levers(arithmetic: StepArithmetic, device_type: str, setup: Setup = PLAIN) -> list[tuple[str, str]]:
    """(a sentence, code) for each change whose premise the step's arithmetic shows (the module docstring), in the
    words of the framework that trains (`setup`)."""
    found = []
    if arithmetic.nchw_convolution_flops:
        share = arithmetic.nchw_convolution_share
        found.append((f"Convolutions do {share:.0%} of the FLOPs on NCHW images: channels_last is the layout the "
                      f"fastest convolution kernels take.",
                      "model = model.to(memory_format=torch.channels_last)\n"
                      "images = images.to(memory_format=torch.channels_last)"))
    products, single = arithmetic.flops_per_step, arithmetic.flops_in("fp32", "tf32")
    if single and arithmetic.bf16_native:
        switch, code = words.mixed_precision(setup, device_type)
        found.append((f"Matrix products and convolutions in fp32 do {single / arithmetic.flops_per_step:.0%} of the "
                      f"FLOPs, on a device that computes bf16 natively: bf16 mixed precision ({switch}).", code))
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


def fix(device_type: str, arithmetic: StepArithmetic | None = None,
        busy: float | None = None, setup: Setup = PLAIN) -> tuple[str, str]:
    """The advice (module docstring): the changes the counted arithmetic backs, then a faster device. `busy`: a
    GPU's busy share when it is under DEVICE_BUSY_ENOUGH (then the fix says so first); `setup`: the framework
    whose words the changes are in."""
    faster = "a faster GPU" if device_type == "cuda" else "a GPU"
    opening = "No waste reaches the level at which a fix is recommended: the step is the model's own work"
    if busy is not None:
        opening = (f"The GPU computed {busy:.0%} of the step, and no cause the doctor checks accounts for the rest "
                   f"above the level at which a fix is recommended (the findings below are what it saw)")
    if arithmetic is None:
        return (f"{opening}. The next gain is in the model or the kernels, or {faster}. What the step computes was "
                f"not counted (see the notes), so no change to it is named.", "")
    found = levers(arithmetic, device_type, setup)
    words = " ".join(text for text, _ in found)
    fix = f"{opening}. {words} Beyond that, {faster}." if found else \
        f"{opening}: the next gain is in the model or the kernels, or {faster}."
    return fix, "\n".join(code for _, code in found if code)
