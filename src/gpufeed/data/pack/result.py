"""What a pack wrote (`PackResult`, `SkippedFile`), and the check every writer makes of its destination.

Shared by the writers in `sources.py` (arrays, `.npz`, built-in) and `folder.py` (a folder of images).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufeed.data.format.header import read_header
from gpufeed.errors import ConfigError

Progress = Callable[[int, int], None]

@dataclass(frozen=True)
class SkippedFile:
    """A file left out of the pack, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class PackResult:
    """What a pack wrote. `shape` is (H, W, C), or None when the images differ in size (`max_shape` is then the
    largest height and width); `seconds` is wall time; `bytes_written` the file's size.

    `resized` counts images resampled or cropped (to `--size`, or down to `--max-side`); `converted` images
    whose mode changed; `passthrough` JPEG sources stored byte for byte. `version` is the format's (format/layout.py),
    `encoding` "raw" or "jpeg", `quality` JPEG's (else None), `max_side` the limit given (else None).
    """

    destination: Path
    count: int
    shape: tuple[int, int, int] | None
    classes: tuple[str, ...]
    source: str
    bytes_written: int
    seconds: float
    skipped: list[SkippedFile] = field(default_factory=list)
    resized: int = 0
    converted: int = 0
    version: int = 1
    encoding: str = "raw"
    quality: int | None = None
    max_side: int | None = None
    max_shape: tuple[int, int, int] | None = None
    passthrough: int = 0

    @property
    def images_per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")


def check_destination(destination: str | os.PathLike) -> Path:
    """The destination as a Path; it must end in `.gpuf` and must not be a folder."""
    path = Path(destination).expanduser()
    if path.suffix.lower() != ".gpuf":
        suggestion = path.with_suffix(".gpuf") if path.suffix else path.with_name(path.name + ".gpuf")
        raise ConfigError(f"OUT {destination} does not end in .gpuf; name it {suggestion}")
    if path.is_dir():
        raise ConfigError(f"OUT {destination} is a folder; give a file name such as {path / 'train.gpuf'}")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write {destination}: folder {path.parent} does not exist; create it first")
    return path


def result_for(destination: Path, count: int, shape, classes, source: str, started: float,
               **counts) -> PackResult:
    """The `PackResult` of a finished pack that began at `started` (a `time.perf_counter()` reading)."""
    shape = None if shape is None else tuple(int(v) for v in shape)
    counts.setdefault("max_shape", shape)
    return PackResult(destination=destination, count=count, shape=shape, classes=tuple(classes), source=source,
                      bytes_written=destination.stat().st_size, seconds=time.perf_counter() - started, **counts)


def table_fields(destination: Path) -> tuple[tuple[int, int, int] | None, dict]:
    """The shape (None when sizes differ) and the `PackResult` fields of the version-2 file just written."""
    header = read_header(destination)
    return (header.max_shape if header.is_fixed_size else None,
            dict(version=header.version, encoding=header.encoding, quality=header.quality, max_side=header.max_side,
                 max_shape=tuple(header.max_shape), passthrough=header.passthrough))
