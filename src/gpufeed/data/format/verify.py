"""Verify a `.gpuf` file (either version) byte for byte: the crc32 of every 64 MiB chunk of each region, and for
version 2 the crc32 of every sample, naming each damaged one (`DamagedSamplesError`).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.data.format.header import Header, read_header
from gpufeed.data.format.table import SampleTable, TableHeader, read_names, read_table
from gpufeed.errors import FormatError

DAMAGED_SHOWN = 5  # damaged samples named in an error message; the error object holds them all
PROGRESS_BYTES = 64 * 1024 * 1024


def verify_checksums(path: str | os.PathLike, header: Header | TableHeader | None = None, progress=None) -> int:
    """Recompute every crc32; raise `FormatError` naming the first bad chunk. Returns bytes checked.

    For a version-2 file every sample's crc32 is recomputed too, and a `DamagedSamplesError` names
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
        checked += verify_samples(path, header, None if progress is None else lambda done: progress(checked + done))
    return checked


@dataclass(frozen=True)
class DamagedSample:
    """A sample whose stored bytes fail their crc32: its index, its source name (when stored), both checksums."""

    index: int
    name: str | None
    expected_crc32: int
    found_crc32: int


class DamagedSamplesError(FormatError):
    """Samples whose stored bytes fail their crc32; `damaged` lists every one of them."""

    def __init__(self, path: Path, damaged: list[DamagedSample], count: int):
        self.path, self.damaged = path, tuple(damaged)
        shown = ", ".join(f"sample {item.index}" + (f" ({item.name})" if item.name is not None else "")
                          for item in damaged[:DAMAGED_SHOWN])
        more = f" and {len(damaged) - DAMAGED_SHOWN} more" if len(damaged) > DAMAGED_SHOWN else ""
        super().__init__(f"{path}: {len(damaged)} of {count} samples are damaged (their stored bytes fail their "
                         f"crc32): {shown}{more}; the file is corrupt: re-run gpufeed pack")


def damaged_samples(payload: np.ndarray, table: SampleTable,
                    progress: Callable[[int], None] | None = None) -> list[DamagedSample]:
    """Recompute each sample's crc32 over `payload` (1-D uint8); return those that differ from the table's.

    `progress(bytes_checked)` is called about every 64 MiB.
    """
    damaged, reported = [], 0
    for index, (offset, length, expected) in enumerate(zip(table.offsets.tolist(), table.lengths.tolist(),
                                                           table.crc32.tolist(), strict=True)):
        found = zlib.crc32(payload[offset:offset + length])
        if found != expected:
            damaged.append(DamagedSample(index, None, int(expected), found))
        if progress is not None and offset + length - reported >= PROGRESS_BYTES:
            reported = offset + length
            progress(reported)
    if progress is not None and len(table):
        progress(int(table.offsets[-1] + table.lengths[-1]))
    return damaged


def verify_samples(path: Path, header: TableHeader, progress: Callable[[int], None] | None = None) -> int:
    """Recompute every sample's crc32; raise `DamagedSamplesError` naming each damaged one. Returns bytes checked."""
    table = read_table(path, header)
    if header.payload_bytes == 0:
        return 0
    payload = np.memmap(path, dtype=np.uint8, mode="r", offset=header.payload_offset, shape=(header.payload_bytes,))
    damaged = damaged_samples(payload, table, progress)
    if damaged:
        names = read_names(path, header.names_offset, header.names_bytes, header.count)
        if names is not None:
            damaged = [DamagedSample(item.index, names[item.index], item.expected_crc32, item.found_crc32)
                       for item in damaged]
        raise DamagedSamplesError(path, damaged, header.count)
    return header.payload_bytes
