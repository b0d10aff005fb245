"""Moving staged uint8 batches to the device.

`DeviceTransfer` keeps a few device buffers and a side CUDA stream: the copy of batch i+1 (and i+2) from its
pinned slot runs while the model computes on batch i. Each copy records an event; the compute stream waits on
that event before augmenting, and records a "buffer free" event that the copy stream waits on before it
reuses the buffer. Slots go back to the staging ring once their copy has finished. On devices without
streams (MPS) the same code runs with plain synchronous copies.

`ResidentData` holds the whole dataset on the device when it fits with room to spare.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.data.feed.draws import Draws

# A dataset is kept on the device when its images take at most this share of the free device memory,
# leaving the rest for the model, activations and the allocator.
RESIDENT_SHARE = 1 / 3


def fits_on_device(images_bytes: int, device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    free_bytes, _total = torch.cuda.mem_get_info(device)
    return images_bytes <= free_bytes * RESIDENT_SHARE


@dataclass
class HostSlot:
    """One ring slot: uint8 images (B, H, W, C), int64 labels (B,), the augmentation's draws (draws.py)."""

    images: torch.Tensor
    labels: torch.Tensor
    draws: Draws

    @classmethod
    def empty(cls, batch_size: int, shape: tuple[int, int, int], device: torch.device | None = None,
              pin: bool = False) -> HostSlot:
        """A slot of `batch_size` images of `shape` (H, W, C), contents undefined: on `device`, or pinned."""
        return cls(torch.empty((batch_size, *shape), dtype=torch.uint8, device=device, pin_memory=pin),
                   torch.empty(batch_size, dtype=torch.int64, device=device, pin_memory=pin),
                   Draws.empty(batch_size, device, pin))

    @property
    def labels_numpy(self) -> np.ndarray:
        return self.labels.numpy()


class DeviceTransfer:
    def __init__(self, device: torch.device, batch_size: int, shape: tuple[int, int, int], lookahead: int = 2):
        self.device = device
        self.batch_size, self.shape = batch_size, tuple(shape)
        self.lookahead = lookahead
        self.cuda = device.type == "cuda"
        self.pin = self.cuda
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        count = lookahead + 1
        self.buffers = [HostSlot.empty(batch_size, self.shape, device) for _ in range(count)]
        self.buffer_free: list[torch.cuda.Event | None] = [None] * count

    def make_host_slot(self) -> HostSlot:
        return HostSlot.empty(self.batch_size, self.shape, pin=self.pin)

    def _submit(self, slot: HostSlot, size: int, buffer_index: int):
        target = self.buffers[buffer_index]
        if not self.cuda:
            for name in ("images", "labels"):
                getattr(target, name)[:size].copy_(getattr(slot, name)[:size])
            target.draws.copy_(slot.draws.head(size))
            return None
        with torch.cuda.stream(self.copy_stream):
            if self.buffer_free[buffer_index] is not None:
                self.copy_stream.wait_event(self.buffer_free[buffer_index])
            target.images[:size].copy_(slot.images[:size], non_blocking=True)
            target.labels[:size].copy_(slot.labels[:size], non_blocking=True)
            target.draws.copy_(slot.draws.head(size), non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(self.copy_stream)
        return ready

    def stream(self, staged, pool):
        """Yield (index, images, labels, draws) on the device, copies running `lookahead` batches ahead.

        The images and draws are views of a reused device buffer (`lookahead + 1` of them): valid until the
        consumer asks for the batch two after it, when the copy into that buffer is issued, whatever the lookahead;
        `Feed` turns them into a fresh augmented tensor at once. The labels are a copy, the caller's to keep.
        """
        pending: deque = deque()
        staged_iterator = iter(staged)
        submitted = 0

        def submit_next() -> None:
            nonlocal submitted
            item = next(staged_iterator, None)
            if item is None:
                return
            index, (slot, size) = item
            buffer_index = submitted % len(self.buffers)
            ready = self._submit(slot, size, buffer_index)
            pending.append((index, slot, size, buffer_index, ready))
            submitted += 1

        for _ in range(self.lookahead):
            submit_next()
        while pending:
            index, slot, size, buffer_index, ready = pending.popleft()
            target = self.buffers[buffer_index]
            if ready is not None:
                torch.cuda.current_stream(self.device).wait_event(ready)
            labels = target.labels[:size].clone()
            yield index, target.images[:size], labels, target.draws.head(size)
            if self.cuda:
                free = torch.cuda.Event()
                free.record(torch.cuda.current_stream(self.device))
                self.buffer_free[buffer_index] = free
                ready.synchronize()  # issued `lookahead` batches ago: normally long done
            pool.release(slot)
            submit_next()


class ResidentData:
    """The packed images and labels held on the device; batches are gathered there."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels
        self.device = images.device

    @classmethod
    def load(cls, dataset, device: torch.device, chunk_bytes: int = 256 * 1024 * 1024) -> ResidentData:
        images = torch.empty((len(dataset), *dataset.shape), dtype=torch.uint8, device=device)
        rows = max(1, chunk_bytes // dataset.bytes_per_sample)
        for start in range(0, len(dataset), rows):  # chunked so a memory-mapped file never sits in RAM whole
            piece = np.ascontiguousarray(dataset.images[start:start + rows])
            if not piece.flags.writeable:  # a read-only memory map: torch warns on such arrays, though only read
                piece = piece.copy()
            images[start:start + rows].copy_(torch.from_numpy(piece))
        labels = torch.from_numpy(dataset.labels).to(device)
        return cls(images, labels)

    def gather(self, indices: np.ndarray, draws: Draws | None):
        index = torch.from_numpy(indices).to(self.device, non_blocking=True)
        images = self.images.index_select(0, index)
        labels = self.labels.index_select(0, index)
        device_draws = None if draws is None else draws.to(self.device, non_blocking=True)
        return images, labels, device_draws
