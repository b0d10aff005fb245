"""Version 2 of the `.gpuf` format (layout in layout.py): its header (`TableHeader`), its per-sample table
(`SampleTable`), its source names, and the check of every sample's crc32.

One record per sample, little-endian and packed (`RECORD`, 28 bytes):

    offset  u64   where the sample's stored bytes start, counted from the payload's first byte
    length  u64   how many bytes it has
    height  u32   its height in pixels, as stored
    width   u32   its width in pixels, as stored
    crc32   u32   zlib.crc32 of its stored bytes

Samples lie in table order with no gaps: offset[0] = 0, offset[i + 1] = offset[i] + length[i], and the last
ends at the payload's end. A raw sample holds height * width * channels bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.data.format.layout import (
    ALIGNMENT,
    ENCODINGS,
    TABLE_VERSION,
    common_fields,
    header_field,
    variable_size_error,
)
from gpufeed.errors import FormatError

RECORD = np.dtype([("offset", "<u8"), ("length", "<u8"), ("height", "<u4"), ("width", "<u4"), ("crc32", "<u4")])
RECORD_FIELDS = [[name, RECORD.fields[name][0].str] for name in RECORD.names]  # as the header records them


@dataclass(frozen=True)
class TableHeader:
    """The parsed, validated JSON header of a version-2 `.gpuf` file (a per-sample table; sizes may differ)."""

    version: int
    count: int
    channels: int
    classes: tuple[str, ...]
    source: str
    created: str
    encoding: str
    quality: int | None
    max_side: int | None
    size: tuple[int, int] | None
    max_shape: tuple[int, int, int]
    is_fixed_size: bool
    passthrough: int
    table_offset: int
    table_bytes: int
    payload_offset: int
    payload_bytes: int
    labels_offset: int
    labels_bytes: int
    names_offset: int
    names_bytes: int
    checksum_algorithm: str
    chunk_bytes: int
    table_checksums: tuple[int, ...]
    labels_checksums: tuple[int, ...]
    names_checksums: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    extra: dict
    variable = True  # samples are reached through the per-sample table

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, W, C) when every sample has one size; a `ConfigError` otherwise (see `max_shape`)."""
        if not self.is_fixed_size:
            raise variable_size_error(self.source or "this packed dataset", self.max_shape, "reading one shape")
        return self.max_shape

    @property
    def stored_bytes_per_sample(self) -> float:
        """The payload's mean bytes per sample (JPEG files are smaller than their pixels)."""
        return self.payload_bytes / max(1, self.count)

    @property
    def file_bytes(self) -> int:
        return max(self.labels_offset + self.labels_bytes, self.names_offset + self.names_bytes)

    @property
    def checked_bytes(self) -> int:
        return self.table_bytes + self.payload_bytes + self.labels_bytes + self.names_bytes

    def chunked_regions(self) -> list[tuple[str, int, int, tuple[int, ...]]]:
        return [("table", self.table_offset, self.table_bytes, self.table_checksums),
                ("labels", self.labels_offset, self.labels_bytes, self.labels_checksums),
                ("names", self.names_offset, self.names_bytes, self.names_checksums)]


def parse_table_header(raw: dict, path: Path) -> TableHeader:
    """Check a version-2 JSON header's fields and turn it into a `TableHeader`."""
    damaged = "the file is damaged: re-run gpufeed pack"
    count, channels = header_field(raw, "count", int, path), header_field(raw, "channels", int, path)
    encoding, max_shape = header_field(raw, "encoding", str, path), tuple(header_field(raw, "max_shape", list, path))
    if encoding not in ENCODINGS or count < 0 or channels <= 0 or (encoding == "jpeg" and channels not in (1, 3)):
        raise FormatError(f"{path}: header has an unknown encoding {encoding!r}, or an invalid count {count} or "
                          f"channels {channels}; re-run gpufeed pack with this version of gpufeed")
    shape_ok = len(max_shape) == 3 and all(isinstance(v, int) and v >= 0 for v in max_shape)
    if raw.get("table_record") != RECORD_FIELDS or not shape_ok or max_shape[2] != channels:
        raise FormatError(f"{path}: the per-sample table's record or max_shape is not the one this gpufeed reads; "
                          f"re-run gpufeed pack")
    checksum = raw["checksum"] if isinstance(raw.get("checksum"), dict) else {}
    offsets = {name: header_field(raw, name, int, path) for name in (
        "table_offset", "table_bytes", "payload_offset", "payload_bytes", "names_offset", "names_bytes")}
    size = raw.get("size")
    header = TableHeader(
        version=TABLE_VERSION, count=count, channels=channels, encoding=encoding, quality=raw.get("quality"),
        max_side=raw.get("max_side"), size=tuple(size) if size else None, max_shape=max_shape,
        is_fixed_size=bool(header_field(raw, "fixed_size", bool, path)), passthrough=int(raw.get("passthrough", 0)),
        table_checksums=tuple(checksum.get("table", ())), names_checksums=tuple(checksum.get("names", ())),
        **offsets, **common_fields(raw, path, channels))
    if header.table_bytes != count * RECORD.itemsize or header.labels_bytes != 8 * count:
        raise FormatError(f"{path}: header sizes disagree with count {count}; {damaged}")
    ordered = (header.table_offset % ALIGNMENT == 0 and header.payload_offset % ALIGNMENT == 0
               and header.payload_offset >= header.table_offset + header.table_bytes
               and header.labels_offset >= header.payload_offset + header.payload_bytes
               and (header.names_bytes == 0 or header.names_offset >= header.labels_offset + header.labels_bytes))
    if not ordered:
        raise FormatError(f"{path}: header offsets are inconsistent; {damaged}")
    return header


@dataclass(frozen=True)
class SampleTable:
    """Where each sample lies and its size, as int64 arrays (N,). `crc32` is None for a version-1 file."""

    heights: np.ndarray
    widths: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    crc32: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def from_records(cls, records: np.ndarray) -> SampleTable:
        return cls(heights=records["height"].astype(np.int64), widths=records["width"].astype(np.int64),
                   offsets=records["offset"].astype(np.int64), lengths=records["length"].astype(np.int64),
                   crc32=records["crc32"].astype(np.int64))

    @classmethod
    def fixed(cls, count: int, shape: tuple[int, int, int]) -> SampleTable:
        """The table a version-1 file would have: `count` samples of one `shape`, back to back."""
        size = int(np.prod(shape))
        return cls(heights=np.full(count, shape[0], np.int64), widths=np.full(count, shape[1], np.int64),
                   offsets=np.arange(count, dtype=np.int64) * size, lengths=np.full(count, size, np.int64))

    def is_fixed_size(self) -> bool:
        return len(self) == 0 or bool((self.heights == self.heights[0]).all() and (self.widths == self.widths[0]).all())

    def max_shape(self, channels: int) -> tuple[int, int, int]:
        if len(self) == 0:
            return (0, 0, channels)
        return (int(self.heights.max()), int(self.widths.max()), channels)


def check_records(records: np.ndarray, payload_bytes: int, channels: int, encoding: str, path: Path) -> SampleTable:
    """Validate the records against each other and the payload; raise `FormatError` naming the first defect."""
    table = SampleTable.from_records(records)
    damaged = f"the file is damaged: re-run gpufeed pack (or gpufeed pack --verify {path.name} to find where)"
    if len(table) == 0:
        return table
    ends = table.offsets + table.lengths
    if table.offsets[0] != 0 or (table.offsets[1:] != ends[:-1]).any() or ends[-1] != payload_bytes:
        raise FormatError(f"{path}: the per-sample table's offsets do not tile the {payload_bytes}-byte payload; "
                          f"{damaged}")
    if (table.heights <= 0).any() or (table.widths <= 0).any() or (table.lengths <= 0).any():
        bad = int(np.flatnonzero((table.heights <= 0) | (table.widths <= 0) | (table.lengths <= 0))[0])
        raise FormatError(f"{path}: sample {bad} has an empty size in the per-sample table; {damaged}")
    if encoding == "raw" and (table.lengths != table.heights * table.widths * channels).any():
        bad = int(np.flatnonzero(table.lengths != table.heights * table.widths * channels)[0])
        raise FormatError(f"{path}: raw sample {bad} has {table.lengths[bad]} bytes, not height x width x channels "
                          f"= {table.heights[bad]} x {table.widths[bad]} x {channels}; {damaged}")
    return table


def read_names(path: Path, offset: int, length: int, count: int) -> list[str] | None:
    """The source names stored at `offset` (a UTF-8 JSON list of `count` strings), or None when none were stored."""
    if length == 0:
        return None
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(length)
    try:
        names = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        names = None
    if not isinstance(names, list) or len(names) != count or not all(isinstance(name, str) for name in names):
        raise FormatError(f"{path}: the stored source names are unreadable; the file is damaged: re-run gpufeed pack")
    return names


def read_table(path: Path, header: TableHeader) -> SampleTable:
    """The validated per-sample table of the version-2 file `path`, whose header is `header`."""
    records = np.fromfile(path, dtype=RECORD, count=header.count, offset=header.table_offset)
    if len(records) != header.count:
        raise FormatError(f"{path} is truncated inside its per-sample table; re-run gpufeed pack")
    table = check_records(records, header.payload_bytes, header.channels, header.encoding, path)
    if table.max_shape(header.channels) != tuple(header.max_shape) or table.is_fixed_size() != header.is_fixed_size:
        raise FormatError(f"{path}: the per-sample table disagrees with the header's max_shape or fixed_size; "
                          f"the file is damaged: re-run gpufeed pack")
    return table
