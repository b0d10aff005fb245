"""Batch transforms, on whichever device holds the batch: random crop with zero padding (as torchvision's
`RandomCrop(32, padding=4)` and the classic CIFAR recipe), horizontal flip, conversion to float and
per-channel normalisation.

The crop and flip stay in uint8 and move whole rows, never single pixels (pixel-wise gathers of 3-byte
pixels ran 10-30x slower on a CPU here); conversion to float comes last, fused with the normalisation.

The random draws of a step are made here (`draw`, which returns a `Draws`, draws.py), a pure function of (seed,
epoch, batch index), so a resumed run augments exactly as an uninterrupted one; `apply` applies them. Staging,
transfer and the GPU-decode path only carry the `Draws`. An augmentation that needs numbers of its own: its name
in `AUGMENTS` and its flag in `CropFlip` (`parse_augment`), its numbers drawn in `draw` after the existing ones
(so those stay the same), its transform called in `apply`, and its field in draws.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.data.feed.crops import RESIZED_AUGMENTS
from gpufeed.data.feed.draws import Draws
from gpufeed.errors import ConfigError

AUGMENTS = ("crop+flip", "crop", "flip", None)
CPU_CHUNK_BYTES = 1 << 20  # float output converted at a time on the CPU: well inside a core's L2 cache


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
        choices = ", ".join(repr(a) for a in AUGMENTS + RESIZED_AUGMENTS)
        raise ConfigError(f"unknown augment {augment!r}; choose one of {choices}")
    if padding < 0:
        raise ConfigError(f"crop padding must be >= 0, got {padding}")
    return CropFlip(crop="crop" in augment, flip="flip" in augment, padding=padding)


def draw(plan: CropFlip, step: int, seed: int, epoch: int, batch_index: int, start: int = 0,
         size: int | None = None) -> Draws:
    """The draws of samples start..start+size (default: all) of one step of `step` samples (draws.py: the fields).

    Drawn for the whole step (all ranks); each rank takes its slice, so `world_size` ranks with batch B
    augment exactly as one process with batch `world_size * B`.
    """
    key = np.random.SeedSequence([int(seed), int(epoch), int(batch_index), 0xA06])
    generator = np.random.Generator(np.random.PCG64(key))
    row_offsets, column_offsets, flips = np.zeros((3, step), np.int64)
    if plan.crop and plan.padding:
        row_offsets, column_offsets = generator.integers(-plan.padding, plan.padding + 1, size=(2, step))
    if plan.flip:
        flips = generator.integers(0, 2, size=step)
    end = step if size is None else start + size
    return Draws.from_numpy(row_offsets[start:end], column_offsets[start:end], flips[start:end])


def apply(plan: CropFlip, images: torch.Tensor, draws: Draws) -> torch.Tensor:
    """`plan`'s augmentation of uint8 images (B, H, W, C) by their `draws`: a new uint8 (B, H, W, C) tensor."""
    return crop_flip(images, draws, plan.padding if plan.crop else 0, plan.flip)


_host_canvases = threading.local()


def _zero_canvas(images: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A zero canvas of `shape`. On the CPU each thread keeps and reuses its own: only the centre is ever
    written, so the zero border stays, and a 2 MB allocation and fill per batch is saved."""
    if images.device.type != "cpu":
        return images.new_zeros(shape)
    cache = getattr(_host_canvases, "by_shape", None)
    if cache is None:
        cache = _host_canvases.by_shape = {}
    canvas = cache.get((shape, images.dtype))
    if canvas is None:
        canvas = cache[(shape, images.dtype)] = images.new_zeros(shape)
    return canvas


def crop_flip(images: torch.Tensor, draws: Draws, padding: int, flip: bool = True) -> torch.Tensor:
    """Apply the draws to uint8 images (B, H, W, C); returns a new (B, H, W, C) uint8 tensor.

    The batch is placed on a zero canvas with `padding` on each side (and, for flips, beside it a mirrored
    copy). Every output row is then a contiguous run of W pixels in that canvas, starting at
    (row + padding + row_offset, padding + column_offset) — mirrored: (padding - column_offset) in the copy —
    so the whole crop and flip is one `index_select` over overlapping row windows of the flat canvas.
    """
    batch, height, width, channels = images.shape
    canvas_height, canvas_width = height + 2 * padding, width + 2 * padding
    copies = 2 if flip else 1  # [0] as is, [1] mirrored left-right
    canvas = _zero_canvas(images, (copies, batch, canvas_height, canvas_width, channels))
    canvas[0, :, padding:padding + height, padding:padding + width] = images
    if flip:
        canvas[1, :, padding:padding + height, padding:padding + width] = images.flip(2)
    row_offset, column_offset = draws.row_offsets, draws.column_offsets
    flipped = draws.flips if flip else torch.zeros_like(draws.flips)
    column = torch.where(flipped.bool(), padding - column_offset, padding + column_offset)  # (B,)
    rows = torch.arange(height, device=images.device)[None, :] + padding + row_offset[:, None]  # (B, H)
    sample = (flipped * batch + torch.arange(batch, device=images.device)) * canvas_height  # (B,)
    starts = (sample[:, None] + rows) * canvas_width + column[:, None]  # first pixel of each output row (B, H)
    windows = canvas.view(-1).unfold(0, width * channels, channels)  # every pixel-aligned row window
    return windows.index_select(0, starts.reshape(-1)).view(batch, height, width, channels)


def to_float(images: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor | None, shift: torch.Tensor | None,
             channels_last: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 (B, H, W, C) -> `dtype` (B, C, H, W) as `x * scale + shift` per channel, or x / 255 without scale.

    `scale` and `shift` have shape (C,) in `dtype` on the images' device. In channels_last memory the pixels
    stay interleaved, so the per-channel constants are tiled along a row (W * C values) and the whole batch
    is one fused multiply-add over contiguous rows. `out`, a (B, C, H, W) tensor of `dtype` in that memory
    format, receives the result; without it a new one is made.

    On the CPU a batch larger than four chunks is converted about `CPU_CHUNK_BYTES` of output at a time: the
    multiply-add then reads what the conversion has just written from the cache, not from memory (one pass
    over memory instead of three: 12% faster for 256 images of 224 x 224 here, 430 against 490 us an image;
    fresh memory costs more, see staging.OutputPool).
    """
    batch, height, width, channels = images.shape
    layout = torch.channels_last if channels_last else torch.contiguous_format
    if out is None:
        out = torch.empty((batch, channels, height, width), dtype=dtype, device=images.device, memory_format=layout)
    if scale is not None:
        scale, shift = (scale.repeat(width), shift.repeat(width)) if channels_last else \
            (scale.view(1, channels, 1), shift.view(1, channels, 1))
    per_image = height * width * channels * out.element_size()
    if images.device.type != "cpu" or batch * per_image <= 4 * CPU_CHUNK_BYTES:  # small batches stay in cache
        _convert(images, out, scale, shift, channels_last)
        return out
    step = max(1, CPU_CHUNK_BYTES // per_image)
    for start in range(0, batch, step):
        _convert(images[start:start + step], out[start:start + step], scale, shift, channels_last)
    return out


def _convert(images: torch.Tensor, out: torch.Tensor, scale: torch.Tensor | None, shift: torch.Tensor | None,
             channels_last: bool) -> None:
    """`to_float` of one chunk; `scale` and `shift` tiled along a row (channels_last) or shaped (1, C, 1)."""
    batch, height, width, channels = images.shape
    if channels_last:
        rows = out.permute(0, 2, 3, 1)  # same memory order as the images: a straight conversion
        rows.copy_(images)
        rows = rows.reshape(batch * height, width * channels)
        if scale is None:
            rows.mul_(1.0 / 255.0)
        else:
            torch.addcmul(shift, rows, scale, out=rows)
        return
    out.copy_(images.permute(0, 3, 1, 2))  # (B, C, H, W)
    planes = out.view(batch, channels, height * width)
    if scale is None:
        planes.mul_(1.0 / 255.0)
    else:
        torch.addcmul(shift, planes, scale, out=planes)
