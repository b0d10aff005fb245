"""Version 1 of the `.gpuf` format (layout in layout.py): its header (`Header`, one shape for every sample), and
`read_header`, which reads and validates the header of a file of either version (version 2's is in table.py).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from gpufeed.data.format.layout import (
    ALIGNMENT,
    MAGIC,
    MAX_HEADER_BYTES,
    PREAMBLE_BYTES,
    TABLE_VERSION,
    VERSION,
    common_fields,
    header_field,
)
from gpufeed.data.format.table import TableHeader, parse_table_header
from gpufeed.errors import FormatError


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


IMAGE_SIZES_SAMPLED = 64  # image files whose sizes are read to tell a folder of photos from one of fixed size


def _sizes_vary(folder: Path) -> bool:
    """Whether the first IMAGE_SIZES_SAMPLED images in the folder's class subfolders differ in size (headers
    only); True when none can be read, since the photo recipe packs any images."""
    from PIL import Image

    sizes, read = set(), 0
    for path in sorted(folder.glob("*/*"))[:4 * IMAGE_SIZES_SAMPLED]:
        try:
            with Image.open(path) as image:
                sizes.add(image.size)
        except (OSError, ValueError):
            continue
        read += 1
        if len(sizes) > 1 or read == IMAGE_SIZES_SAMPLED:
            break
    return len(sizes) != 1


def folder_error(folder: Path) -> FormatError:
    """A folder given where a packed file belongs: the pack to make and how to read it, fit for the folder (its
    images' sizes vary: pack at a max side, train on random-resized crops; else as they are)."""
    out = f"{str(folder).rstrip('/')}.gpuf"
    if _sizes_vary(folder):
        library = (f"gpufeed.pack({str(folder)!r}, {out!r}, max_side=256), then Feed({out!r}, batch_size, "
                   f"augment='random-resized-crop', image_size=224)")
        command = f"gpufeed pack {folder} {out} --max-side 256, then gpufeed train --data {out} --image-size 224"
    else:
        library = f"gpufeed.pack({str(folder)!r}, {out!r}), then Feed({out!r}, batch_size)"
        command = f"gpufeed pack {folder} {out}, then gpufeed train --data {out}"
    return FormatError(f"{folder} is a folder, not a packed dataset; pack it first: {library}",
                       command_line=f"{folder} is a folder, not a packed dataset; pack it first: {command}")


def read_header(path: str | os.PathLike) -> Header | TableHeader:
    """Read and validate the header of `path` (either version), and check the file holds every byte it announces."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path} does not exist; pack a dataset first with gpufeed pack SRC {path}")
    if path.is_dir():
        raise folder_error(path)
    size = path.stat().st_size
    raw = _read_json(path, size)
    version = header_field(raw, "version", int, path)
    if version not in (VERSION, TABLE_VERSION):
        raise FormatError(f"{path} is format version {version}; this gpufeed reads versions {VERSION} and "
                          f"{TABLE_VERSION}: re-pack it with this version of gpufeed pack")
    if version == VERSION:
        header = parse_header(raw, path)
    else:
        header = parse_table_header(raw, path)
    if size < header.file_bytes:
        kind, offset, expected = (("image", header.images_offset, header.images_bytes) if version == VERSION
                                  else ("payload", header.payload_offset, header.payload_bytes))
        found = max(0, min(size - offset, expected))
        raise FormatError(f"{path} is truncated (expected {expected} {kind} bytes and {header.labels_bytes} label "
                          f"bytes, file ends after {found} {kind} bytes); re-run gpufeed pack")
    return header
