"""launch_overhead: the host cannot keep up with the work it hands out, one small operator at a time.

It reads the profiled window (`Observation.profile`, made by observe/profile.py after the watched steps) and, for the
first way, the step's arithmetic (`Observation.arithmetic`: FLOPs counted by FlopCounterMode in the last warm-up
step, observe/flops.py):
- On any device, an overhead-bound step: it does almost no arithmetic for its time, and its time per operator is
  dispatch-sized. The step's FLOPs over the watched step time less its input (the data wait, or the loop's own
  input work: StepRecord.input_s), the achieved FLOP/s, are under ARITHMETIC_FRACTION_OF_PEAK of the device's
  dense peak in the precision of most FLOPs (hardware/peak.py), and
  that time over the profiled operators per step is at most OVERHEAD_US_PER_OPERATOR; on CUDA the device is also
  busy less than DEVICE_BUSY_ENOUGH (a busy device is not waiting on the host). The share is the step time less
  input, copies, syncs and the FLOPs' time at the peak rate: an upper bound of the overhead, since small
  operators never reach the peak. A 5-parameter Linear at batch 32 (tests/doctor/scripts/tiny_linear.py) is
  this case: 640 FLOPs in a quarter of a millisecond. Without the count or the peak it is not checked (notes).
- On CUDA: the device is busy (the union of the profiled kernels per step, over the watched step time:
  `Observation.device_busy`) less than LOW_DEVICE_BUSY, input waits and syncs do not explain the idle time, most
  kernels are shorter than a launch (SHORT_KERNEL_FRACTION), and the idle time per launched kernel is
  launch-sized (at most LAUNCH_DELAY_US). The share is the idle share that waits, copies and syncs leave.
- On the CPU (the device is the host): the step dispatches many operators (MANY_OPERATORS) and a large share of
  the profiled step is spent outside them, in the Python between operators (PYTHON_SHARE_*). That share is the
  finding's share.
Without kernels in the profile on CUDA (profile_steps=0, or the profiler cannot trace CUDA), the rule falls back
on the CUDA-event busy share, which counts the gaps between kernels as busy, so it seldom fires; the report says
so in a note. On the CPU without a profile it is not checked. When several ways fire, the finding is the one
with the largest share, with the others' evidence beside its own. No --try experiment.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import (
    LOW_DEVICE_BUSY,
    confidence,
    host_bound_gate,
    new_finding,
    severity,
    unexplained_idle,
)
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation, ProfileWindow, StepArithmetic

# TensorFlow profiler (the file cited for INPUT_SHARE_* in grading.py): kernel launch share, moderate >= 3%,
# high >= 15%.
LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH = 0.03, 0.15
# Holistic Trace Analysis, get_cuda_kernel_launch_stats(launch_delay_cutoff=100): a kernel that waits more than
# 100 us after its launch is an outlier. Idle time per launched kernel below that is the launch rhythm itself.
LAUNCH_DELAY_US = 100.0
# HTA, "short GPU kernels" (shorter than their 5-20 us launch; profile.SHORT_KERNEL_US): when at least half the
# kernels are short, launches cannot hide behind the work.
SHORT_KERNEL_FRACTION = 0.50
# gpufeed's choice (CPU): fusing or compiling pays when a step dispatches hundreds of operators; with fewer (a
# two-layer model) the per-operator cost is a small sum and the batch size is the lever (overhead_fix says so).
MANY_OPERATORS = 200
# gpufeed's choice (CPU): loops whose operators do real work keep a tenth or so of the profiled step outside
# operators (tests/doctor/scripts on a loaded 2-core VM: compute_bound.py 7-16%, oversubscribed.py 8-9%); 100
# Linear(8, 8) layers on batches of 4 keep 42-45%. Flag from 20%, high from 40%.
PYTHON_SHARE_MEDIUM, PYTHON_SHARE_HIGH = 0.20, 0.40
# gpufeed's choice: a step whose FLOPs run at under a thousandth of the device's dense peak spends over 99.9% of
# its time on something else. Measured with the doctor on a 2-core VM (Sapphire Rapids, fp32 peak 0.27 TFLOP/s):
# the tiny models tiny_linear.py 1e-5, small_batch.py 9e-5, many_tiny_ops.py 1.3e-4, no_loader_no_optimizer.py
# 2.6e-4; the models doing arithmetic float64.py 1.1e-2 (against the fp64 peak), real_cifar.py 1.4e-2,
# compute_bound.py and oversubscribed.py 0.26: the threshold sits about a decade from either side.
ARITHMETIC_FRACTION_OF_PEAK = 1e-3
# The step's time per dispatched operator, at most HTA's launch rhythm (LAUNCH_DELAY_US, 100 us: a few times the
# 5-20 us a launch costs), is spent dispatching. It also keeps out steps whose operators are long for want of
# FLOPs the counter sees (memory-bound or elementwise work, sleeps): on the VM above the tiny models spend 3-15 us
# per operator (up to 10x that when other processes load both cores), real_accumulate.py 320 us (1.1e-3 of the
# peak), periodic_stall.py 700 us.
OVERHEAD_US_PER_OPERATOR = LAUNCH_DELAY_US
UNPROFILED = "operators and kernel launches"  # the subject of the watcher's own notes on the profile


def _agreement(supporting: int, profiled: int) -> str:
    """Confidence from the profiled steps that show the symptom: all of at least 3 high, half medium."""
    if profiled >= 3 and supporting == profiled:
        return "high"
    return "medium" if 2 * supporting >= profiled and profiled >= 2 else "low"


def _on_cuda(seen: Observation, profile: ProfileWindow) -> Finding | None:
    busy = host_bound_gate(seen)
    if busy is None:
        return None
    share = unexplained_idle(seen, busy)
    step_s = seen.totals.wall_s / seen.totals.steps
    kernels, short = profile.kernels_per_step, profile.short_kernel_fraction
    idle_us = 1e6 * share * step_s / kernels if kernels else None
    if share < LAUNCH_SHARE_MEDIUM or idle_us is None or idle_us > LAUNCH_DELAY_US or short < SHORT_KERNEL_FRACTION:
        return None
    evidence = {"device_busy": busy, "event_span_busy": seen.totals.device_busy, "idle_share": share,
                "kernel_launches_per_step": kernels, "short_kernel_fraction": short,
                "mean_kernel_us": profile.mean_kernel_us, "idle_us_per_launch": idle_us,
                "operators_per_step": profile.operators_per_step, "mean_step_ms": 1000.0 * step_s,
                "profiled_steps": len(profile.steps)}
    supporting = sum(1 for s in profile.steps if (s.kernel_busy_s or 0.0) < LOW_DEVICE_BUSY * step_s)
    return new_finding(LaunchOverhead.NAME, severity(share, LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH), share, evidence,
                       fix("cuda"), _agreement(supporting, len(profile.steps)))


def _on_cpu(seen: Observation, profile: ProfileWindow) -> Finding | None:
    # rounded as Totals.share rounds: 0.2 of a step summed over steps must compare as 0.2 with the threshold
    operators, python = profile.operators_per_step, round(profile.outside_operators_share, 12)
    if operators < MANY_OPERATORS or python < PYTHON_SHARE_MEDIUM:
        return None
    totals = seen.totals
    model_step_s = (totals.wall_s - totals.input_s) / totals.steps
    evidence = {"operators_per_step": operators, "outside_operators_share": python,
                "host_us_per_operator": 1e6 * model_step_s / operators, "mean_step_ms": 1000.0 * model_step_s,
                "profiled_step_ms": profile.step_ms, "profiled_steps": len(profile.steps)}
    supporting = sum(1 for s in profile.steps if s.operators >= MANY_OPERATORS
                     and s.outside_operators_s >= PYTHON_SHARE_MEDIUM * s.wall_s)
    return new_finding(LaunchOverhead.NAME, severity(python, PYTHON_SHARE_MEDIUM, PYTHON_SHARE_HIGH), python, evidence,
                       fix("cpu", seen.batch_size), _agreement(supporting, len(profile.steps)))


def _event_span_only(seen: Observation) -> Finding | None:
    """CUDA without profiled kernels: the idle share of the CUDA-event span, which hides gaps between kernels."""
    busy = host_bound_gate(seen)
    if busy is None:
        return None
    share = unexplained_idle(seen, busy)
    # the kernels are not counted without the profile: the CUDA way's per-launch figures are NA here
    evidence = {"device_busy": busy, "idle_share": share, "kernel_launches_per_step": None,
                "idle_us_per_launch": None, "mean_step_ms": 1000.0 * seen.totals.wall_s / seen.totals.steps}
    supporting = seen.count(lambda r: r.compute_s is not None and r.compute_s < LOW_DEVICE_BUSY * r.wall_s)
    return new_finding(LaunchOverhead.NAME, severity(share, LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH), share, evidence,
                       fix("cuda"), confidence(supporting))


def _overhead_bound(seen: Observation, arithmetic: StepArithmetic, operators: float) -> Finding | None:
    """The step's FLOPs run at under ARITHMETIC_FRACTION_OF_PEAK of the peak, at most OVERHEAD_US_PER_OPERATOR
    per operator (the module docstring)."""
    totals, peak, flops = seen.totals, arithmetic.peak_flops_per_s, arithmetic.flops_per_step
    model_step_s = (totals.wall_s - totals.input_s) / totals.steps
    if peak is None or not operators or model_step_s <= 0:
        return None

    def overhead_bound(step_s: float) -> bool:
        return flops / step_s < ARITHMETIC_FRACTION_OF_PEAK * peak and 1e6 * step_s / operators <= \
            OVERHEAD_US_PER_OPERATOR
    if not overhead_bound(model_step_s):
        return None
    busy = seen.device_busy()
    if seen.on_gpu and (busy is None or busy >= DEVICE_BUSY_ENOUGH):  # a busy device is not waiting on the host
        return None
    arithmetic_s = flops / peak  # per step, at the peak rate: the least time these FLOPs take
    share = max(0.0, 1.0 - totals.share(totals.input_s + totals.copy_s + totals.sync_s)
                - arithmetic_s * totals.steps / totals.wall_s)
    evidence = {"flops_per_step": flops, "operators_per_step": operators,
                "us_per_operator": 1e6 * model_step_s / operators, "achieved_flops_per_s": flops / model_step_s,
                "peak_flops_per_s": peak, "fraction_of_peak": flops / model_step_s / peak,
                "precision": arithmetic.precision, "arithmetic_us_at_peak": 1e6 * arithmetic_s,
                "mean_step_ms": 1000.0 * model_step_s}
    if seen.on_gpu:
        evidence["device_busy"] = busy
    supporting = seen.count(lambda r: r.wall_s > r.input_s and overhead_bound(r.wall_s - r.input_s))
    batch, _ = seen.model_batch()
    remedy = overhead_fix(seen.device_type, batch, operators, evidence, seen.shape.batches_per_step is not None)
    return new_finding(LaunchOverhead.NAME, severity(share, LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH), share, evidence,
                       remedy, confidence(supporting))


def _by_the_profile(seen: Observation, notes: Notes) -> Finding | None:
    profile = seen.profile
    if not seen.on_gpu:
        if profile is None:
            notes.unmeasured(f"{UNPROFILED}: not profiled, so launch overhead on the CPU is unchecked")
            return None
        return _on_cpu(seen, profile)
    if profile is None or profile.kernels_per_step is None:
        notes.unmeasured(f"{UNPROFILED}: kernels not profiled, so launch overhead rests on the CUDA-event span, "
                         f"which counts gaps between kernels as busy")
        return _event_span_only(seen)
    return _on_cuda(seen, profile)


class LaunchOverhead(Kind):
    NAME = "launch_overhead"
    MEANING = "the step's time goes to launching many small operators, not to arithmetic"
    RECOMMEND_AT = LAUNCH_SHARE_MEDIUM
    RECOMMEND_SOURCE = "the TensorFlow profiler's \"moderate\" kernel-launch share is where a fix is recommended"
    # shares.py: on an equal share of the same idle time, a batch known to be small is the more specific cause (the
    # host-bound gate's evidence is the same; the lever, a larger batch, is named by both).
    YIELDS_TO = ("small_batch",)
    FIGURES = ("mean_step_ms",)  # the only figure all four ways measure (the module docstring)

    def claims(self, finding: Finding) -> str:
        """The part of the step it claims (shares.py): a GPU's idle time for the ways that read it (`idle_share`),
        else the model's part (the Python between operators, or the step's time beyond its arithmetic)."""
        return "idle" if "idle_share" in finding.evidence else "model"

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        """The largest-share finding of the ways that fire (the module docstring), with the others' evidence."""
        found = [_by_the_profile(seen, notes)]
        if seen.arithmetic is not None and seen.profile is not None:  # else observe/ noted why
            found.append(_overhead_bound(seen, seen.arithmetic, seen.profile.operators_per_step))
        found = sorted((f for f in found if f is not None), key=lambda f: -f.share)
        if not found:
            return None
        evidence = {key: value for other in reversed(found) for key, value in other.evidence.items()}
        return dataclasses.replace(found[0], evidence=evidence)


def fix(device_type: str, batch_size: int | None = None) -> tuple[str, str]:
    batch = f"batch_size={batch_size * 4}" if batch_size else "a batch 4x larger"
    if device_type == "cuda":
        fix = ("The device sits idle between kernels: the host (Python, operator dispatch, kernel launches) is "
               "slower than the device. Give each launch more work with a larger batch, fuse small operations, "
               "and let CUDA graphs replay the step with one launch: torch.compile(mode=\"reduce-overhead\").")
        snippet = ("model = torch.compile(model, mode=\"reduce-overhead\")  # CUDA graphs: the step replays as one "
                   "launch\n# and a larger batch: more work per kernel for the same number of launches")
        return fix, snippet
    fix = ("The step is many small operators and the Python between them: the host spends its time dispatching "
           "operators, not computing. Make the operators fewer and larger: a larger batch (the same operators, more "
           "work each), wider layers instead of many narrow ones, and torch.compile, which fuses operators and "
           "removes the Python between them.")
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, {batch}, ...)  # same operators, more work each\n"
               f"model = torch.compile(model)  # fused operators, no Python between them")
    return fix, snippet


def overhead_fix(device_type: str, batch_size: int | None, operators: float, evidence: dict,
                 loader: bool) -> tuple[str, str]:
    """The fix for an overhead-bound step, from its evidence: more work per operator (a larger batch), and fewer
    operators or launches where that is what the step has many of. `loader`: the batch comes from a DataLoader."""
    seen = (f"The step does {evidence['flops_per_step']:,} FLOPs in {evidence['mean_step_ms']:.2f} ms, "
            f"{evidence['fraction_of_peak']:.1e} of the device's {evidence['precision']} peak (at the peak they "
            f"would take {evidence['arithmetic_us_at_peak']:.2g} us): its time is the fixed cost of {operators:.0f} "
            f"operators, {evidence['us_per_operator']:.0f} us each, not arithmetic.")
    bigger = f"(try {batch_size * 4} and {batch_size * 16} for {batch_size})" if batch_size else "(try 4x and 16x)"
    fix = (f"{seen} More work per operator costs little more time: raise the batch {bigger}, the same operators "
           f"each with more samples, and scale the learning rate with it.")
    if device_type == "cuda":
        fix += " CUDA graphs replay the step's launches as one: torch.compile(mode=\"reduce-overhead\")."
    elif operators >= MANY_OPERATORS:
        fix += " With this many operators, torch.compile fuses them and removes the Python between them."
    else:
        fix += f" With {operators:.0f} operators there is little to fuse: the batch is the lever."
    larger = f"{batch_size * 16}" if batch_size else "16 * batch_size"
    was = f"  # was {batch_size}: the same operators, 16x the samples each" if batch_size else ""
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size={larger}, ...){was}" if loader
               else f"batch_size = {larger}{was}")
    if device_type == "cuda":
        snippet += "\nmodel = torch.compile(model, mode=\"reduce-overhead\")  # CUDA graphs: one launch per step"
    elif operators >= MANY_OPERATORS:
        snippet += "\nmodel = torch.compile(model)  # fused operators, no Python between them"
    return fix, snippet

