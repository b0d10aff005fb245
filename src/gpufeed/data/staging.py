"""Background staging: threads prepare the batches of an epoch ahead of the consumer, in order.

`Staging(prepare, first, end, workers, depth)` runs `prepare(i)` for i in first..end-1 on `workers` threads;
iterating yields `(i, prepare(i))` in order of i, with at most `depth` batches prepared ahead. Batch i goes
to thread (i - first) % workers, each with its own queue, so order needs no sorting. An exception in a
thread reaches the consumer as `StagingError` naming the batch, except wrong input (a `GpufeedError` such as
the `FormatError` of a sample that does not decode), which reaches it as raised, with its exit status 2.
Closing stops the threads promptly (they check a stop flag at every wait), so an abandoned epoch never hangs
the process.

`SlotPool` is the ring of reusable staging buffers (pinned on CUDA) that `prepare` fills.

Each staging thread runs its torch operations on one intra-op thread. Batch-sized operations are cheap, and
letting each staging thread start its own OpenMP team on cores the model is using made every parallel region
wait for a time slice (a batch of 256 images took 8 ms instead of 0.1 ms here when the other core was busy).
`torch.set_num_threads` is per thread for OpenMP but also sets the default for threads that have not used
torch yet, so the consumer's setting is read (and so fixed) first and put back when a staging thread ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from gpufeed.errors import GpufeedError, RunFailed, StagingError

POLL_S = 0.05


class SlotPool:
    """A fixed ring of buffers: `acquire` waits for a free one (or the stop flag); `release` returns it."""

    def __init__(self, make_slot: Callable[[], Any], size: int, stop: threading.Event):
        self._free: queue.Queue = queue.Queue()
        self._stop = stop
        self.size = size
        for _ in range(size):
            self._free.put(make_slot())

    def acquire(self):
        while not self._stop.is_set():
            try:
                return self._free.get(timeout=POLL_S)
            except queue.Empty:
                continue
        raise _Stopped

    def release(self, slot) -> None:
        self._free.put(slot)


class _Stopped(Exception):
    """Raised inside a staging thread when the consumer has gone away."""


class Staging:
    """Prepare batches first..end-1 on background threads; iterate to receive them in order."""

    def __init__(self, prepare: Callable[[int], Any], first: int, end: int, workers: int = 1, depth: int = 4,
                 stop: threading.Event | None = None, name: str = "gpufeed-staging"):
        self.prepare = prepare
        self.first, self.end = first, end
        self.workers = max(1, min(workers, max(1, end - first)))
        per_worker = max(1, -(-depth // self.workers))
        self.stop = stop or threading.Event()
        self._consumer_threads = torch.get_num_threads()  # also fixes the consumer thread's own setting
        self._queues = [queue.Queue(maxsize=per_worker) for _ in range(self.workers)]
        self._threads = [threading.Thread(target=self._work, args=(w,), name=f"{name}-{w}", daemon=True)
                         for w in range(self.workers)]
        for thread in self._threads:
            thread.start()

    def _put(self, worker: int, item) -> None:
        while not self.stop.is_set():
            try:
                self._queues[worker].put(item, timeout=POLL_S)
                return
            except queue.Full:
                continue
        raise _Stopped

    def _work(self, worker: int) -> None:
        index = self.first + worker
        torch.set_num_threads(1)
        try:
            while index < self.end and not self.stop.is_set():
                try:
                    result = self.prepare(index)
                except _Stopped:
                    return
                except BaseException as error:  # handed to the consumer, never lost
                    self._put(worker, ("error", index, error))
                    return
                self._put(worker, ("ok", index, result))
                index += self.workers
        except _Stopped:
            return
        finally:
            torch.set_num_threads(self._consumer_threads)  # the default for threads started later

    def _get(self, worker: int, index: int):
        thread = self._threads[worker]
        while True:
            try:
                return self._queues[worker].get(timeout=POLL_S)
            except queue.Empty:
                if not thread.is_alive() and self._queues[worker].empty():
                    raise StagingError(f"staging thread {worker} stopped before batch {index}") from None

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        try:
            for index in range(self.first, self.end):
                status, got, payload = self._get((index - self.first) % self.workers, index)
                if status == "error":
                    if isinstance(payload, GpufeedError) and not isinstance(payload, RunFailed):
                        raise payload  # wrong input (a sample that does not decode): its own one-line message
                    raise StagingError(f"preparing batch {got} failed: {type(payload).__name__}: {payload}") \
                        from payload
                yield got, payload
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
