"""The training thread's wait for a core (doctor/observe/scheduler.py): while other processes keep every core
busy, a thread spinning in Python is either on a core (its CPU time, `time.thread_time`) or waiting for one (the
kernel's schedstat run delay), so the two add up to the wall time, less what a VM's host takes (steal): an
independent reference for the reading. The
step clock carries it into each step (`StepRecord.run_delay_s`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.scheduler import run_delay_s
from gpufeed.doctor.observe.watch import Watcher

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.skipif(run_delay_s() is None, reason="no /proc/thread-self/schedstat (Linux only)")


@pytest.mark.timing
def test_running_plus_waiting_is_the_wall_time_while_others_hold_the_cores() -> None:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.2)  # the spinners running
        steal = psutil.cpu_times().steal  # a VM's vCPUs taken by the host: in neither reading (all CPUs' sum)
        wall, cpu, delay = time.perf_counter(), time.thread_time(), run_delay_s()
        while time.perf_counter() - wall < 0.5:
            pass
        wall, cpu, delay = time.perf_counter() - wall, time.thread_time() - cpu, run_delay_s() - delay
        steal = psutil.cpu_times().steal - steal
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=10)
    # as many spinners as cores and this thread: it waits for a core about a third of the time or more
    assert delay > 0.1 * wall
    # running and waiting cover the wall time, but for what the host took from this thread's vCPU (at most the
    # steal of every CPU)
    slack = 0.03 + 0.05 * wall
    assert wall - steal - slack <= cpu + delay <= wall + slack, (wall, cpu, delay, steal)


def test_each_watched_step_carries_its_wait_for_a_core() -> None:
    watcher = Watcher(steps=5, warmup=1, profile_steps=0)
    outcome = run_script(str(SCRIPTS / "compute_bound.py"), [], False, watcher, timeout_s=30)
    assert outcome.problem is None and len(watcher.records) == 5
    assert all(record.run_delay_s is not None and 0.0 <= record.run_delay_s <= record.wall_s
               for record in watcher.records)
