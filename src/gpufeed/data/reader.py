"""Open a packed dataset: the images as a memory map (or in RAM when they fit the budget), the labels in RAM."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import torch

from gpufeed.data.format import Header, channel_sums, read_header, verify_checksums
from gpufeed.errors import ConfigError, FormatError

# Share of the available RAM that an unset budget may use to hold a dataset's images.
DEFAULT_RAM_SHARE = 0.5


def default_ram_budget_bytes() -> int:
    return int(psutil.virtual_memory().available * DEFAULT_RAM_SHARE)


@dataclass
class PackedDataset:
    """Images (N, H, W, C) uint8 and labels (N,) int64 of one `.gpuf` file, or of arrays in memory.

    `in_ram` says whether the images were read into memory (they fit `ram_budget_bytes`) or are served from
    the memory map, and so from the operating system's page cache.
    """

    images: np.ndarray
    labels: np.ndarray
    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    path: Path | None = None
    header: Header | None = None
    in_ram: bool = True

    def __len__(self) -> int:
        return len(self.labels)

    def images_tensor(self) -> torch.Tensor:
        """The images as a CPU tensor sharing memory with the array (or the read-only memory map)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a read-only memory map: we never write to it
            return torch.from_numpy(self.images)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])

    @property
    def bytes_per_sample(self) -> int:
        return int(np.prod(self.images.shape[1:]))

    @property
    def images_bytes(self) -> int:
        return len(self) * self.bytes_per_sample


def open_packed(path: str | os.PathLike, verify: bool = False, ram_budget_bytes: int | None = None) -> PackedDataset:
    """Validate and open `path`. With `verify`, every checksum is recomputed first."""
    path = Path(path)
    header = read_header(path)
    if verify:
        verify_checksums(path, header)
    budget = default_ram_budget_bytes() if ram_budget_bytes is None else int(ram_budget_bytes)
    shape = (header.count, *header.shape)
    if header.count == 0:
        raise FormatError(f"{path} holds no samples; re-pack from a source with at least one image")
    images = np.memmap(path, dtype=np.uint8, mode="r", offset=header.images_offset, shape=shape)
    in_ram = header.images_bytes <= budget
    if in_ram:
        images = np.array(images)  # one sequential read; later gathers never touch the disk
    labels = np.array(np.memmap(path, dtype="<i8", mode="r", offset=header.labels_offset, shape=(header.count,)))
    labels = labels.astype(np.int64, copy=False)
    if len(header.classes) and (labels.min() < 0 or labels.max() >= len(header.classes)):
        raise FormatError(f"{path}: labels outside 0..{len(header.classes) - 1}; the file is corrupt: "
                          f"re-run gpufeed pack")
    return PackedDataset(images=images, labels=labels, classes=header.classes, mean=header.mean, std=header.std,
                         path=path, header=header, in_ram=in_ram)


def dataset_from_arrays(images, labels, classes=None) -> PackedDataset:
    """Wrap in-memory arrays: images (N, H, W[, C]) uint8 and labels (N,) integers."""
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.dtype != np.uint8:
        raise ConfigError(f"images must be uint8 (0..255), got {images.dtype}; convert with "
                          f"(x * 255).round().astype(np.uint8) if they are floats in 0..1")
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ConfigError(f"images must have shape (N, H, W) or (N, H, W, C), got {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(f"labels must be N={len(images)} integers, got shape {labels.shape} of {labels.dtype}")
    if len(images) == 0:
        raise ConfigError("the arrays hold no samples")
    images = np.ascontiguousarray(images)
    labels = labels.astype(np.int64)
    class_count = int(labels.max()) + 1
    names = tuple(classes) if classes is not None else tuple(str(i) for i in range(class_count))
    mean, std = channel_statistics(images)
    return PackedDataset(images=images, labels=labels, classes=names, mean=mean, std=std)


def channel_statistics(images: np.ndarray, chunk_bytes: int = 64 * 1024 * 1024):
    """Per-channel mean and standard deviation of uint8 images (N, H, W, C), in float64, chunk by chunk."""
    channels = images.shape[-1]
    total = np.zeros(channels, np.float64)
    squares = np.zeros(channels, np.float64)
    rows = max(1, chunk_bytes // max(1, images[0].size))
    for start in range(0, len(images), rows):
        piece_total, piece_squares = channel_sums(np.asarray(images[start:start + rows]))
        total += piece_total
        squares += piece_squares
    pixels = images.size // channels
    mean = total / pixels
    std = np.sqrt(np.maximum(squares / pixels - mean ** 2, 0.0))
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)
