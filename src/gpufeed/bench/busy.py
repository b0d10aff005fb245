"""Was the machine busy while the bench ran? Three readings over the bench's own window, taken from inside:

- other processes' CPU share: the CPU seconds every other visible process used between two readings (psutil, user +
  system, plus the children each one waited for, so a short-lived compiler still counts), over the window times
  the cores this process may use. Inside a container only the container's processes are visible; the load average
  is not used because in a container it is the host's;
- steal: the share of all CPU time the hypervisor gave to other guests (psutil.cpu_times().steal, /proc/stat);
- the timing spread: for each measurement the summary rests on (the training steps and the kernels its sentences
  name: summary.summarised_kernels), its slowest repeat over its fastest. Spreads under SPREAD_FLOOR_S in absolute
  terms are ignored: an interrupt costs microseconds, while another process taking the core costs a scheduler slice
  (milliseconds). The other kernels' spreads are reported in the table, not held against the figures.
Past any limit below, the figures are named unreliable. The limits are gpufeed's choices, stated in each reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from gpufeed.measure.timing import spread
from gpufeed.units import percent

OTHER_PROCESSES_LIMIT = 0.10  # other processes used over 10% of this process's usable cores
STEAL_LIMIT = 0.05  # the hypervisor took over 5% of CPU time for other guests
SPREAD_LIMIT = 3.0  # a measurement's slowest repeat took over 3x its fastest...
SPREAD_FLOOR_S = 0.001  # ...and over 1 ms longer


@dataclass(frozen=True)
class CpuReading:
    """One reading: the wall clock, system CPU time (all CPUs) and every other process's CPU seconds."""

    wall_s: float  # time.time(), comparable with psutil's create_time
    total_cpu_s: float | None  # all CPUs, all states; None where psutil cannot read it
    steal_s: float | None  # None where the kernel reports no steal (not Linux)
    others: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid -> (create_time, CPU seconds)


@dataclass(frozen=True)
class MachineBusy:
    busy: bool
    reasons: list[str]  # one sentence per limit passed, with the reading and the limit
    other_processes_cpu_share: float | None  # fraction of usable_cores, over the window
    steal_share: float | None  # fraction of all CPU time
    worst_spread: float | None  # the largest spread of any measurement (measure.timing.spread: slowest / fastest)
    worst_spread_measurement: str | None
    worst_spread_counted: float | None  # the largest among the summary's measurements' repeats over SPREAD_FLOOR_S
    # apart: the limit's figure
    worst_spread_counted_measurement: str | None
    window_s: float
    usable_cores: int


def _process_seconds(times) -> float:
    return times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)


def read_cpu() -> CpuReading:
    """A reading now; this process and its descendants are left out of `others`."""
    me = psutil.Process()
    try:
        mine = {me.pid} | {child.pid for child in me.children(recursive=True)}
    except psutil.Error:
        mine = {me.pid}
    others: dict[int, tuple[float, float]] = {}
    for process in psutil.process_iter(["pid", "create_time", "cpu_times"]):
        info = process.info
        if info["pid"] not in mine and info["cpu_times"] is not None and info["create_time"] is not None:
            others[info["pid"]] = (info["create_time"], _process_seconds(info["cpu_times"]))
    try:
        times = psutil.cpu_times()
    except (OSError, RuntimeError):
        return CpuReading(time.time(), None, None, others)
    states = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")  # guest is inside user
    total = sum(getattr(times, state, 0.0) for state in states)
    return CpuReading(time.time(), total, getattr(times, "steal", None), others)


def others_cpu_seconds(start: CpuReading, end: CpuReading) -> float:
    """CPU seconds other processes used between the readings: the growth of those seen in both, and all of those
    created in between (a reused pid is a new process). Processes that ended in between are counted through the
    parent that waited for them, when it is visible."""
    used = 0.0
    for pid, (created, seconds) in end.others.items():
        before = start.others.get(pid)
        if before is not None and abs(before[0] - created) < 0.01:
            used += max(seconds - before[1], 0.0)
        elif created >= start.wall_s - 1.0:
            used += seconds
    return used


def judge(start: CpuReading, end: CpuReading, usable_cores: int, timings: Iterable[tuple[str, float, float]],
          reported: Iterable[tuple[str, float, float]] = ()) -> MachineBusy:
    """The verdict for the window between `start` and `end`. `timings` are (measurement, fastest s, slowest s) of the
    measurements the summary rests on, whose spread can make the figures unreliable; `reported` are the others the
    tables show (a microsecond kernel's): their spread counts in `worst_spread`, never in the verdict."""
    window = max(end.wall_s - start.wall_s, 1e-9)
    share = others_cpu_seconds(start, end) / (window * max(usable_cores, 1))
    steal = None
    if None not in (start.total_cpu_s, end.total_cpu_s, start.steal_s, end.steal_s):
        elapsed = end.total_cpu_s - start.total_cpu_s
        steal = (end.steal_s - start.steal_s) / elapsed if elapsed > 0 else None
    worst, worst_what, counted, counted_what = None, None, None, None
    judged = [(what, fastest, slowest, True) for what, fastest, slowest in timings]
    for what, fastest, slowest, counts in judged + [(w, f, s, False) for w, f, s in reported]:
        ratio = spread(fastest, slowest)
        if ratio is not None and (worst is None or ratio > worst):
            worst, worst_what = ratio, what
        if counts and ratio is not None and slowest - fastest > SPREAD_FLOOR_S and (counted is None or ratio > counted):
            counted, counted_what = ratio, what
    reasons = []
    if share > OTHER_PROCESSES_LIMIT:
        reasons.append(f"other processes used {share:.0%} of the {usable_cores} usable cores during the bench "
                       f"(limit {OTHER_PROCESSES_LIMIT:.0%})")
    if steal is not None and steal > STEAL_LIMIT:
        reasons.append(f"the hypervisor gave {steal:.0%} of CPU time to other guests (steal; limit {STEAL_LIMIT:.0%})")
    if counted is not None and counted > SPREAD_LIMIT:
        reasons.append(f"the slowest repeat of {counted_what} took {counted:.1f}x its fastest (limit "
                       f"{SPREAD_LIMIT:g}x for repeats over {SPREAD_FLOOR_S * 1e3:g} ms apart)")
    return MachineBusy(busy=bool(reasons), reasons=reasons, other_processes_cpu_share=share, steal_share=steal,
                       worst_spread=worst, worst_spread_measurement=worst_what, worst_spread_counted=counted,
                       worst_spread_counted_measurement=counted_what, window_s=window,
                       usable_cores=usable_cores)


def usable_cores() -> int:
    """Cores this process may run on (its affinity; a container's cpuset restricts it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_sentence(verdict: MachineBusy) -> str:
    """'figures unreliable: ...' when busy, else the readings that say the machine was quiet."""
    if verdict.busy:
        return "figures unreliable: " + "; ".join(verdict.reasons) + "."
    steal = percent(verdict.steal_share)
    return (f"machine quiet during the bench ({verdict.window_s:.0f} s): other processes "
            f"{verdict.other_processes_cpu_share:.0%} of {verdict.usable_cores} cores, steal {steal}, "
            f"{spread_text(verdict)}.")


def spread_text(verdict: MachineBusy) -> str:
    """The worst spread of repeats, as the table shows it, and which measurement; spreads of measurements the summary
    does not use, or of repeats under SPREAD_FLOOR_S apart (a sub-millisecond kernel's interrupts), are shown but
    not held against the figures."""
    if verdict.worst_spread is None:
        return "no repeated measurement"
    text = f"worst spread of repeats {verdict.worst_spread:.1f}x ({verdict.worst_spread_measurement})"
    if verdict.worst_spread_counted != verdict.worst_spread:
        counted = ("none" if verdict.worst_spread_counted is None else
                   f"{verdict.worst_spread_counted:.1f}x, {verdict.worst_spread_counted_measurement}")
        text += (f"; of the summary's measurements with repeats over {SPREAD_FLOOR_S * 1e3:g} ms apart, the "
                 f"limit's concern, {counted}")
    return text
