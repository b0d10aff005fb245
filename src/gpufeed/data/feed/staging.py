"""Background staging: threads prepare the batches of an epoch ahead of the consumer, in order.

`Staging(prepare, first, end, workers, depth)` runs `prepare(i)` for i in first..end-1 on `workers` threads;
iterating yields `(i, prepare(i))` in order of i, with at most `depth` batches prepared ahead. Batch i goes
to thread (i - first) % workers, each with its own queue, so order needs no sorting. An exception in a
thread reaches the consumer as `StagingError` naming the batch, except wrong input (a `GpufeedError` such as
the `FormatError` of a sample that does not decode), which reaches it as raised, with its exit status 2.
Closing stops the threads promptly (they check a stop flag at every wait), so an abandoned epoch never hangs
the process.

`SlotPool` is the ring of reusable staging buffers (pinned on CUDA) that `prepare` fills. `OutputPool` lends the
CPU path's memory (its slots and the finished batches it hands out), and lends it again once it is let go of.

Each staging thread runs its torch operations on one intra-op thread. Batch-sized operations are cheap, and
letting each staging thread start its own OpenMP team on cores the model is using made every parallel region
wait for a time slice (a batch of 256 images took 8 ms instead of 0.1 ms here when the other core was busy).
`torch.set_num_threads` is per thread for OpenMP but also sets the default for threads that have not used
torch yet, so the consumer's setting is read (and so fixed) first and put back when a staging thread ends.
"""

from __future__ import annotations

import math
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from gpufeed.errors import GpufeedError, RunFailed, StagingError

POLL_S = 0.05
POOLED_BYTES = 32 * 1024 * 1024  # OutputPool lends batches at least this large; glibc's largest mmap threshold


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


class OutputPool:
    """Memory for the CPU path's ring slots and the batches it hands to the consumer, lent again once nothing
    refers to it any more (a `Feed` keeps its pool from epoch to epoch).

    Each batch is a tensor over a numpy buffer of the pool, made through a fresh numpy view of it; the tensor's
    memory holds that view, and the pool only a weak reference to it. The view dies with the last tensor that
    shares the batch's memory (the batch, any slice or reshape of it, a model's saved activations), and only
    then is the buffer lent again: a consumer that keeps batches keeps their memory, one that drops each batch,
    as a training loop does, gets the same few buffers back. Fresh memory costs more than its writing here: the
    operating system maps and zeroes a 154 MB batch (256 float32 images 224 x 224) page by page, about 260 us an
    image with 4 KiB pages. numpy asks Linux for transparent huge pages for large buffers, which made the first
    use 2x cheaper. At most `limit` buffers are kept; beyond that a batch gets memory of its own. Batches under
    `smallest_bytes` come from `torch.empty`: the C allocator reuses freed blocks that small itself (glibc maps
    fresh pages only for blocks over its 32 MiB threshold), and the lending costs ~10 us a batch.
    """

    def __init__(self, limit: int, smallest_bytes: int | None = None):
        self.limit = limit
        self.smallest_bytes = POOLED_BYTES if smallest_bytes is None else smallest_bytes
        self._buffers: list[tuple[np.ndarray, weakref.ref]] = []  # (buffer, the view last lent out)
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous tensor of `shape` and `dtype`, its contents undefined."""
        size = math.prod(shape) * dtype.itemsize
        if size < self.smallest_bytes:
            return torch.empty(shape, dtype=dtype)
        with self._lock:
            free = next((position for position, (buffer, lent) in enumerate(self._buffers)
                         if len(buffer) == size and lent() is None), None)
            buffer = np.empty(size, np.uint8) if free is None else self._buffers[free][0]
            view = buffer[:]  # a new object, alive while any tensor over it is
            if free is not None:
                self._buffers[free] = (buffer, weakref.ref(view))
            elif len(self._buffers) < self.limit:
                self._buffers.append((buffer, weakref.ref(view)))
        return torch.from_numpy(view).view(dtype).view(shape)

    @property
    def buffers(self) -> list[np.ndarray]:
        """The buffers kept for lending (at most `limit`), each of uint8 bytes."""
        with self._lock:
            return [buffer for buffer, _lent in self._buffers]

    def take_images(self, count: int, shape: tuple[int, int, int], dtype: torch.dtype,
                    channels_last: bool) -> torch.Tensor:
        """(count, C, H, W) of `dtype` for `shape` (C, H, W), in channels_last or contiguous memory."""
        channels, height, width = shape
        if channels_last:
            return self.take((count, height, width, channels), dtype).permute(0, 3, 1, 2)
        return self.take((count, channels, height, width), dtype)


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
