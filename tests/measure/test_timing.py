"""The timing harness: its arithmetic on a fake clock (exact), one known sleep on the real one (lower bounds, and
the calls' times inside the time around them), call counts, and CUDA events where there is a GPU."""

import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from gpufeed.measure import timing as timing_module
from gpufeed.measure.timing import CUDA_METHOD, WALL_CLOCK_METHOD, Stopwatch, Timing, time_call

TICK = 2.0 ** -10  # s; a binary fraction, so the fake clock's sums and differences are exact


class FakeClock:
    """`time.perf_counter` for gpufeed.measure.timing, moved only by `advance`: a call's measured seconds are
    what it advanced."""

    def __init__(self, monkeypatch):
        self.now = 1000.0
        monkeypatch.setattr(timing_module, "time", SimpleNamespace(perf_counter=lambda: self.now))

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.timing
def test_a_known_sleep_times_as_itself():
    """On the real clock: each timed call is at least its 10 ms sleep (sleeps only overrun), and the timed calls
    fit inside the time around the whole measurement (no call counted twice, no warm-up counted), whatever the
    machine's load."""
    started = time.perf_counter()
    timing = time_call(lambda: time.sleep(0.01), torch.device("cpu"), warmup=1, repeats=5)
    around_s = time.perf_counter() - started
    assert timing.min_s >= 0.0099 and len(timing.seconds) == 5
    assert sum(timing.seconds) <= around_s - 0.0099  # the warm-up's sleep is outside the timed calls
    assert timing.min_s <= timing.median_s <= timing.max_s
    assert (timing.runs, timing.warmup, timing.method) == (5, 1, WALL_CLOCK_METHOD)


def test_warmup_and_timed_calls_are_all_made():
    calls = []
    timing = time_call(lambda: calls.append(1), "cpu", warmup=3, repeats=4)
    assert len(calls) == 7 and timing.runs == 4


def test_every_timed_call_is_kept_in_the_order_run(monkeypatch):
    clock, calls = FakeClock(monkeypatch), []

    def slower_each_time():  # call i (from 0) takes i ticks: the warm-up calls are 0 and 1, the timed ones 2 to 6
        clock.advance(len(calls) * TICK)
        calls.append(1)

    timing = time_call(slower_each_time, "cpu", warmup=2, repeats=5)
    assert timing.seconds == tuple(ticks * TICK for ticks in range(2, 7))  # in the order run, the warm-up left out
    assert (timing.median_s, timing.min_s, timing.max_s, timing.runs) == (4 * TICK, 2 * TICK, 6 * TICK, 5)
    assert (statistics.median(timing.seconds), min(timing.seconds), max(timing.seconds)) == (
        timing.median_s, timing.min_s, timing.max_s)


def test_min_seconds_keeps_timing_until_enough_time_has_passed(monkeypatch):
    clock = FakeClock(monkeypatch)
    timing = time_call(lambda: clock.advance(8 * TICK), "cpu", warmup=0, repeats=2, min_seconds=0.05)
    # 8 ticks is 7.8 ms: 3 rounds of 2 calls make 46.9 ms, under 50 ms, so a fourth round is run: 8 calls
    assert timing.runs == 8 and timing.seconds == (8 * TICK,) * 8
    assert sum(timing.seconds[:6]) < 0.05 <= sum(timing.seconds)


def test_min_seconds_is_bounded_by_max_runs(monkeypatch):
    clock = FakeClock(monkeypatch)
    timing = time_call(lambda: clock.advance(TICK), "cpu", warmup=0, repeats=7, min_seconds=60.0, max_runs=50)
    assert timing.runs == 50  # 7 rounds of 7, then 1 to reach 50; 50 ticks are far under 60 s


def test_repeats_must_be_positive():
    with pytest.raises(ValueError, match="repeats"):
        time_call(lambda: None, "cpu", repeats=0)


def test_spread_is_the_range_over_the_median():
    assert Timing(0.02, 0.01, 0.03, 3, 1, WALL_CLOCK_METHOD).spread == pytest.approx(3.0)  # slowest / fastest


def test_stopwatch_adds_its_blocks_and_take_resets(monkeypatch):
    clock, watch = FakeClock(monkeypatch), Stopwatch()
    for ticks in (3, 5, 2):
        with watch:
            clock.advance(ticks * TICK)
        clock.advance(100 * TICK)  # between blocks: not counted
    assert watch.last_s == 2 * TICK and watch.take() == 10 * TICK and watch.take() == 0.0


@pytest.mark.timing
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_time_a_matmul():
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    started = time.perf_counter()
    timing = time_call(lambda: a @ a, device, warmup=2, repeats=5)
    around_s = time.perf_counter() - started
    assert timing.method == CUDA_METHOD and timing.runs == 5
    assert 0 < timing.min_s <= timing.median_s <= timing.max_s
    assert sum(timing.seconds) <= around_s  # the device's time for the calls is inside the host's wait for them
