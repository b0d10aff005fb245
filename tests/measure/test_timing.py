"""The timing harness: known sleeps, call counts, the min_seconds bound, and CUDA events where there is a GPU."""

import statistics
import time

import pytest
import torch

from gpufeed.measure.timing import CUDA_METHOD, WALL_CLOCK_METHOD, Timing, time_call


def test_a_known_sleep_times_as_itself():
    timing = time_call(lambda: time.sleep(0.01), torch.device("cpu"), warmup=1, repeats=5)
    assert 0.009 <= timing.median_s <= 0.05
    assert timing.min_s <= timing.median_s <= timing.max_s
    assert (timing.runs, timing.warmup, timing.method) == (5, 1, WALL_CLOCK_METHOD)


def test_warmup_and_timed_calls_are_all_made():
    calls = []
    timing = time_call(lambda: calls.append(1), "cpu", warmup=3, repeats=4)
    assert len(calls) == 7 and timing.runs == 4


def test_every_timed_call_is_kept_in_the_order_run():
    calls = []

    def slower_each_time():  # call i (from 0) sleeps i ms: the warm-up calls are 0 and 1, the timed ones 2 to 6
        time.sleep(len(calls) / 1000)
        calls.append(1)

    timing = time_call(slower_each_time, "cpu", warmup=2, repeats=5)
    assert len(timing.seconds) == timing.runs == 5
    assert all(later > earlier for earlier, later in zip(timing.seconds, timing.seconds[1:], strict=False))  # in order
    assert timing.seconds[0] >= 0.002
    assert (statistics.median(timing.seconds), min(timing.seconds), max(timing.seconds)) == (
        timing.median_s, timing.min_s, timing.max_s)


def test_min_seconds_keeps_timing_until_enough_time_has_passed():
    timing = time_call(lambda: time.sleep(0.005), "cpu", warmup=0, repeats=2, min_seconds=0.05)
    assert timing.runs >= 4 and timing.runs % 2 == 0  # whole rounds of `repeats`
    assert timing.runs * timing.max_s >= 0.05
    assert len(timing.seconds) == timing.runs and sum(timing.seconds) >= 0.05  # every round's calls kept


def test_min_seconds_is_bounded_by_max_runs():
    timing = time_call(lambda: None, "cpu", warmup=0, repeats=7, min_seconds=60.0, max_runs=50)
    assert timing.runs == 50


def test_repeats_must_be_positive():
    with pytest.raises(ValueError, match="repeats"):
        time_call(lambda: None, "cpu", repeats=0)


def test_spread_is_the_range_over_the_median():
    assert Timing(0.02, 0.01, 0.03, 3, 1, WALL_CLOCK_METHOD).spread == pytest.approx(3.0)  # slowest / fastest


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_time_a_matmul():
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    timing = time_call(lambda: a @ a, device, warmup=2, repeats=5)
    assert timing.method == CUDA_METHOD and timing.runs == 5
    assert 0 < timing.min_s <= timing.median_s <= timing.max_s < 1.0
