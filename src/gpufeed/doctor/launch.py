"""launch_overhead: the host cannot keep up with the work it hands out, one small operator at a time.

It reads the profiled window (context["profile"], made by profile.py after the watched steps):
- On CUDA: the device is busy (the union of the profiled kernels per step, over the watched step time:
  `Watch.device_busy`) less than LOW_DEVICE_BUSY, input waits and syncs do not explain the idle time, most
  kernels are shorter than a launch (SHORT_KERNEL_FRACTION), and the idle time per launched kernel is
  launch-sized (at most LAUNCH_DELAY_US). The share is the idle share that waits, copies and syncs leave.
- On the CPU (the device is the host): the step dispatches many operators (MANY_OPERATORS) and a large share of
  the profiled step is spent outside them, in the Python between operators (PYTHON_SHARE_*). That share is the
  finding's share.
Without kernels in the profile on CUDA (profile_steps=0, or the profiler cannot trace CUDA), the rule falls back
on the CUDA-event busy share, which counts the gaps between kernels as busy, so it seldom fires; the report says
so in `unmeasured`. On the CPU without a profile it is not checked.
"""

from __future__ import annotations

import statistics

from gpufeed.doctor import fixes
from gpufeed.doctor.evidence import (
    LOW_DEVICE_BUSY,
    Watch,
    confidence,
    finding,
    host_bound_gate,
    severity,
    unexplained_idle,
)
from gpufeed.doctor.report import Finding

# TensorFlow profiler (the file cited for INPUT_SHARE_* in evidence.py): kernel launch share, moderate >= 3%,
# high >= 15%.
LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH = 0.03, 0.15
# Holistic Trace Analysis, get_cuda_kernel_launch_stats(launch_delay_cutoff=100): a kernel that waits more than
# 100 us after its launch is an outlier. Idle time per launched kernel below that is the launch rhythm itself.
LAUNCH_DELAY_US = 100.0
# HTA, "short GPU kernels" (shorter than their 5-20 us launch; profile.SHORT_KERNEL_US): when at least half the
# kernels are short, launches cannot hide behind the work.
SHORT_KERNEL_FRACTION = 0.50
# gpufeed's choice (CPU): fusing or compiling pays when a step dispatches hundreds of operators; with fewer (a
# two-layer model) the per-operator cost is a small sum and the batch size is the lever (small_batch).
MANY_OPERATORS = 200
# gpufeed's choice (CPU): loops whose operators do real work keep a tenth or so of the profiled step outside
# operators (tests/doctor/scripts on a loaded 2-core VM: compute_bound.py 7-16%, oversubscribed.py 8-9%); 100
# Linear(8, 8) layers on batches of 4 keep 42-45%. Flag from 20%, high from 40%.
PYTHON_SHARE_MEDIUM, PYTHON_SHARE_HIGH = 0.20, 0.40
UNPROFILED = "operators and kernel launches"  # the subject of the watcher's own unmeasured lines


def _agreement(supporting: int, profiled: int) -> str:
    """Confidence from the profiled steps that show the symptom: all of at least 3 high, half medium."""
    if profiled >= 3 and supporting == profiled:
        return "high"
    return "medium" if 2 * supporting >= profiled and profiled >= 2 else "low"


def _on_cuda(watch: Watch, profile: dict) -> Finding | None:
    busy = host_bound_gate(watch)
    if busy is None:
        return None
    share = unexplained_idle(watch, busy)
    step_s = watch.totals.wall_s / watch.totals.steps
    kernels, short = profile["kernels_per_step"], profile["short_kernel_fraction"]
    idle_us = 1e6 * share * step_s / kernels if kernels else None
    if share < LAUNCH_SHARE_MEDIUM or idle_us is None or idle_us > LAUNCH_DELAY_US or short < SHORT_KERNEL_FRACTION:
        return None
    evidence = {"device_busy": busy, "event_span_busy": watch.totals.device_busy, "idle_share": share,
                "kernel_launches_per_step": kernels, "short_kernel_fraction": short,
                "mean_kernel_us": profile["mean_kernel_us"], "idle_us_per_launch": idle_us,
                "operators_per_step": profile["operators_per_step"], "mean_step_ms": 1000.0 * step_s,
                "profiled_steps": profile["steps"]}
    per_step = profile.get("per_step") or []
    supporting = sum(1 for s in per_step if (s["kernel_busy_s"] or 0.0) < LOW_DEVICE_BUSY * step_s)
    return finding("launch_overhead", severity(share, LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH), share, evidence,
                   fixes.launch_overhead("cuda"), _agreement(supporting, len(per_step)))


def _on_cpu(watch: Watch, profile: dict) -> Finding | None:
    # rounded as Totals.share rounds: 0.2 of a step summed over steps must compare as 0.2 with the threshold
    operators, python = profile["operators_per_step"], round(profile["outside_operators_share"], 12)
    if operators < MANY_OPERATORS or python < PYTHON_SHARE_MEDIUM:
        return None
    totals = watch.totals
    model_step_s = (totals.wall_s - totals.data_wait_s) / totals.steps
    evidence = {"operators_per_step": operators, "outside_operators_share": python,
                "host_us_per_operator": 1e6 * model_step_s / operators, "mean_step_ms": 1000.0 * model_step_s,
                "profiled_step_ms": profile["step_ms"], "profiled_steps": profile["steps"]}
    per_step = profile.get("per_step") or []
    supporting = sum(1 for s in per_step if s["operators"] >= MANY_OPERATORS
                     and s["outside_operators_s"] >= PYTHON_SHARE_MEDIUM * s["wall_s"])
    return finding("launch_overhead", severity(python, PYTHON_SHARE_MEDIUM, PYTHON_SHARE_HIGH), python, evidence,
                   fixes.launch_overhead("cpu", watch.batch_size), _agreement(supporting, len(per_step)))


def _event_span_only(watch: Watch) -> Finding | None:
    """CUDA without profiled kernels: the idle share of the CUDA-event span, which hides gaps between kernels."""
    busy = host_bound_gate(watch)
    if busy is None:
        return None
    share = unexplained_idle(watch, busy)
    launches = [r.kernel_launches for r in watch.records if r.kernel_launches is not None]
    per_step = statistics.fmean(launches) if launches else None
    idle_s = share * watch.totals.wall_s / watch.totals.steps
    evidence = {"device_busy": busy, "idle_share": share, "kernel_launches_per_step": per_step,
                "idle_us_per_launch": 1e6 * idle_s / per_step if per_step else None,
                "mean_step_ms": 1000.0 * watch.totals.wall_s / watch.totals.steps}
    supporting = watch.count(lambda r: r.compute_s is not None and r.compute_s < LOW_DEVICE_BUSY * r.wall_s)
    return finding("launch_overhead", severity(share, LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH), share, evidence,
                   fixes.launch_overhead("cuda"), confidence(supporting))


def launch_overhead(watch: Watch) -> Finding | None:
    profile = watch.get("profile")
    if not watch.on_gpu:
        if profile is None:
            watch.note(f"{UNPROFILED}: not profiled, so launch overhead on the CPU is unchecked")
            return None
        return _on_cpu(watch, profile)
    if profile is None or profile.get("kernels_per_step") is None:
        watch.note(f"{UNPROFILED}: kernels not profiled, so launch overhead rests on the CUDA-event span, which "
                   f"counts gaps between kernels as busy")
        return _event_span_only(watch)
    return _on_cuda(watch, profile)
