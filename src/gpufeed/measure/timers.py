"""Time what the device does: CUDA events on a GPU (asynchronous, read back only when asked), wall clock on a CPU."""

from __future__ import annotations

import time

import torch


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
    """Wall-clock seconds accumulated over `with stopwatch:` blocks (perf_counter)."""

    def __init__(self):
        self.total_s = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.total_s += time.perf_counter() - self._start

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
