"""The CPU's whole share of the GPU-decode path: a batch's JPEG files copied back to back into a pinned `ByteSlot`
(`stage_bytes`: offsets per sample, one `np.concatenate` into the slot), with its crop boxes, labels and draws
(`stage_batch_bytes`), on the staging threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.data.feed.draws import Draws

SLOT_GROWTH = 1.25  # a slot too small for a batch's bytes is replaced by one this much larger than needed


@dataclass
class ByteSlot:
    """One ring slot of compressed samples: sample k's JPEG file is data[offsets[k]:offsets[k + 1]], cut to
    boxes[k] (top, left, height, width); `size` samples are in use. Tensors are pinned when `pin`."""

    data: torch.Tensor  # (capacity,) uint8
    labels: torch.Tensor  # (B,) int64
    draws: Draws  # the "flip" augment's draws (draws.py)
    samples: np.ndarray  # (B,) int64
    boxes: np.ndarray  # (B, 4) int64
    offsets: np.ndarray  # (B + 1,) int64
    pin: bool
    size: int = 0

    @classmethod
    def empty(cls, batch_size: int, capacity: int, pin: bool) -> ByteSlot:
        return cls(torch.empty(capacity, dtype=torch.uint8, pin_memory=pin),
                   torch.empty(batch_size, dtype=torch.int64, pin_memory=pin),
                   Draws.empty(batch_size, pin=pin),
                   np.zeros(batch_size, np.int64), np.zeros((batch_size, 4), np.int64),
                   np.zeros(batch_size + 1, np.int64), pin)

    def sample_bytes(self, k: int) -> np.ndarray:
        return self.data.numpy()[self.offsets[k]:self.offsets[k + 1]]


def initial_capacity(dataset, batch_size: int) -> int:
    """Bytes a slot starts with: twice a batch of average samples, at least 1 MiB."""
    return max(1 << 20, int(2 * batch_size * dataset.images_bytes / max(1, len(dataset))))


def stage_bytes(dataset, samples: np.ndarray, slot: ByteSlot) -> None:
    """Copy the stored bytes of `samples` back to back into `slot.data` (grown if they do not fit) and record
    their offsets; `slot.size` becomes len(samples)."""
    size = len(samples)
    slot.samples[:size] = samples
    slot.offsets[0] = 0
    np.cumsum(dataset.lengths[samples], out=slot.offsets[1:size + 1])
    total = int(slot.offsets[size])
    if total > slot.data.numel():
        slot.data = torch.empty(int(total * SLOT_GROWTH), dtype=torch.uint8, pin_memory=slot.pin)
    np.concatenate([dataset.sample_bytes(int(sample)) for sample in samples], out=slot.data.numpy()[:total])
    slot.size = size


def stage_batch_bytes(feed, order, epoch: int, index: int, slot: ByteSlot) -> ByteSlot:
    """The CPU's whole share of the GPU-decode path for batch `index`: boxes, bytes, labels and draws."""
    indices = order.batches[index]
    size = len(indices)
    slot.boxes[:size] = feed.crop_boxes(epoch, index, indices)
    stage_bytes(feed.dataset, indices, slot)
    slot.labels.numpy()[:size] = feed.dataset.labels[indices]
    slot.draws.head(size).copy_(feed.batch_draws(epoch, index, size))
    return slot
