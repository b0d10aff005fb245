"""The packed dataset format (`.gpuf`), version 1: layout, header and validation.

Layout (all integers little-endian):

    offset 0       8 bytes   magic b"GPUFEED1"
    offset 8       u64       header length L in bytes
    offset 16      L bytes   UTF-8 JSON header
                   zeros     up to `images_offset` (a multiple of 4096)
    images_offset  N*H*W*C   uint8 images, C-contiguous N x H x W x C
                   zeros     up to `labels_offset` (a multiple of 4096)
    labels_offset  8*N       int64 labels

The header holds `version`, `count`, `shape` [H, W, C], `classes`, `source`, `created`, the byte offsets
and sizes, per-channel `mean` and `std` of the pixel values (0..255), and a crc32 per 64 MiB chunk of the
image and label regions. Nothing executable, no pickle.

Files are written by `PackWriter` (writer.py); `PackWriter` and `channel_sums` are also importable from here.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from gpufeed.errors import FormatError

MAGIC = b"GPUFEED1"
VERSION = 1
ALIGNMENT = 4096
CHUNK_BYTES = 64 * 1024 * 1024
PREAMBLE_BYTES = len(MAGIC) + 8
MAX_HEADER_BYTES = 64 * 1024 * 1024


def align_up(value: int, alignment: int = ALIGNMENT) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class Header:
    """The parsed, validated JSON header of a `.gpuf` file."""

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

    @property
    def bytes_per_sample(self) -> int:
        height, width, channels = self.shape
        return height * width * channels

    @property
    def file_bytes(self) -> int:
        return self.labels_offset + self.labels_bytes



def __getattr__(name: str):
    """`PackWriter` and `channel_sums`, which moved to writer.py (imported late: writer.py imports this module)."""
    if name in ("PackWriter", "channel_sums"):
        from gpufeed.data import writer

        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _field(raw: dict, name: str, kind, path: Path):
    if name not in raw or not isinstance(raw[name], kind):
        raise FormatError(f"{path}: header field '{name}' is missing or malformed; re-run gpufeed pack")
    return raw[name]


def parse_header(raw: dict, path: Path) -> Header:
    """Check the JSON header's fields and turn it into a `Header`."""
    version = _field(raw, "version", int, path)
    if version != VERSION:
        raise FormatError(f"{path} is format version {version}; this gpufeed reads version {VERSION}: "
                          f"re-pack it with this version of gpufeed pack")
    checksum = _field(raw, "checksum", dict, path)
    shape = tuple(_field(raw, "shape", list, path))
    count = _field(raw, "count", int, path)
    if len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape) or count < 0:
        raise FormatError(f"{path}: header has an invalid shape {list(shape)} or count {count}; re-run gpufeed pack")
    channels = shape[2]
    header = Header(
        version=version, count=count, shape=shape, classes=tuple(_field(raw, "classes", list, path)),
        source=str(raw.get("source", "")), created=str(raw.get("created", "")),
        images_offset=_field(raw, "images_offset", int, path), images_bytes=_field(raw, "images_bytes", int, path),
        labels_offset=_field(raw, "labels_offset", int, path), labels_bytes=_field(raw, "labels_bytes", int, path),
        checksum_algorithm=str(checksum.get("algorithm", "")), chunk_bytes=int(checksum.get("chunk_bytes", 0)),
        images_checksums=tuple(checksum.get("images", ())), labels_checksums=tuple(checksum.get("labels", ())),
        mean=tuple(raw.get("mean", [127.5] * channels)), std=tuple(raw.get("std", [127.5] * channels)),
        extra=dict(raw.get("extra", {})),
    )
    if header.images_bytes != count * header.bytes_per_sample or header.labels_bytes != 8 * count:
        raise FormatError(f"{path}: header sizes disagree with count {count} and shape {list(shape)}; "
                          f"the file is damaged: re-run gpufeed pack")
    if header.images_offset % ALIGNMENT or header.labels_offset < header.images_offset + header.images_bytes:
        raise FormatError(f"{path}: header offsets are inconsistent; the file is damaged: re-run gpufeed pack")
    return header


def read_header(path: str | os.PathLike) -> Header:
    """Read and validate the header of `path`, and check the file holds every byte it announces."""
    path = Path(path)
    if not path.exists():
        raise FormatError(f"{path} does not exist; pack a dataset first with gpufeed pack SRC {path}")
    if path.is_dir():
        raise FormatError(f"{path} is a folder; pack it first with gpufeed pack {path} OUT.gpuf")
    size = path.stat().st_size
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
    header = parse_header(raw, path)
    if size < header.file_bytes:
        expected = header.images_bytes
        found = max(0, min(size - header.images_offset, expected))
        raise FormatError(f"{path} is truncated (expected {expected} image bytes and {header.labels_bytes} label "
                          f"bytes, file ends after {found} image bytes); re-run gpufeed pack")
    return header


def verify_checksums(path: str | os.PathLike, header: Header | None = None, progress=None) -> int:
    """Recompute every chunk's crc32; raise `FormatError` naming the first bad chunk. Returns bytes checked.

    `progress`, if given, is called with the number of bytes checked after each chunk.
    """
    path = Path(path)
    header = header or read_header(path)
    if header.checksum_algorithm != "crc32":
        raise FormatError(f"{path}: unknown checksum algorithm {header.checksum_algorithm!r}; re-run gpufeed pack")
    regions = (("images", header.images_offset, header.images_bytes, header.images_checksums),
               ("labels", header.labels_offset, header.labels_bytes, header.labels_checksums))
    checked = 0
    with open(path, "rb") as handle:
        for name, offset, length, expected in regions:
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
    return checked
