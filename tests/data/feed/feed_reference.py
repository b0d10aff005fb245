"""An independent reference for the feed's device paths (test_resident_data.py, test_transfer_ring.py): a pack
whose every sample is a function of its index, and each sample's expected float output computed with numpy in
float64 (zero-padded crop, mirror, per-channel normalisation)."""

from __future__ import annotations

import numpy as np

from gpufeed.data.feed import augment
from gpufeed.data.pack.writer import PackWriter

HEIGHT, WIDTH, CHANNELS = 6, 5, 3
CLASSES = 7


def indexed_images(count: int) -> np.ndarray:
    """(count, H, W, C) uint8: pixel = (index * 7 + position) mod 256, so every sample differs from its neighbours."""
    positions = np.arange(HEIGHT * WIDTH * CHANNELS).reshape(HEIGHT, WIDTH, CHANNELS)
    return ((np.arange(count)[:, None, None, None] * 7 + positions) % 256).astype(np.uint8)


def indexed_labels(count: int) -> np.ndarray:
    return (np.arange(count) * 3) % CLASSES


def write_pack(path, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Write `count` indexed samples to `path`; returns the (images, labels) written."""
    images, labels = indexed_images(count), indexed_labels(count)
    with PackWriter(path, images.shape[1:], [str(c) for c in range(CLASSES)], count) as writer:
        writer.append(images, labels)
    return images, labels


def float64_statistics(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and (population) standard deviation of the pixels, 0..255, in float64."""
    pixels = images.reshape(-1, images.shape[-1]).astype(np.float64)
    return pixels.mean(axis=0), pixels.std(axis=0)


def expected_batch(images: np.ndarray, indices: np.ndarray, plan: augment.CropFlip | None, draws,
                   mean: np.ndarray | None, std: np.ndarray | None) -> np.ndarray:
    """float64 (B, C, H, W): each sample zero-padded by the plan's padding, cropped at its offsets, mirrored where
    its coin says so, then (x - mean) / std per channel (or x / 255 without `mean`)."""
    out = []
    for i, sample in enumerate(indices):
        image = images[sample]
        if plan is not None:
            padding = plan.padding if plan.crop else 0
            row, column = int(draws.row_offsets[i]) + padding, int(draws.column_offsets[i]) + padding
            padded = np.pad(image, ((padding, padding), (padding, padding), (0, 0)))
            image = padded[row:row + HEIGHT, column:column + WIDTH]
            if plan.flip and int(draws.flips[i]):
                image = image[:, ::-1]
        values = image.astype(np.float64)
        values = values / 255.0 if mean is None else (values - mean) / std
        out.append(values.transpose(2, 0, 1))
    return np.stack(out)
