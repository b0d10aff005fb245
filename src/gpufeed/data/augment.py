"""Batch transforms, on whichever device holds the batch: random crop with reflect padding, horizontal flip,
conversion to float and per-channel normalisation.

The crop and flip stay in uint8 and are one `torch.gather` over the batch: each output pixel's source pixel
is computed by index arithmetic (crop offset, reflection at the border, flip), so no padded copy is made.
Conversion to float comes last, fused with the NHWC -> NCHW transpose.

The random draws of a batch are a pure function of (seed, epoch, rank, batch index), so a resumed run
augments exactly as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.errors import ConfigError

AUGMENTS = ("crop+flip", "crop", "flip", None)


@dataclass(frozen=True)
class CropFlip:
    """What to draw: crop offsets in [-padding, padding] (if `crop`) and a coin per sample (if `flip`)."""

    crop: bool
    flip: bool
    padding: int = 4


def parse_augment(augment: str | None, padding: int = 4) -> CropFlip | None:
    if augment in (None, "none", ""):
        return None
    if augment not in AUGMENTS:
        choices = ", ".join(repr(a) for a in AUGMENTS)
        raise ConfigError(f"unknown augment {augment!r}; choose one of {choices}")
    if padding < 0:
        raise ConfigError(f"crop padding must be >= 0, got {padding}")
    return CropFlip(crop="crop" in augment, flip="flip" in augment, padding=padding)


def draw(plan: CropFlip, batch: int, seed: int, epoch: int, rank: int, batch_index: int) -> np.ndarray:
    """Random draws for one batch as int64 (3, batch): row offsets, column offsets, flip flags."""
    key = np.random.SeedSequence([int(seed), int(epoch), int(rank), int(batch_index), 0xA06])
    generator = np.random.Generator(np.random.PCG64(key))
    draws = np.zeros((3, batch), np.int64)
    if plan.crop and plan.padding:
        draws[:2] = generator.integers(-plan.padding, plan.padding + 1, size=(2, batch))
    if plan.flip:
        draws[2] = generator.integers(0, 2, size=batch)
    return draws


def _reflect(position: torch.Tensor, size: int) -> torch.Tensor:
    """Reflect out-of-range positions back into 0..size-1 (mirror without repeating the edge)."""
    if size == 1:
        return torch.zeros_like(position)
    period = 2 * (size - 1)
    position = torch.remainder(position, period)
    return torch.where(position >= size, period - position, position)


def source_index(draws: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Flat source pixel (B, H*W) for every output pixel, given draws (3, B) on the batch's device."""
    row_offset, column_offset, flip = draws[0], draws[1], draws[2].bool()
    rows = torch.arange(height, device=draws.device)
    columns = torch.arange(width, device=draws.device)
    source_rows = _reflect(rows[None, :] + row_offset[:, None], height)  # (B, H)
    flipped = torch.where(flip[:, None], (width - 1) - columns[None, :], columns[None, :])  # (B, W)
    source_columns = _reflect(flipped + column_offset[:, None], width)  # (B, W)
    return (source_rows[:, :, None] * width + source_columns[:, None, :]).reshape(len(flip), height * width)


def crop_flip(images: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Apply the draws to uint8 images (B, H, W, C); returns a new (B, H, W, C) uint8 tensor."""
    batch, height, width, channels = images.shape
    index = source_index(draws, height, width)  # (B, H*W)
    index = index[:, :, None].expand(batch, height * width, channels)
    flat = images.reshape(batch, height * width, channels)
    return torch.gather(flat, 1, index).view(batch, height, width, channels)


def to_float(images: torch.Tensor, dtype: torch.dtype, mean: torch.Tensor | None, inverse_std: torch.Tensor | None,
             channels_last: bool) -> torch.Tensor:
    """uint8 (B, H, W, C) -> `dtype` (B, C, H, W), normalised: (x - mean) * inverse_std, or x / 255 without mean.

    `mean` and `inverse_std` have shape (1, C, 1, 1) in `dtype` on the images' device.
    """
    batch, height, width, channels = images.shape
    layout = torch.channels_last if channels_last else torch.contiguous_format
    out = torch.empty((batch, channels, height, width), dtype=dtype, device=images.device, memory_format=layout)
    out.copy_(images.permute(0, 3, 1, 2))  # (B, C, H, W)
    if mean is None:
        return out.mul_(1.0 / 255.0)
    return out.sub_(mean).mul_(inverse_std)
