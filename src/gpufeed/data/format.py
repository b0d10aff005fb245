"""The packed dataset format (`.gpuf`), versions 1 and 2: layouts, headers and validation.

Both versions begin alike (all integers little-endian); the header's `version` tells them apart:

    offset 0        8 bytes   magic b"GPUFEED1" (both versions)
    offset 8        u64       header length L in bytes
    offset 16       L bytes   UTF-8 JSON header, then zeros up to the first region (a multiple of 4096)

Version 1, every sample one shape H x W x C (`PackWriter`, writer.py):

    images_offset   N*H*W*C   uint8 images, C-contiguous N x H x W x C
                    zeros     up to `labels_offset` (a multiple of 4096)
    labels_offset   8*N       int64 labels

Version 2, a per-sample table: samples may differ in size and may be JPEG files (`TableWriter`, table_writer.py;
parsed in table.py):

    table_offset    28*N      the per-sample table (table.py): offset u64, length u64, height u32, width u32,
                              crc32 u32 per sample; then zeros up to `payload_offset` (the writer reserves
                              room for the most samples the pack could hold: skipped files leave zeros)
    payload_offset  P         every sample's stored bytes, in table order with no gaps: raw uint8 H*W*C row-major
                              (`encoding` "raw") or one complete JPEG file each ("jpeg")
                    zeros     up to `labels_offset`
    labels_offset   8*N       int64 labels
                    zeros     up to `names_offset` (only when names are stored)
    names_offset    S         UTF-8 JSON list of each sample's source path, relative to the packed folder
                              (`names_bytes` 0: no names, as for arrays and the built-in set)

Every region starts at a multiple of 4096. Both headers hold `version`, `count`, `classes`, `source`, `created`,
the regions' byte offsets and sizes, per-channel `mean` and `std` of the pixel values (0..255) and a crc32 per
64 MiB chunk of each region (version 2: table, labels, names; its payload is covered by each sample's crc32).
Version 1 adds `shape` [H, W, C]. Version 2 adds `channels`, `encoding`, `quality` (JPEG, else null), `max_side`
and `size` (the packing limits, or null), `max_shape` [H, W, C], `fixed_size`, `passthrough` (JPEG sources
stored byte for byte) and `table_record` (the record's fields); its `mean` and `std` are those of the pixels
given to the JPEG encoder (a passthrough file's decoded pixels). Nothing executable, no pickle.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpufeed.errors import ConfigError, FormatError

if TYPE_CHECKING:
    from gpufeed.data.table import TableHeader

MAGIC = b"GPUFEED1"
VERSION = 1  # the fixed-size layout
TABLE_VERSION = 2  # the per-sample-table layout
ENCODINGS = ("raw", "jpeg")
ALIGNMENT = 4096
CHUNK_BYTES = 64 * 1024 * 1024
PREAMBLE_BYTES = len(MAGIC) + 8
MAX_HEADER_BYTES = 64 * 1024 * 1024


def align_up(value: int, alignment: int = ALIGNMENT) -> int:
    return (value + alignment - 1) // alignment * alignment


def variable_size_error(where: str, max_shape, why: str) -> ConfigError:
    height, width, _ = max_shape
    return ConfigError(f"{where} holds images of different sizes (up to {height}x{width}); {why} needs one fixed "
                       f"size: re-pack with --size H W, or read each sample's size from the per-sample table")


@dataclass(frozen=True)
class Header:
    """The parsed, validated JSON header of a version-1 `.gpuf` file (one shape for every sample)."""

    version: int
    count: int
    shape: tuple[int, int, int]
    classes: tuple[str, ...]
    source: str
    created: str
    images_offset: int
    images_bytes: int
    labels_offset: int
    labels_bytes: int
    checksum_algorithm: str
    chunk_bytes: int
    images_checksums: tuple[int, ...]
    labels_checksums: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    extra: dict
    encoding = "raw"
    variable = False  # samples are reached through `shape`, not a per-sample table
    is_fixed_size = True

    @property
    def bytes_per_sample(self) -> int:
        height, width, channels = self.shape
        return height * width * channels

    @property
    def stored_bytes_per_sample(self) -> float:
        return float(self.bytes_per_sample)

    @property
    def channels(self) -> int:
        return self.shape[2]

    @property
    def max_shape(self) -> tuple[int, int, int]:
        return self.shape

    @property
    def file_bytes(self) -> int:
        return self.labels_offset + self.labels_bytes

    @property
    def checked_bytes(self) -> int:
        return self.images_bytes + self.labels_bytes

    def chunked_regions(self) -> list[tuple[str, int, int, tuple[int, ...]]]:
        return [("images", self.images_offset, self.images_bytes, self.images_checksums),
                ("labels", self.labels_offset, self.labels_bytes, self.labels_checksums)]


def header_field(raw: dict, name: str, kind, path: Path):
    if name not in raw or not isinstance(raw[name], kind) or (kind is int and isinstance(raw[name], bool)):
        raise FormatError(f"{path}: header field '{name}' is missing or malformed; re-run gpufeed pack")
    return raw[name]


def common_fields(raw: dict, path: Path, channels: int) -> dict:
    """The fields both versions share."""
    checksum = header_field(raw, "checksum", dict, path)
    return dict(classes=tuple(header_field(raw, "classes", list, path)), source=str(raw.get("source", "")),
                created=str(raw.get("created", "")), labels_offset=header_field(raw, "labels_offset", int, path),
                labels_bytes=header_field(raw, "labels_bytes", int, path),
                checksum_algorithm=str(checksum.get("algorithm", "")), chunk_bytes=int(checksum.get("chunk_bytes", 0)),
                labels_checksums=tuple(checksum.get("labels", ())), mean=tuple(raw.get("mean", [127.5] * channels)),
                std=tuple(raw.get("std", [127.5] * channels)), extra=dict(raw.get("extra", {})))


def parse_header(raw: dict, path: Path) -> Header:
    """Check a version-1 JSON header's fields and turn it into a `Header`."""
    shape = tuple(header_field(raw, "shape", list, path))
    count = header_field(raw, "count", int, path)
    if len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape) or count < 0:
        raise FormatError(f"{path}: header has an invalid shape {list(shape)} or count {count}; re-run gpufeed pack")
    checksum = raw["checksum"] if isinstance(raw.get("checksum"), dict) else {}
    header = Header(version=VERSION, count=count, shape=shape,
                    images_offset=header_field(raw, "images_offset", int, path),
                    images_bytes=header_field(raw, "images_bytes", int, path),
                    images_checksums=tuple(checksum.get("images", ())), **common_fields(raw, path, shape[2]))
    if header.images_bytes != count * header.bytes_per_sample or header.labels_bytes != 8 * count:
        raise FormatError(f"{path}: header sizes disagree with count {count} and shape {list(shape)}; "
                          f"the file is damaged: re-run gpufeed pack")
    if header.images_offset % ALIGNMENT or header.labels_offset < header.images_offset + header.images_bytes:
        raise FormatError(f"{path}: header offsets are inconsistent; the file is damaged: re-run gpufeed pack")
    return header


def _read_json(path: Path, size: int) -> dict:
    with open(path, "rb") as handle:
        preamble = handle.read(PREAMBLE_BYTES)
        if len(preamble) < PREAMBLE_BYTES or preamble[:8] != MAGIC:
            raise FormatError(f"{path} is not a gpufeed packed dataset (no GPUFEED1 magic); "
                              f"make one with gpufeed pack SRC {path.name}")
        (length,) = struct.unpack("<Q", preamble[8:])
        if length > MAX_HEADER_BYTES or PREAMBLE_BYTES + length > size:
            raise FormatError(f"{path} is truncated or damaged (header of {length} bytes, file of {size}); "
                              f"re-run gpufeed pack")
        try:
            raw = json.loads(handle.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise FormatError(f"{path} has an unreadable header ({error}); re-run gpufeed pack") from None
    if not isinstance(raw, dict):
        raise FormatError(f"{path} has an unreadable header (not an object); re-run gpufeed pack")
    return raw


def read_header(path: str | os.PathLike) -> Header | TableHeader:
    """Read and validate the header of `path` (either version), and check the file holds every byte it announces."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path} does not exist; pack a dataset first with gpufeed pack SRC {path}")
    if path.is_dir():
        raise FormatError(f"{path} is a folder; pack it first with gpufeed pack {path} OUT.gpuf")
    size = path.stat().st_size
    raw = _read_json(path, size)
    version = header_field(raw, "version", int, path)
    if version not in (VERSION, TABLE_VERSION):
        raise FormatError(f"{path} is format version {version}; this gpufeed reads versions {VERSION} and "
                          f"{TABLE_VERSION}: re-pack it with this version of gpufeed pack")
    if version == VERSION:
        header = parse_header(raw, path)
    else:
        from gpufeed.data.table import parse_table_header  # imported late: table.py builds on this module

        header = parse_table_header(raw, path)
    if size < header.file_bytes:
        kind, offset, expected = (("image", header.images_offset, header.images_bytes) if version == VERSION
                                  else ("payload", header.payload_offset, header.payload_bytes))
        found = max(0, min(size - offset, expected))
        raise FormatError(f"{path} is truncated (expected {expected} {kind} bytes and {header.labels_bytes} label "
                          f"bytes, file ends after {found} {kind} bytes); re-run gpufeed pack")
    return header


def verify_checksums(path: str | os.PathLike, header: Header | TableHeader | None = None, progress=None) -> int:
    """Recompute every crc32; raise `FormatError` naming the first bad chunk. Returns bytes checked.

    For a version-2 file every sample's crc32 is recomputed too, and a `DamagedSamplesError` (table.py) names
    every damaged sample. `progress`, if given, is called with the number of bytes checked so far.
    """
    path = Path(path)
    header = header or read_header(path)
    if header.checksum_algorithm != "crc32":
        raise FormatError(f"{path}: unknown checksum algorithm {header.checksum_algorithm!r}; re-run gpufeed pack")
    checked = 0
    with open(path, "rb") as handle:
        for name, offset, length, expected in header.chunked_regions():
            chunks = (length + header.chunk_bytes - 1) // header.chunk_bytes
            if len(expected) != chunks:
                raise FormatError(f"{path}: {len(expected)} {name} checksums for {chunks} chunks; re-run gpufeed pack")
            handle.seek(offset)
            for index, value in enumerate(expected):
                data = handle.read(min(header.chunk_bytes, length - index * header.chunk_bytes))
                if zlib.crc32(data) != value:
                    start = offset + index * header.chunk_bytes
                    raise FormatError(f"{path}: checksum mismatch in {name} chunk {index} (bytes {start}.."
                                      f"{start + len(data)}); the file is corrupt: re-run gpufeed pack")
                checked += len(data)
                if progress is not None:
                    progress(checked)
    if header.variable:
        from gpufeed.data.table import verify_samples  # imported late: table.py builds on this module

        checked += verify_samples(path, header, None if progress is None else lambda done: progress(checked + done))
    return checked
