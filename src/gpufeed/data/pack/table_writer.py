"""The version-2 `.gpuf` writer: `TableWriter` streams samples of any size, stored as raw pixels or as JPEG
files, into a file with a per-sample table (layout in format/layout.py, the table's record in format/table.py).

It reserves room for the header and for a table of `max_count` records, writes each sample's stored bytes to
the payload as it arrives and fills its record in memory (28 bytes a sample, plus 8 for its label and its
name when names are kept), then writes the table, the labels, the names and last the header. Like
`PackWriter` it is a `StreamedFile` (writer.py): a temporary file beside the destination, renamed into place
at the end, so an error or a killed process leaves nothing at the destination.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import zlib
from pathlib import Path

import numpy as np

from gpufeed.data.format.layout import CHUNK_BYTES, ENCODINGS, PREAMBLE_BYTES, TABLE_VERSION, align_up
from gpufeed.data.format.statistics import channel_sums, mean_and_std
from gpufeed.data.format.table import RECORD, RECORD_FIELDS
from gpufeed.data.pack.writer import StreamedFile, chunk_checksums, within_room
from gpufeed.errors import ConfigError

NAME_BOUND_BYTES = 6 * 4096 + 3  # one name in the JSON list at most: a 4096-byte path, every byte escaped


def _header_room(max_count: int, named: bool, fixed_text: int) -> int:
    """Bytes reserved for the JSON header: its fixed fields plus the checksums of the largest regions possible."""
    regions = (max_count * RECORD.itemsize, max_count * 8, max_count * NAME_BOUND_BYTES if named else 0)
    chunks = sum(size // CHUNK_BYTES + 1 for size in regions)
    return align_up(PREAMBLE_BYTES + 4096 + fixed_text + 12 * chunks)


class TableWriter(StreamedFile):
    """Stream samples (stored bytes, height, width) and their labels into a version-2 `.gpuf` file.

    Use as a context manager, like `PackWriter`. `append` takes one sample's stored bytes: raw uint8
    H x W x C row-major, or one JPEG file (`encoding` "jpeg"). `max_count` bounds how many samples may be
    appended (it sizes the table's room); fewer is fine. `named` keeps a source name per sample. `set_classes`
    renames the classes before the end, within the room the names given here take.
    """

    def __init__(self, destination: str | os.PathLike, channels: int, classes, max_count: int, encoding: str,
                 quality: int | None = None, max_side: int | None = None, size: tuple[int, int] | None = None,
                 source: str = "", extra: dict | None = None, named: bool = False):
        if encoding not in ENCODINGS:
            raise ConfigError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
        if channels <= 0 or (encoding == "jpeg" and channels not in (1, 3)):
            raise ConfigError(f"{encoding} samples need 1 or 3 channels{'' if encoding == 'jpeg' else ' or more'}, "
                              f"got {channels}")
        self.destination = Path(destination)
        if not self.destination.parent.is_dir():
            raise ConfigError(f"cannot write {self.destination}: folder {self.destination.parent} does not exist")
        self.channels, self.encoding, self.max_count = int(channels), encoding, int(max_count)
        self.fields = {"classes": [str(name) for name in classes], "source": source, "encoding": encoding,
                       "quality": quality, "max_side": max_side, "size": list(size) if size else None,
                       **({"extra": dict(extra)} if extra else {})}
        self.count, self.passthrough, self.payload_bytes = 0, 0, 0
        self._records = np.zeros(self.max_count, RECORD)
        self._labels = np.zeros(self.max_count, "<i8")
        self._names: list[str] | None = [] if named else None
        self._sum = np.zeros(self.channels, np.uint64)
        self._sum_squares = np.zeros(self.channels, np.uint64)
        self._pixels = 0
        fixed_text = len(json.dumps(self.fields)) + 64 * self.channels
        self._classes_room = len(json.dumps(self.fields["classes"]))
        self._table_offset = _header_room(self.max_count, named, fixed_text)
        self._payload_offset = align_up(self._table_offset + self.max_count * RECORD.itemsize)
        super().__init__(self.destination, self._payload_offset)

    def set_classes(self, classes) -> None:
        """Name the classes now (a writer that learns them only from the labels gives placeholders at first)."""
        self.fields["classes"] = list(within_room(classes, self._classes_room))

    def append(self, data: bytes | memoryview | np.ndarray, height: int, width: int, label: int,
               crc32: int | None = None, sums: tuple[np.ndarray, np.ndarray] | None = None,
               name: str | None = None, passthrough: bool = False) -> None:
        """Write one sample. `crc32` of `data` and `sums` (per-channel sum and sum of squares of its pixels, as
        `channel_sums` gives them) are computed here when not given; a JPEG sample needs its `sums`."""
        view = memoryview(data).cast("B")
        if self.count >= self.max_count:
            raise ConfigError(f"more than max_count={self.max_count} samples appended")
        if self.encoding == "raw" and len(view) != height * width * self.channels:
            raise ConfigError(f"a raw sample of {height} x {width} x {self.channels} needs "
                              f"{height * width * self.channels} bytes, got {len(view)}")
        if sums is None:
            if self.encoding != "raw":
                raise ConfigError("a JPEG sample needs the channel sums of the pixels it encodes")
            sums = channel_sums(np.frombuffer(view, np.uint8).reshape(1, -1, self.channels))
        if (self._names is None) != (name is None):
            raise ConfigError("give every sample a name when the writer keeps names, and none otherwise")
        self._handle.write(view)
        self._records[self.count] = (self.payload_bytes, len(view), height, width,
                                     zlib.crc32(view) if crc32 is None else crc32)
        self._labels[self.count] = label
        if self._names is not None:
            self._names.append(name)
        self._sum += np.asarray(sums[0], np.uint64)
        self._sum_squares += np.asarray(sums[1], np.uint64)
        self._pixels += height * width
        self.payload_bytes += len(view)
        self.passthrough += bool(passthrough)
        self.count += 1

    def _shapes(self) -> tuple[list[int], bool]:
        records = self._records[:self.count]
        if not self.count:
            return [0, 0, self.channels], True
        heights, widths = records["height"], records["width"]
        fixed = bool((heights == heights[0]).all() and (widths == widths[0]).all())
        return [int(heights.max()), int(widths.max()), self.channels], fixed

    def _finish(self) -> None:
        handle, count = self._handle, self.count
        records, labels = self._records[:count], self._labels[:count]
        names = b"" if self._names is None else json.dumps(self._names).encode("utf-8")
        labels_offset = align_up(self._payload_offset + self.payload_bytes)
        names_offset = align_up(labels_offset + labels.nbytes) if names else 0
        handle.seek(labels_offset)
        handle.write(memoryview(labels).cast("B"))
        if names:
            handle.seek(names_offset)
            handle.write(names)
        handle.seek(self._table_offset)
        handle.write(memoryview(records).cast("B"))
        max_shape, fixed = self._shapes()
        mean, std = mean_and_std(self._sum, self._sum_squares, self._pixels)
        header = {
            "version": TABLE_VERSION, "count": count, "channels": self.channels, **self.fields,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "max_shape": max_shape, "fixed_size": fixed, "passthrough": self.passthrough,
            "table_record": RECORD_FIELDS, "table_offset": self._table_offset, "table_bytes": records.nbytes,
            "payload_offset": self._payload_offset, "payload_bytes": self.payload_bytes,
            "labels_offset": labels_offset, "labels_bytes": labels.nbytes,
            "names_offset": names_offset, "names_bytes": len(names),
            "checksum": {"algorithm": "crc32", "chunk_bytes": CHUNK_BYTES, "table": chunk_checksums(records),
                         "labels": chunk_checksums(labels), "names": chunk_checksums(names)},
            "mean": mean, "std": std,
        }
        self._close_with_header(header, self._table_offset,
                                max(labels_offset + labels.nbytes, names_offset + len(names)))
