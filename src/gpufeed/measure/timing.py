"""Seconds per call of a function on a device: warm up, then time each call and keep the median and spread.

On CUDA each call sits between two `torch.cuda.Event(enable_timing=True)` recorded on the current stream, and the
host synchronises once per round of calls before reading them, so the timing holds device time, not launch time.
On other devices the wall clock (`time.perf_counter`) is read around each call; on MPS and XPU the device is
synchronised after each call so that the wall clock covers the work. `Timing` lives here (not in `bench`) because
`bench` imports `measure`, never the other way; `gpufeed.bench.results` re-exports it.
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


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median, min and max over `runs` timed calls after `warmup` untimed ones."""

    median_s: float
    min_s: float
    max_s: float
    runs: int
    warmup: int
    method: str  # "cuda events" or "wall clock (perf_counter)"

    @property
    def spread(self) -> float:
        return (self.max_s - self.min_s) / self.median_s if self.median_s > 0 else 0.0


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
    seconds per call; `method` says which clock was read."""
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
                  warmup=warmup, method=CUDA_METHOD if device.type == "cuda" else WALL_CLOCK_METHOD)
