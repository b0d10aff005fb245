"""Operators and kernels per step, from `torch.profiler` over a short window after the watched steps.

The watched steps carry no profiler overhead: the `Watcher` starts a `StepProfiler` at the boundary that closes
its last watched step and marks every later boundary with `prof.step()`. The schedule is one profiler warm-up
step, whose results are discarded (the PyTorch profiler recipe and kineto issue #328: the first profiled step
carries the profiler's start-up cost), then `steps` recorded steps. Activities: the CPU, plus CUDA when the
script uses CUDA and this build can trace it. No shapes, stacks or memory are recorded.

What `analyse` takes from the trace, per recorded step (the interval of its "ProfilerStep#N" mark):
- operators: top-level `aten::` operators dispatched by the host (one not inside another on the same thread),
  on the thread that marks the steps and the autograd engine's threads (a pin-memory thread is left out).
- outside_operators_s: the step's host time outside operators, autograd engine functions and DataLoader
  `__next__` ("Python between ops"); loader_s: the time inside DataLoader `__next__`.
- kernels, short_kernels, kernel_s, kernel_busy_s (CUDA only, else None): the CUDA kernels the step launched
  (attributed through the launching operator's correlation id to the step its operator started in, or by their
  own start when not linked), those shorter than SHORT_KERNEL_US, their summed duration, and the union of their
  intervals: the device's true busy time, where a CUDA-event span also counts the gaps between kernels.

Limits: the profiler slows each operator by a few microseconds (each nested event is recorded), so profiled
steps are slower than watched ones (about 1.8x for 100 Linear(8, 8) layers on a 2-core CPU); counts are exact,
times are the profiled loop's, and kernel durations carry none of the host's overhead (the findings divide them by
the watched step time). The doctor's own per-module hooks (the forward step clock) count as time outside operators.
When the script's own torch.profiler is recording, ours does not start (a reason in the notes); one the script
starts while ours runs (or that is in its schedule's wait phase when ours starts) conflicts with ours. kineto in
torch 2.13 prints "USDT ... profiler_start/stop" lines on standard error: `measure/quiet.py` holds file descriptor
2 in a temporary file while the profiler is called and writes back every other line.
"""

from __future__ import annotations

import inspect
import warnings
from typing import NamedTuple

import torch

from gpufeed.doctor.notes import Note
from gpufeed.doctor.observation import ProfiledStep, ProfileSummary
from gpufeed.measure.quiet import without_kineto_noise

# Holistic Trace Analysis, "CUDA kernel launch statistics": a launch costs the CPU 5-20 us; a kernel shorter than
# that cannot hide the next launch, so a run of them leaves the device waiting on the host. We take the upper end.
SHORT_KERNEL_US = 20.0
PROFILE_STEPS = 5  # recorded steps after the watched ones (gpufeed's choice: enough to average, short to run)
PARSE_TIMEOUT_S = 30.0  # post-processing limit where this torch has one: a huge trace must not hang the report
_OPERATOR_PREFIXES = ("aten::", "autograd::engine::evaluate_function")
_LOADER_PREFIX = "enumerate(DataLoader)"
_STEP_PREFIX = "ProfilerStep#"
_LAUNCHER_KINDS = (None, "cpu_op", "user_annotation")  # kineto's names; None: a trace without activity types


def union_length(intervals: list[tuple[float, float]]) -> float:
    """The length covered by a set of (start, end) intervals: overlaps counted once."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + (current_end - current_start if current_end is not None else 0.0)


class TraceEvent(NamedTuple):
    """One event of the trace, in microseconds since an arbitrary origin."""

    name: str
    thread: int
    start_us: float
    end_us: float
    on_device: bool  # a CUDA event (kernel, copy, annotation on the device timeline), else the host's
    kind: str | None  # kineto's activity type: "cpu_op", "user_annotation", "kernel", "gpu_memcpy", ...
    id: int  # correlation id
    linked_id: int  # for a device event, the id of the host event that launched it (0: none)


def trace_events(profiler) -> list[TraceEvent]:
    """The events of a stopped torch.profiler.profile: kineto's raw events (fast: no event tree is built), else
    the FunctionEvents of `profiler.events()`."""
    raw = getattr(getattr(profiler, "profiler", None), "kineto_results", None)
    if raw is not None:
        return [TraceEvent(e.name(), e.start_thread_id(), e.start_ns() / 1000.0, e.end_ns() / 1000.0,
                           _is_cuda(e.device_type()), e.activity_type(), e.correlation_id(), e.linked_correlation_id())
                for e in raw.events()]
    return [TraceEvent(getattr(e, "trace_name", None) or e.name, e.thread, e.time_range.start, e.time_range.end,
                       _is_cuda(e.device_type), getattr(e, "activity_type", None), e.id,
                       getattr(e, "linked_correlation_id", 0)) for e in profiler.events()]


def _is_cuda(device_type) -> bool:
    return getattr(device_type, "name", str(device_type)) == "CUDA"


def _is_kernel(event: TraceEvent) -> bool:
    if event.kind is not None:
        return event.kind == "kernel"
    return not event.name.startswith(("Memcpy", "Memset", _STEP_PREFIX, "Context Sync"))


def _top_level_count(events: list[TraceEvent]) -> int:
    """aten operators not inside another on the same thread (`events` sorted by start, longest first)."""
    count, ends = 0, {}
    for event in events:
        if event.name.startswith("aten::") and event.start_us >= ends.get(event.thread, float("-inf")):
            count += 1
            ends[event.thread] = event.end_us
    return count


def _kernels_by_step(kernels: list[TraceEvent], launchers: dict, marks: list[TraceEvent]) -> list[list]:
    """Each kernel in the step whose interval holds the start of the host event that launched it, else its own
    start."""
    by_step: list[list] = [[] for _ in marks]
    for kernel in kernels:
        owner = launchers.get(kernel.linked_id)
        moment = owner.start_us if owner is not None else kernel.start_us
        for position, mark in enumerate(marks):
            if mark.start_us <= moment < mark.end_us:
                by_step[position].append(kernel)
                break
    return by_step


def _step_number(event: TraceEvent) -> int:
    try:
        return int(event.name[len(_STEP_PREFIX):])
    except ValueError:
        return -1


def analyse(events: list[TraceEvent], recorded: int, cuda: bool) -> list[ProfiledStep]:
    """Per-step counts and times (see the module docstring) for the first `recorded` "ProfilerStep#N" marks
    (N = 1, 2, ...: mark 0 is the profiler's warm-up)."""
    host = [e for e in events if not e.on_device]
    marks = sorted((e for e in host if e.name.startswith(_STEP_PREFIX) and 1 <= _step_number(e) <= recorded),
                   key=_step_number)
    if not marks:
        return []
    threads = {marks[0].thread} | {e.thread for e in host if e.name.startswith(_OPERATOR_PREFIXES[1])}
    work = sorted((e for e in host if e.thread in threads and e.name.startswith(_OPERATOR_PREFIXES)),
                  key=lambda e: (e.start_us, -e.end_us))
    loader = [e for e in host if e.thread in threads and e.name.startswith(_LOADER_PREFIX)]
    kernels = [e for e in events if e.on_device and _is_kernel(e)] if cuda else []
    # operators and annotations: a kernel's linked id is one of theirs. Runtime calls are left out even when not
    # linked (a synchronize outside any operator): their ids are CUPTI's, a separate count that can repeat an op's.
    launchers = {e.id: e for e in host if e.linked_id == 0 and e.kind in _LAUNCHER_KINDS}
    launched = _kernels_by_step(kernels, launchers, marks)
    steps = []
    for position, mark in enumerate(marks):
        begin, end = mark.start_us, mark.end_us
        inside = [e for e in work if begin <= e.start_us < end]
        loading = [(max(begin, e.start_us), min(end, e.end_us)) for e in loader
                   if e.start_us < end and e.end_us > begin]
        covered = union_length([(e.start_us, min(end, e.end_us)) for e in inside] + loading)
        durations = [e.end_us - e.start_us for e in launched[position]]
        steps.append(ProfiledStep(
            index=position, wall_s=(end - begin) / 1e6, operators=_top_level_count(inside),
            outside_operators_s=max(0.0, end - begin - covered) / 1e6, loader_s=union_length(loading) / 1e6,
            kernels=len(durations) if cuda else None,
            short_kernels=sum(1 for d in durations if d < SHORT_KERNEL_US) if cuda else None,
            kernel_s=sum(durations) / 1e6 if cuda else None,
            kernel_busy_s=union_length([(e.start_us, e.end_us) for e in launched[position]]) / 1e6 if cuda else None))
    return steps


def can_trace_cuda() -> bool:
    from torch.profiler import ProfilerActivity, supported_activities

    return ProfilerActivity.CUDA in supported_activities()


class StepProfiler:
    """torch.profiler over 1 warm-up step and `steps` recorded ones. `start()` at a step boundary, `step()` at
    each later one (True once the last recorded step has ended), `finish(reason)` for the summary; each of them
    turns an exception of the profiler into `failure` and stops profiling instead of raising into the script."""

    def __init__(self, steps: int = PROFILE_STEPS, cuda: bool = False):
        self.steps, self.cuda = steps, cuda
        self.failure: str | None = None
        self._marks = 0  # step() calls since start()
        self._profiler = None

    def start(self) -> bool:
        from torch.profiler import ProfilerActivity, profile, schedule

        if torch._C._autograd._profiler_enabled():  # the script's own profiler: starting ours would end its trace
            self.failure = "not profiled: another torch.profiler (the script's own) was running"
            return False
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        options = {}
        if "post_processing_timeout_s" in inspect.signature(profile.__init__).parameters:
            options["post_processing_timeout_s"] = PARSE_TIMEOUT_S
        try:
            self._profiler = profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=self.steps,
                                                                              repeat=1), **options)
            with without_kineto_noise():
                self._profiler.start()
        except Exception as error:  # another profiler running, a build without kineto: say so, go on
            self._fail(error)
        return self._profiler is not None

    def step(self) -> bool:
        if self._profiler is None:
            return True
        self._marks += 1
        if self._marks > self.steps:  # the last recorded step ended: the trace is collected in finish()
            return True
        try:
            with without_kineto_noise():
                self._profiler.step()
        except Exception as error:
            self._fail(error)
            return True
        return False

    def finish(self, reason: str | None = None) -> ProfileSummary:
        """Stop and analyse. `reason` says why the window ends early (the script ended, say)."""
        recorded = max(0, min(self._marks - 1, self.steps))
        steps: list[ProfiledStep] = []
        if self._profiler is not None:
            try:
                with warnings.catch_warnings(), without_kineto_noise():  # "Incorrect schedule" if stopped early
                    warnings.simplefilter("ignore")
                    self._profiler.__exit__(None, None, None)
                steps = analyse(trace_events(self._profiler), recorded, self.cuda) if recorded else []
            except Exception as error:
                self._fail(error)
            self._profiler = None
        if self.failure is not None:
            reason = self.failure
        elif len(steps) < self.steps:
            reason = f"{len(steps)} of {self.steps} steps profiled ({reason or 'the trace has fewer step marks'})"
        else:
            reason = None
        return ProfileSummary(tuple(steps), self.steps, self.cuda, reason)

    def _fail(self, error: Exception) -> None:
        self.failure = f"torch.profiler failed ({type(error).__name__}: {str(error).strip()[:160]})"
        if self._profiler is not None:
            try:
                with warnings.catch_warnings(), without_kineto_noise():
                    warnings.simplefilter("ignore")
                    self._profiler.__exit__(None, None, None)
            except Exception:  # already broken: nothing more to undo
                pass
        self._profiler = None


def cuda_traced(device: str | None) -> bool:
    """Trace kernels: the script uses CUDA and the profiler here can trace it."""
    return device == "cuda" and torch.cuda.is_available() and can_trace_cuda()


def profile_notes(requested: int, running: bool, summary: ProfileSummary | None, watched: bool,
                  cuda: bool) -> list[Note]:
    """Why operators or kernels were not counted: `requested` steps to profile, the window still `running`, its
    `summary` once ended, whether any step was `watched`, the device CUDA."""
    subject = "operators and kernel launches"
    if requested == 0:
        lines = [f"{subject}: not profiled (profile_steps=0)"]
    elif running:
        lines = [f"{subject}: the profiled steps had not ended when the report was made"]
    elif summary is None:
        lines = [f"{subject}: not profiled, the watched steps did not complete"] if watched else []
    else:
        lines = [f"{subject}: {summary.reason}"] if summary.reason else []
        if not summary.cuda:
            lines.append("kernel launches: the device is the CPU (its operators are counted)" if not cuda
                         else "kernel launches: this torch's profiler cannot trace CUDA")
    return [Note("unmeasured", line) for line in lines]
