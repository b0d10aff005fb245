"""The `.gpuf` writer: `PackWriter` streams images and labels into a packed dataset (layout in format/layout.py).

The writer streams: it reserves room for the header (sized for the largest possible count), writes images as
they arrive while updating the checksums and the per-channel sums (`channel_sums`), then writes the labels and
finally the header. It writes a temporary file beside the destination, fsyncs and renames it, so a killed pack
leaves nothing at the destination. `StreamedFile` is that life of the file, which `TableWriter` (table_writer.py)
shares.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from gpufeed.atomic import finish_temporary, remove_stale_temporaries, temporary_path
from gpufeed.data.format.layout import CHUNK_BYTES, MAGIC, PREAMBLE_BYTES, VERSION, align_up
from gpufeed.data.format.statistics import channel_sums, mean_and_std
from gpufeed.errors import ConfigError, FormatError


def chunk_checksums(data: memoryview | bytes | np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> list[int]:
    """The crc32 of each `chunk_bytes` piece of `data`, as the headers record them."""
    view = memoryview(data).cast("B")
    return [zlib.crc32(view[start:start + chunk_bytes]) for start in range(0, len(view), chunk_bytes)]


class _ChunkedCrc:
    """crc32 of each `chunk_bytes` piece of a byte stream that arrives in arbitrary pieces."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES):
        self.chunk_bytes = chunk_bytes
        self.values: list[int] = []
        self.current = 0
        self.filled = 0

    def update(self, data: memoryview) -> None:
        data = memoryview(data).cast("B")
        while len(data):
            take = min(len(data), self.chunk_bytes - self.filled)
            self.current = zlib.crc32(data[:take], self.current)
            self.filled += take
            data = data[take:]
            if self.filled == self.chunk_bytes:
                self.values.append(self.current)
                self.current, self.filled = 0, 0

    def finish(self) -> list[int]:
        if self.filled:
            self.values.append(self.current)
            self.current, self.filled = 0, 0
        return self.values


def _header_room(max_count: int, shape: tuple[int, int, int], classes: tuple[str, ...]) -> int:
    """Bytes reserved for the JSON header: enough for the checksums of `max_count` samples."""
    images = max_count * shape[0] * shape[1] * shape[2]
    chunks = images // CHUNK_BYTES + (max_count * 8) // CHUNK_BYTES + 4
    names = len(json.dumps(list(classes)))
    return align_up(PREAMBLE_BYTES + 4096 + names + 12 * chunks)


def within_room(classes, room: int) -> tuple[str, ...]:
    """The class names, checked to fit the `room` (bytes of their JSON list) their writer reserved."""
    names = tuple(str(name) for name in classes)
    if len(json.dumps(list(names))) > room:
        raise ConfigError(f"{len(names)} class names need more header room than was reserved for the names given "
                          f"at first ({room} bytes of JSON); give the classes when the writer is made")
    return names


class StreamedFile:
    """The life of a streamed `.gpuf` file, shared by `PackWriter` and `TableWriter` (table_writer.py).

    A temporary file beside `destination`, positioned at byte `start` on entry. On a clean exit the subclass's
    `_finish` completes the regions and calls `_close_with_header`, which writes the header into the first
    `header_room` bytes and renames the file into place; on an exception, or a failed finish, the temporary file
    is removed and the destination is untouched.
    """

    def __init__(self, destination: Path, start: int):
        self.destination, self._start = destination, start
        self._temporary = temporary_path(destination)
        self._handle = None

    def __enter__(self):
        remove_stale_temporaries(self.destination)
        self._handle = open(self._temporary, "wb")  # noqa: SIM115 - closed in __exit__
        self._handle.seek(self._start)
        return self

    def _finish(self) -> None:
        raise NotImplementedError

    def _close_with_header(self, header: dict, header_room: int, end: int) -> None:
        encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
        if PREAMBLE_BYTES + len(encoded) > header_room:
            raise FormatError(f"header of {len(encoded)} bytes overflows its reserved room; this is a bug")
        self._handle.seek(0)
        self._handle.write(MAGIC + struct.pack("<Q", len(encoded)) + encoded)
        self._handle.truncate(end)
        finish_temporary(self._handle, self._temporary, self.destination)

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            try:
                self._finish()
                return
            except BaseException:
                self._discard()
                raise
        self._discard()

    def _discard(self) -> None:
        if self._handle is not None and not self._handle.closed:
            self._handle.close()
        with contextlib.suppress(OSError):
            self._temporary.unlink()


class PackWriter(StreamedFile):
    """Stream images and labels into a version-1 `.gpuf` file.

    Use as a context manager; `append` batches of uint8 images (n, H, W, C) and int labels (n,). On a clean
    exit the file is completed and renamed into place; on an exception the temporary file is removed.
    `max_count` bounds how many samples may be appended (it sizes the header room); fewer is fine. `set_classes`
    renames the classes before the end, within the room the names given here take.
    """

    def __init__(self, destination: str | os.PathLike, shape: tuple[int, int, int], classes, max_count: int,
                 source: str = "", extra: dict | None = None):
        if len(shape) != 3 or min(shape) <= 0:
            raise ConfigError(f"image shape must be (height, width, channels) > 0, got {tuple(shape)}")
        self.destination = Path(destination)
        if not self.destination.parent.is_dir():
            raise ConfigError(f"cannot write {self.destination}: folder {self.destination.parent} does not exist")
        self.shape = tuple(int(v) for v in shape)
        self.classes = tuple(str(name) for name in classes)
        self.max_count = int(max_count)
        self.source = source
        self.extra = dict(extra or {})
        self.count = 0
        self._labels: list[np.ndarray] = []
        self._crc = _ChunkedCrc()
        self._sum = np.zeros(self.shape[2], np.float64)
        self._sum_squares = np.zeros(self.shape[2], np.float64)
        self._images_offset = _header_room(self.max_count, self.shape, self.classes)
        self._classes_room = len(json.dumps(list(self.classes)))
        super().__init__(self.destination, self._images_offset)

    def set_classes(self, classes) -> None:
        """Name the classes now (a writer that learns them only from the labels gives placeholders at first)."""
        self.classes = within_room(classes, self._classes_room)

    def append(self, images: np.ndarray, labels: np.ndarray) -> None:
        images = np.ascontiguousarray(images, dtype=np.uint8)
        if images.ndim == 3 and self.shape[2] == 1:
            images = images[..., None]
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        if images.shape[1:] != self.shape or len(images) != len(labels):
            raise ConfigError(f"batch of shape {images.shape} with {len(labels)} labels does not match "
                              f"records of shape {self.shape}")
        if self.count + len(images) > self.max_count:
            raise ConfigError(f"more than max_count={self.max_count} samples appended")
        view = memoryview(images).cast("B")
        self._handle.write(view)
        self._crc.update(view)
        total, squares = channel_sums(images)
        self._sum += total
        self._sum_squares += squares
        self._labels.append(labels.copy())
        self.count += len(images)

    def _statistics(self) -> tuple[list[float], list[float]]:
        return mean_and_std(self._sum, self._sum_squares, self.count * self.shape[0] * self.shape[1])

    def _finish(self) -> None:
        handle = self._handle
        images_bytes = self.count * int(np.prod(self.shape))
        labels_offset = align_up(self._images_offset + images_bytes)
        labels = np.concatenate(self._labels) if self._labels else np.zeros(0, np.int64)
        labels = labels.astype("<i8", copy=False)
        handle.seek(labels_offset)
        handle.write(memoryview(labels).cast("B"))
        mean, std = self._statistics()
        header = {
            "version": VERSION, "count": self.count, "shape": list(self.shape), "classes": list(self.classes),
            "source": self.source, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "images_offset": self._images_offset, "images_bytes": images_bytes,
            "labels_offset": labels_offset, "labels_bytes": labels.nbytes,
            "checksum": {"algorithm": "crc32", "chunk_bytes": CHUNK_BYTES, "images": self._crc.finish(),
                         "labels": chunk_checksums(labels, CHUNK_BYTES)},
            "mean": mean, "std": std, **({"extra": self.extra} if self.extra else {}),
        }
        self._close_with_header(header, self._images_offset, labels_offset + labels.nbytes)

