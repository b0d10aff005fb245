"""Open a packed dataset (`open_packed`): the samples as a memory map (or in RAM when they fit the budget), the
labels in RAM; and wrap arrays in memory the same way (`dataset_from_arrays`).

`PackedDataset` answers the same questions for every file, so a reader need not ask which version it has:

    variable          True for a version-2 file (per-sample table; samples may differ in size), else False
    encoding          "raw" (uint8 H x W x C row-major) or "jpeg" (each sample one JPEG file); "raw" for version 1
    channels          C
    heights, widths   np.int64 arrays (N,): each sample's stored size
    offsets, lengths  np.int64 arrays (N,): where each sample's bytes start in `payload`, and how many
    payload           1-D uint8 array of every sample's bytes, in order: a read-only memory map, or in RAM
    sample_bytes(i)   1-D uint8 view of sample i's stored bytes (a JPEG file's bytes for "jpeg")
    sample_array(i)   (H, W, C) uint8 view of raw sample i (a `ConfigError` for "jpeg": decode its bytes)
    sample_name(i)    the source path sample i was packed from (relative to the folder), or None if not stored
    max_shape         (largest H, largest W, C)
    is_fixed_size     whether every sample has one size
    shape             (H, W, C) when `is_fixed_size`; a `ConfigError` naming the file otherwise
    images            (N, H, W, C) uint8 for version 1 and arrays; None for version 2
    labels            (N,) int64; classes, mean and std (per channel, 0..255) as the header holds them

For version 1, the table is derived from the shape on first use (version 1 stores none).
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import torch

from gpufeed.data.format.header import Header, read_header
from gpufeed.data.format.layout import variable_size_error
from gpufeed.data.format.statistics import channel_statistics
from gpufeed.data.format.table import SampleTable, TableHeader, read_names, read_table
from gpufeed.data.format.verify import verify_checksums
from gpufeed.errors import ConfigError, FormatError

# Share of the available RAM that an unset budget may use to hold a dataset's images.
DEFAULT_RAM_SHARE = 0.5


def default_ram_budget_bytes() -> int:
    return int(psutil.virtual_memory().available * DEFAULT_RAM_SHARE)


@dataclass
class PackedDataset:
    """The samples and labels (N,) int64 of one `.gpuf` file, or of arrays in memory (module docstring: the API).

    Version 1 and arrays give `images` (N, H, W, C) uint8, and `payload` is the same bytes flattened; version 2
    gives `payload` and `table` and no `images`. `in_ram` says whether the samples were read into memory (they
    fit `ram_budget_bytes`) or are served from the memory map, and so from the operating system's page cache.
    """

    images: np.ndarray | None
    labels: np.ndarray
    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    path: Path | None = None
    header: Header | TableHeader | None = None
    in_ram: bool = True
    payload: np.ndarray | None = None
    table: SampleTable | None = None
    encoding: str = "raw"

    def __post_init__(self):
        if self.images is not None and self.payload is None:
            self.payload = self.images.reshape(-1)  # a view: the images are C-contiguous
        if self.images is None and (self.payload is None or self.table is None or self.header is None):
            raise ConfigError("a PackedDataset without images needs its payload, table and header")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def variable(self) -> bool:
        return self.images is None

    @property
    def channels(self) -> int:
        return int(self.images.shape[-1]) if self.images is not None else self.header.channels

    def _samples(self) -> SampleTable:
        if self.table is None:
            self.table = SampleTable.fixed(len(self), tuple(self.images.shape[1:]))
        return self.table

    @property
    def heights(self) -> np.ndarray:
        return self._samples().heights

    @property
    def widths(self) -> np.ndarray:
        return self._samples().widths

    @property
    def offsets(self) -> np.ndarray:
        return self._samples().offsets

    @property
    def lengths(self) -> np.ndarray:
        return self._samples().lengths

    @functools.cached_property
    def max_shape(self) -> tuple[int, int, int]:
        if self.images is not None:
            return tuple(int(v) for v in self.images.shape[1:])
        return self.table.max_shape(self.channels)

    @functools.cached_property
    def is_fixed_size(self) -> bool:
        return self.images is not None or self.table.is_fixed_size()

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, W, C) of every sample; a `ConfigError` when the samples differ in size (see `max_shape`)."""
        if not self.is_fixed_size:
            raise variable_size_error(str(self.path or "the dataset"), self.max_shape, "this use")
        return self.max_shape

    @property
    def bytes_per_sample(self) -> int:
        """Bytes of one sample's pixels (uint8 H x W x C); needs one fixed size."""
        return int(np.prod(self.shape))

    @property
    def images_bytes(self) -> int:
        """Bytes of the samples as stored (the payload): JPEG files are smaller than their pixels."""
        return int(self.payload.nbytes)

    def images_tensor(self) -> torch.Tensor:
        """The images as a CPU tensor sharing memory with the array (or the read-only memory map)."""
        if self.images is None:
            raise ConfigError(f"{self.path} is a version-2 pack (per-sample table), with no images array; read its "
                              f"samples with sample_bytes(i) or, for raw samples, sample_array(i)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a read-only memory map: we never write to it
            return torch.from_numpy(self.images)

    def sample_bytes(self, index: int) -> np.ndarray:
        """Sample `index`'s stored bytes: a 1-D uint8 view into `payload`."""
        table = self._samples()
        start = int(table.offsets[index])
        return self.payload[start:start + int(table.lengths[index])]

    def sample_array(self, index: int) -> np.ndarray:
        """Raw sample `index` as an (H, W, C) uint8 view into `payload`."""
        if self.images is not None:
            return self.images[index]
        if self.encoding != "raw":
            raise ConfigError(f"{self.path} stores its samples as {self.encoding}: decode sample_bytes({index}) "
                              f"(one {self.encoding} file) instead of sample_array")
        table = self._samples()
        return self.sample_bytes(index).reshape(int(table.heights[index]), int(table.widths[index]), self.channels)

    def sample_name(self, index: int) -> str | None:
        """The source path sample `index` was packed from (relative to the packed folder), or None."""
        names = self._names
        return None if names is None else names[index]

    @functools.cached_property
    def _names(self) -> list[str] | None:
        """The stored source names, read on first use."""
        if not self.variable:
            return None
        return read_names(self.path, self.header.names_offset, self.header.names_bytes, self.header.count)


def _labels(path: Path, header: Header | TableHeader) -> np.ndarray:
    labels = np.array(np.memmap(path, dtype="<i8", mode="r", offset=header.labels_offset, shape=(header.count,)))
    labels = labels.astype(np.int64, copy=False)
    if len(header.classes) and (labels.min() < 0 or labels.max() >= len(header.classes)):
        raise FormatError(f"{path}: labels outside 0..{len(header.classes) - 1}; the file is corrupt: "
                          f"re-run gpufeed pack")
    return labels


def open_packed(path: str | os.PathLike, verify: bool = False, ram_budget_bytes: int | None = None) -> PackedDataset:
    """Validate and open `path` (either format version). With `verify`, every checksum is recomputed first."""
    path = Path(path)
    header = read_header(path)
    if verify:
        verify_checksums(path, header)
    budget = default_ram_budget_bytes() if ram_budget_bytes is None else int(ram_budget_bytes)
    if header.count == 0:
        raise FormatError(f"{path} holds no samples; re-pack from a source with at least one image")
    common = dict(labels=_labels(path, header), classes=header.classes, mean=header.mean, std=header.std, path=path,
                  header=header)
    if header.variable:
        table = read_table(path, header)
        payload = np.memmap(path, dtype=np.uint8, mode="r", offset=header.payload_offset,
                            shape=(header.payload_bytes,))
        in_ram = header.payload_bytes <= budget
        payload = np.array(payload) if in_ram else payload
        return PackedDataset(images=None, payload=payload, table=table, encoding=header.encoding, in_ram=in_ram,
                             **common)
    images = np.memmap(path, dtype=np.uint8, mode="r", offset=header.images_offset, shape=(header.count, *header.shape))
    in_ram = header.images_bytes <= budget
    if in_ram:
        images = np.array(images)  # one sequential read; later gathers never touch the disk
    return PackedDataset(images=images, in_ram=in_ram, **common)


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
