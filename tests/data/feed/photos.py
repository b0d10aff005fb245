"""Photo-like test data of varying sizes: smooth images, each a function of its index, packed raw or as JPEG
into version-2 `.gpuf` files."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from gpufeed.data.format.reader import open_packed
from gpufeed.data.format.statistics import channel_sums
from gpufeed.data.pack.table_writer import TableWriter


def smooth_image(index: int, height: int, width: int, channels: int = 3) -> np.ndarray:
    """uint8 (H, W, C): low-frequency waves and a ramp whose phases depend on `index`, so crops of different
    samples differ, and JPEG and resampling errors stay small (no detail finer than ~10 pixels)."""
    rows = np.arange(height, dtype=np.float64)[:, None, None]
    columns = np.arange(width, dtype=np.float64)[None, :, None]
    channel = np.arange(channels, dtype=np.float64)[None, None, :]
    phase = index * 0.7 + channel * 1.3
    wave = np.sin(rows / (9.0 + channel) + phase) * np.cos(columns / (13.0 + 2 * channel) - phase)
    ramp = (rows / max(1, height - 1) + columns / max(1, width - 1)) / 2
    return np.clip(128 + 80 * wave + 40 * (ramp - 0.5), 0, 255).round().astype(np.uint8)


def encode_jpeg(image: np.ndarray, quality: int = 95) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def write_photos(path, sizes, encoding: str = "raw", channels: int = 3, quality: int = 95, classes: int = 5,
                 damaged: tuple[int, ...] = ()) -> list[np.ndarray]:
    """Pack smooth images of the given (H, W) sizes into a version-2 file at `path`, named "photo_{i}.png";
    return the pixels (for JPEG: as Pillow decodes them, the reference). Samples in `damaged` are stored as a
    JPEG whose second half is zeros (a header that parses, data that does not decode)."""
    images, stored = [], []
    for index, (height, width) in enumerate(sizes):
        image = smooth_image(index, height, width, channels)
        if encoding == "jpeg":
            blob = encode_jpeg(image, quality)
            image = np.asarray(Image.open(io.BytesIO(blob))).reshape(image.shape)
            if index in damaged:
                blob = blob[:len(blob) // 2] + bytes(len(blob) - len(blob) // 2)
        else:
            blob = image.tobytes()
        images.append(image)
        stored.append(blob)
    with TableWriter(path, channels, [str(c) for c in range(classes)], len(sizes), encoding, named=True) as writer:
        for index, (blob, image) in enumerate(zip(stored, images, strict=True)):
            writer.append(blob, image.shape[0], image.shape[1], index % classes, sums=channel_sums(image[None]),
                          name=f"photo_{index}.png")
    return images


def photo_dataset(path, sizes, encoding: str = "raw", channels: int = 3, damaged: tuple[int, ...] = (),
                  in_ram: bool = True):
    """`write_photos`, then `open_packed`: (the dataset, the reference pixels)."""
    images = write_photos(path, sizes, encoding, channels, damaged=damaged)
    return open_packed(path, ram_budget_bytes=None if in_ram else 0), images


def varied_sizes(count: int, seed: int = 0, low: int = 40, high: int = 120) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [(int(h), int(w)) for h, w in rng.integers(low, high, size=(count, 2))]


def pil_resized_crop(image: np.ndarray, box, size: tuple[int, int]) -> np.ndarray:
    """The reference: crop the box with Pillow, resize with BILINEAR (antialiased when shrinking), no reducing gap."""
    top, left, height, width = (int(v) for v in box)
    grey = image.shape[-1] == 1
    picture = Image.fromarray(image[..., 0] if grey else image).crop((left, top, left + width, top + height))
    resized = np.asarray(picture.resize((size[1], size[0]), Image.BILINEAR, reducing_gap=None))
    return resized[..., None] if grey else resized
