"""The timers and the background sampler, on the CPU."""

import time

import torch

from gpufeed.measure.sampler import Sampler
from gpufeed.measure.timers import DeviceBusyTimer, Stopwatch


def test_stopwatch_accumulates_a_known_sleep():
    watch = Stopwatch()
    for _ in range(3):
        with watch:
            time.sleep(0.02)
    total = watch.take()
    assert 0.06 <= total < 0.5 and watch.take() == 0.0


def test_device_timer_is_none_off_cuda():
    timer = DeviceBusyTimer(torch.device("cpu"))
    timer.start()
    timer.stop()
    assert timer.collect() is None


def test_sampler_reads_the_cpu_and_no_gpu_here():
    sampler = Sampler(torch.device("cpu"), interval_s=0.02)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        sum(range(10000))  # keep a core busy so the reading is not trivially zero
        if len(sampler._cpu) >= 3:
            break
    sample = sampler.take()
    sampler.close()
    assert sample.gpu_utilization_percent is None
    assert sample.cpu_percent is not None and 0.0 <= sample.cpu_percent <= 100.0
