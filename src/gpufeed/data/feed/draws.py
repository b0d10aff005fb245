"""The random draws of one batch's augmentation: `Draws`, one typed object that the staging threads fill, the
transfer copies to the device, the GPU-decode path carries and the augmentation (augment.py) reads.

Only augment.py makes draws (`augment.draw`, a pure function of (seed, epoch, batch index)) and applies them
(`crop_flip`); the carriers copy, slice and move a `Draws` without looking inside, so an augmentation that needs
numbers of its own adds a field here and nothing in staging.py, transfer.py or gpu/.

The fields are the rows of one int64 tensor (fields, B), so a slot moves all of them in one copy:

    row_offsets      (B,) crop offset down, in [-padding, padding] (the "crop" augment; else 0)
    column_offsets   (B,) crop offset right, in [-padding, padding] (the "crop" augment; else 0)
    flips            (B,) 1 where the sample is mirrored left to right (the "flip" augment; else 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FIELDS = ("row_offsets", "column_offsets", "flips")


@dataclass(frozen=True)
class Draws:
    """One batch's augmentation draws: `values` int64 (len(FIELDS), B), each field a (B,) row (module docstring)."""

    values: torch.Tensor

    @classmethod
    def empty(cls, batch_size: int, device: torch.device | None = None, pin: bool = False) -> Draws:
        """Room for `batch_size` samples' draws, contents undefined: on `device`, or in pinned host memory."""
        return cls(torch.empty((len(FIELDS), batch_size), dtype=torch.int64, device=device, pin_memory=pin))

    @classmethod
    def from_numpy(cls, row_offsets: np.ndarray, column_offsets: np.ndarray, flips: np.ndarray) -> Draws:
        """Draws from int64 arrays (B,), one per field, copied into one contiguous (fields, B) array."""
        return cls(torch.from_numpy(np.stack([row_offsets, column_offsets, flips]).astype(np.int64, copy=False)))

    def __len__(self) -> int:
        return int(self.values.shape[1])

    @property
    def row_offsets(self) -> torch.Tensor:
        return self.values[0]

    @property
    def column_offsets(self) -> torch.Tensor:
        return self.values[1]

    @property
    def flips(self) -> torch.Tensor:
        return self.values[2]

    def head(self, size: int) -> Draws:
        """The draws of the first `size` samples (a view)."""
        return Draws(self.values[:, :size])

    def copy_(self, source: Draws | None, non_blocking: bool = False) -> None:
        """Write `source` into the first len(source) samples; with None, zeros into all of them (no augmentation)."""
        if source is None:
            self.values.zero_()
        else:
            self.values[:, :len(source)].copy_(source.values, non_blocking=non_blocking)

    def to(self, device: torch.device, non_blocking: bool = False) -> Draws:
        """A copy on `device` (a copy even when already there: the source may be a reused slot)."""
        return Draws(self.values.to(device, non_blocking=non_blocking, copy=True))

    def record_stream(self, stream: torch.cuda.Stream) -> None:
        """Tell the CUDA allocator these draws, made on another stream, are used on `stream`."""
        self.values.record_stream(stream)
