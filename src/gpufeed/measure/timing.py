"""Time work on a device: CUDA events on a GPU, the wall clock elsewhere. Two uses of the one mechanism:

- `time_call`: seconds per call of a function (bench, plan): warm up, then time each call and keep the median
  and spread in a `Timing`. On CUDA each call sits between two `torch.cuda.Event(enable_timing=True)` recorded
  on the current stream, and the host synchronises once per round of calls before reading them, so the timing
  holds device time, not launch time. On other devices the wall clock (`time.perf_counter`) is read around each
  call; on MPS and XPU the device is synchronised after each call so that the wall clock covers the work.
- `DeviceBusyTimer`, `Stopwatch`, `event_pairs_seconds`: time accumulated by a running loop (train, the doctor):
  the device time of marked regions, read back only when asked, and wall-clock seconds of blocks.

`Timing` lives here (not in `bench`) because `bench` imports `measure`, never the other way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

CUDA_METHOD = "cuda events"
WALL_CLOCK_METHOD = "wall clock (perf_counter)"


def spread(min_s: float, max_s: float) -> float | None:
    """The spread of a measurement's repeats: its slowest over its fastest (1.0: all alike). The one definition
    bench's table, its summary and its page all print, as "1.3x"; None without a positive fastest repeat."""
    return max_s / min_s if min_s > 0 else None


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median, min and max over `runs` timed calls after `warmup` untimed ones, and `seconds`,
    each timed call's, in the order they ran (what the median, min and max are of)."""

    median_s: float
    min_s: float
    max_s: float
    runs: int
    warmup: int
    method: str  # "cuda events" or "wall clock (perf_counter)"
    seconds: tuple[float, ...] = ()

    @property
    def spread(self) -> float | None:
        """`spread(min_s, max_s)`: the slowest repeat over the fastest."""
        return spread(self.min_s, self.max_s)


def synchronize(device: torch.device) -> None:
    """Wait until `device` has finished its queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def _cuda_round(fn: Callable[[], Any], device: torch.device, calls: int) -> list[float]:
    """Seconds of each of `calls` calls, from events around each; synchronises once at the end."""
    pairs = []
    with torch.cuda.device(device):
        for _ in range(calls):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1000.0 for start, end in pairs]


def _wall_clock_round(fn: Callable[[], Any], device: torch.device, calls: int) -> list[float]:
    """Seconds of each of `calls` calls by the wall clock (the device synchronised after each, off the CPU)."""
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def time_call(fn: Callable[[], Any], device: torch.device | str, warmup: int = 3, repeats: int = 10,
              min_seconds: float = 0.0, max_runs: int = 1000) -> Timing:
    """Time `fn()` on `device`: `warmup` untimed calls, then at least `repeats` timed calls, and more (in rounds of
    `repeats`, at most `max_runs` in all) until the timed calls add up to `min_seconds`. Median, min and max in
    seconds per call, and every timed call's (`seconds`); `method` says which clock was read."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    timed_round = _cuda_round if device.type == "cuda" else _wall_clock_round
    seconds: list[float] = []
    while not seconds or (sum(seconds) < min_seconds and len(seconds) < max_runs):
        seconds += timed_round(fn, device, min(repeats, max(1, max_runs - len(seconds))))
    return Timing(median_s=statistics.median(seconds), min_s=min(seconds), max_s=max(seconds), runs=len(seconds),
                  warmup=warmup, method=CUDA_METHOD if device.type == "cuda" else WALL_CLOCK_METHOD,
                  seconds=tuple(seconds))


class DeviceBusyTimer:
    """Accumulates the device time of marked regions (the compute of each step) between `collect` calls.

    On CUDA, `start`/`stop` record events on the current stream without synchronising; `collect` waits for the
    last event and sums the elapsed times. On other devices the device is the host: `collect` returns None,
    because wall-clock compute time there says nothing about idle gaps.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._open: torch.cuda.Event | None = None

    def start(self) -> None:
        if self.cuda:
            self._open = torch.cuda.Event(enable_timing=True)
            self._open.record()

    def stop(self) -> None:
        if self.cuda and self._open is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pairs.append((self._open, end))
            self._open = None

    def collect(self) -> float | None:
        """Seconds of device time in the regions marked since the last call (synchronises), or None off CUDA."""
        if not self.cuda:
            return None
        if not self._pairs:
            return 0.0
        busy_s = event_pairs_seconds(self._pairs)
        self._pairs.clear()
        return busy_s


class Stopwatch:
    """Wall-clock seconds accumulated over `with stopwatch:` blocks (perf_counter); `last_s`, the latest block's."""

    def __init__(self):
        self.total_s = 0.0
        self.last_s = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.last_s = time.perf_counter() - self._start
        self.total_s += self.last_s

    def take(self) -> float:
        """Return the accumulated seconds and reset to zero."""
        value, self.total_s = self.total_s, 0.0
        return value


def event_pairs_seconds(pairs: list) -> float:
    """Seconds between each (start, end) pair of CUDA timing events, summed. Both events of a pair are waited for
    (a start recorded on another stream may lag its end); Event.synchronize is not one of the calls the doctor
    patches, so reading them does not count as a stall."""
    total_ms = 0.0
    for start, end in pairs:
        start.synchronize()
        end.synchronize()
        total_ms += start.elapsed_time(end)
    return total_ms / 1000.0
