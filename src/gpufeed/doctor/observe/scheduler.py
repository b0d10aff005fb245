"""The training thread's wait for a core: how long it was ready to run while the kernel's scheduler ran another
thread on its core (another process on a busy machine, or the script's own loader workers and torch threads).

`run_delay_s()` reads the calling thread's line of /proc/thread-self/schedstat, the kernel's per-task scheduler
statistics (Documentation/scheduler/sched-stats.rst: time on the CPU, time waiting on a runqueue, timeslices, in
nanoseconds), and returns its second field in seconds; None where it cannot be read (not Linux, a kernel without
CONFIG_SCHED_INFO). The step clock (watch.py) reads it at each boundary, so each StepRecord carries the seconds its
step waited for a core (`run_delay_s`), and periodic_stall judges each step's time less that wait: the scheduler's
slices on a busy host come at a beat of their own, and are not the script's. One read costs about 10 us.
`process_run_delay_s()` sums the same field over every thread of the process (/proc/self/task/*/schedstat): the
batch probe (probe.py) reads it around each run, since torch's intra-op threads wait for cores too, and each
operator waits for its slowest thread.
"""

from __future__ import annotations

import os

SCHEDSTAT = "/proc/thread-self/schedstat"
TASKS = "/proc/self/task"
NANOSECONDS = 1e-9


def run_delay_s() -> float | None:
    """Seconds the calling thread has waited on a runqueue since it began, or None when not readable."""
    try:
        with open(SCHEDSTAT, encoding="ascii") as stats:
            fields = stats.read().split()
        return int(fields[1]) * NANOSECONDS
    except (OSError, IndexError, ValueError):
        return None


def process_run_delay_s() -> float | None:
    """Seconds every thread of this process has waited on a runqueue, summed (threads that end while it reads are
    left out), or None when not readable."""
    try:
        threads = os.listdir(TASKS)
    except OSError:
        return None
    total, read = 0, False
    for thread in threads:
        try:
            with open(f"{TASKS}/{thread}/schedstat", encoding="ascii") as stats:
                total += int(stats.read().split()[1])
            read = True
        except (OSError, IndexError, ValueError):
            continue
    return total * NANOSECONDS if read else None
