"""The packed dataset format (`.gpuf`), versions 1 and 2: the layouts, their constants, and the header fields both
versions share (headers parsed in header.py and table.py, checked byte for byte in verify.py).

Both versions begin alike (all integers little-endian); the header's `version` tells them apart:

    offset 0        8 bytes   magic b"GPUFEED1" (both versions)
    offset 8        u64       header length L in bytes
    offset 16       L bytes   UTF-8 JSON header, then zeros up to the first region (a multiple of 4096)

Version 1, every sample one shape H x W x C (`PackWriter`, pack/writer.py; parsed in header.py):

    images_offset   N*H*W*C   uint8 images, C-contiguous N x H x W x C
                    zeros     up to `labels_offset` (a multiple of 4096)
    labels_offset   8*N       int64 labels

Version 2, a per-sample table: samples may differ in size and may be JPEG files (`TableWriter`,
pack/table_writer.py; parsed in table.py):

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

from pathlib import Path

from gpufeed.errors import ConfigError, FormatError

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
