"""Crop boxes for photo data: torchvision's RandomResizedCrop rule, vectorised over a step, and the validation
centre crop. A box is (top, left, height, width) in source pixels; `cpu_resize.py` (or gpu/resize.py) turns each
box into an output image, so training and validation share one resize kernel.

RandomResizedCrop (torchvision's `RandomResizedCrop.get_params`, scale 0.08-1, ratio 3/4-4/3): up to 10
attempts, each drawing target_area = H * W * U(scale) and a log-uniform aspect ratio r; w = round(sqrt(ta * r)),
h = round(sqrt(ta / r)) (round half to even, as Python's `round`); the first attempt with 0 < w <= W and
0 < h <= H wins, with top and left uniform integers in 0..H-h and 0..W-w. When all 10 fail (very elongated
images), the fallback is torchvision's: the centred box of the whole image with its ratio clamped to the range.

Every draw is a uniform number in [0, 1) taken from a generator seeded by (seed, epoch, batch index) for the
whole step of `world_size * batch_size` samples; each rank takes its slice, so W ranks with batch B crop
exactly as one process with batch W * B, and a resumed run crops as an uninterrupted one. Integers are
floor(u * n). Flip coins are drawn by `augment.draw` as for the "flip" augment.

Centre crop (validation): scale the image so it covers image_size / 0.875, then take the centre image_size;
as a box in source pixels that is round(image_size * 0.875 / cover) centred, cover = max(out_H / H, out_W / W).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufeed.errors import ConfigError

RANDOM_AUGMENTS = ("random-resized-crop", "random-resized-crop-noflip")
CENTRE_AUGMENTS = ("centre-crop", "center-crop")
RESIZED_AUGMENTS = RANDOM_AUGMENTS + CENTRE_AUGMENTS
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
ATTEMPTS = 10
CENTRE_FRACTION = 0.875  # ImageNet validation: resize to 256, crop 224
UNIFORMS_PER_SAMPLE = 2 * ATTEMPTS + 2  # area and ratio per attempt, then top and left


@dataclass(frozen=True)
class ResizedCrop:
    """A resized-crop augment: random boxes (else the centre crop), flip coins, output size (H, W)."""

    random: bool
    flip: bool
    size: tuple[int, int]
    scale: tuple[float, float] = SCALE
    ratio: tuple[float, float] = RATIO


def parse_image_size(image_size) -> tuple[int, int]:
    """`image_size` as (H, W): an int is a square."""
    if isinstance(image_size, (int, np.integer)) and not isinstance(image_size, bool):
        size = (int(image_size), int(image_size))
    elif isinstance(image_size, (tuple, list)) and len(image_size) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in image_size):
        size = (int(image_size[0]), int(image_size[1]))
    else:
        raise ConfigError(f"image_size must be an int or (height, width), got {image_size!r}")
    if min(size) <= 0:
        raise ConfigError(f"image_size must be positive, got {image_size!r}")
    return size


def parse_resized_crop(augment: str | None, image_size) -> ResizedCrop | None:
    """The plan for a resized-crop augment name, or None for any other name."""
    if augment not in RESIZED_AUGMENTS:
        return None
    return ResizedCrop(random=augment in RANDOM_AUGMENTS, flip=augment == RANDOM_AUGMENTS[0],
                       size=parse_image_size(image_size))


def draw_uniforms(step: int, seed: int, epoch: int, batch_index: int) -> np.ndarray:
    """The uniform numbers of one whole step, float64 (step, 22): per sample 10 area draws, 10 ratio draws,
    then top and left."""
    key = np.random.SeedSequence([int(seed), int(epoch), int(batch_index), 0x5CC])
    return np.random.Generator(np.random.PCG64(key)).random((step, UNIFORMS_PER_SAMPLE))


def random_resized_boxes(heights: np.ndarray, widths: np.ndarray, uniforms: np.ndarray,
                         scale: tuple[float, float] = SCALE, ratio: tuple[float, float] = RATIO) -> np.ndarray:
    """torchvision's RandomResizedCrop boxes for images (heights, widths) (B,), given `uniforms` (B, 22).

    Returns int64 (B, 4): top, left, height, width."""
    height = np.asarray(heights, np.int64)[:, None]  # (B, 1)
    width = np.asarray(widths, np.int64)[:, None]
    area = (height * width).astype(np.float64)
    target_area = area * (scale[0] + (scale[1] - scale[0]) * uniforms[:, :ATTEMPTS])  # (B, 10)
    log_low, log_high = np.log(ratio[0]), np.log(ratio[1])
    aspect = np.exp(log_low + (log_high - log_low) * uniforms[:, ATTEMPTS:2 * ATTEMPTS])  # (B, 10)
    box_width = np.rint(np.sqrt(target_area * aspect)).astype(np.int64)
    box_height = np.rint(np.sqrt(target_area / aspect)).astype(np.int64)
    fits = (box_width > 0) & (box_width <= width) & (box_height > 0) & (box_height <= height)  # (B, 10)
    first = fits.argmax(axis=1)  # the first attempt that fits (0 when none does)
    rows = np.arange(len(first))
    found = fits[rows, first]
    box_height, box_width = box_height[rows, first], box_width[rows, first]  # (B,)
    height, width = height[:, 0], width[:, 0]
    top = np.floor(uniforms[:, 2 * ATTEMPTS] * (height - box_height + 1)).astype(np.int64)
    left = np.floor(uniforms[:, 2 * ATTEMPTS + 1] * (width - box_width + 1)).astype(np.int64)
    boxes = np.stack([top, left, box_height, box_width], axis=1)
    if not found.all():
        boxes[~found] = fallback_boxes(height[~found], width[~found], ratio)
    return boxes


def fallback_boxes(heights: np.ndarray, widths: np.ndarray, ratio: tuple[float, float] = RATIO) -> np.ndarray:
    """torchvision's fallback after 10 failed attempts: the whole image, its ratio clamped to `ratio`, centred."""
    heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    in_ratio = widths / heights
    tall, wide = in_ratio < min(ratio), in_ratio > max(ratio)
    box_width = np.where(wide, np.rint(heights * max(ratio)).astype(np.int64), widths)
    box_height = np.where(tall, np.rint(widths / min(ratio)).astype(np.int64), heights)
    return np.stack([(heights - box_height) // 2, (widths - box_width) // 2, box_height, box_width], axis=1)


def centre_boxes(heights: np.ndarray, widths: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Validation boxes int64 (B, 4): the centre `size` of the image scaled to cover size / 0.875."""
    heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    out_height, out_width = size
    cover = np.maximum(out_height / heights, out_width / widths) / CENTRE_FRACTION  # scale factor (B,)
    box_height = np.clip(np.rint(out_height / cover).astype(np.int64), 1, heights)
    box_width = np.clip(np.rint(out_width / cover).astype(np.int64), 1, widths)
    return np.stack([(heights - box_height) // 2, (widths - box_width) // 2, box_height, box_width], axis=1)


def batch_boxes(plan: ResizedCrop, heights: np.ndarray, widths: np.ndarray, seed: int, epoch: int,
                batch_index: int, step: int, start: int) -> np.ndarray:
    """Boxes (B, 4) for one rank's batch: samples of sizes (heights, widths) at `start` in a step of `step`."""
    if not plan.random:
        return centre_boxes(heights, widths, plan.size)
    uniforms = draw_uniforms(step, seed, epoch, batch_index)[start:start + len(heights)]
    return random_resized_boxes(heights, widths, uniforms, plan.scale, plan.ratio)
