"""Write a `.gpuf` packed dataset from a folder of images: `pack_folder`.

A folder holds one subfolder per class (sorted names give the classes and labels 0..K-1; subfolders are
searched recursively), or only images, which then form one class named after the folder. Hidden files and
folders (names starting with ".") are ignored. Other files are skipped and reported. Images are decoded by
`images.py` (read its policies: mode, 16-bit, alpha, orientation, resize, and why worker processes are
spawned) a bounded number of files at a time, and written in file order, so memory stays bounded for
folders bigger than RAM. Without `max_side` or `encoding` every image must have one size (or `size` makes it
so) and `PackWriter` (writer.py) writes a version-1 file; with either, `encode.py` stores each image at its own
size (read its policies: scaling, JPEG, passthrough) and `TableWriter` (table_writer.py) writes a version-2
file that keeps each sample's source path. An error, a strict failure or a killed process leaves nothing at
the destination.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.data.pack.encode import Stored, StoreOptions, store_files, store_options
from gpufeed.data.pack.images import (
    CHUNKS_IN_FLIGHT_PER_WORKER,
    FILES_PER_CHUNK,
    IMAGE_EXTENSIONS,
    Decoded,
    decode_files,
    decode_stream,
    default_workers,
    files_per_chunk,
    list_folder,
    read_size,
)
from gpufeed.data.pack.result import PackResult, Progress, SkippedFile, check_destination, result_for, table_fields
from gpufeed.data.pack.table_writer import TableWriter
from gpufeed.data.pack.writer import PackWriter
from gpufeed.errors import ConfigError, RunFailed

MISMATCH_SCAN_FILES = 10_000  # file headers read to count how many images differ in size
RESIZE_POLICY = "scale to cover (bilinear), centre crop"
MAX_SIDE_POLICY = "longer side scaled down to max_side (JPEG draft, then bilinear), never up"


def check_image_options(size, channels, workers) -> tuple[tuple[int, int] | None, int]:
    """`size` as (height, width) or None, and `channels`, checked with `workers` (a folder's or a Dataset's)."""
    if size is not None:
        size = tuple(size)
        if len(size) != 2 or not all(isinstance(v, (int, np.integer)) and v > 0 for v in size):
            raise ConfigError(f"size must be two positive whole numbers (height, width), got {size}")
        size = (int(size[0]), int(size[1]))
    if channels not in (1, 3):
        raise ConfigError(f"channels must be 1 (greyscale) or 3 (RGB), got {channels!r}")
    if workers is not None and (not isinstance(workers, (int, np.integer)) or workers < 0):
        raise ConfigError(f"workers must be 0 (decode in this process) or more, got {workers!r}")
    return size, channels


def _size_mismatch(folder: Path, files: list[str], first: int, other: int, reference, found) -> ConfigError:
    """The error for images of different sizes, with a count from the headers of the files after `other`."""
    checked = files[other + 1:other + 1 + MISMATCH_SCAN_FILES]
    sizes = [read_size(path) for path in checked]
    differ = 1 + sum(1 for value in sizes if value is not None and value != tuple(reference))
    total = other + 1 + len(checked)
    scope = f"of the {total} images" if total == len(files) else f"of the first {total} images"
    (height, width), (other_height, other_width) = reference, found
    return ConfigError(
        f"{folder}: images differ in size and no --size was given: {files[first]} is {height}x{width} "
        f"(height x width) but {files[other]} is {other_height}x{other_width}; {differ} {scope} differ from "
        f"{height}x{width}. Pass --size H W (for example --size {height} {width}) to scale and centre-crop "
        f"every image to one size, or --max-side N to keep each image's own aspect ratio")


@dataclass
class _Tally:
    skipped: list[SkippedFile]
    converted: int = 0
    resized: int = 0
    passthrough: int = 0
    first_good: int = -1


def _take(decoded: Decoded | Stored, index: int, files: list[str], tally: _Tally, strict: bool) -> bool:
    """Count one decoded file; False when it is bad (and skipped), raise if `strict`."""
    if decoded.reason is not None:
        if strict:
            raise ConfigError(f"{files[index]}: {decoded.reason}; fix or remove the file, or pack without "
                              f"--strict to skip bad files")
        tally.skipped.append(SkippedFile(files[index], decoded.reason))
        return False
    tally.converted += decoded.converted
    tally.resized += decoded.resized
    return True


def _write_folder(folder: Path, listing, destination: Path, size, channels: int, strict: bool,
                  workers: int, tally: _Tally, progress: Progress | None) -> tuple[int, tuple[int, int, int]]:
    """Decode the listed files and write the good ones in order; return the count and the image shape."""
    files, total = listing.files, len(listing.files)
    per_chunk = files_per_chunk(files, size, channels, workers)
    extra = {"size": list(size) if size else None, "channels": channels, "resize": RESIZE_POLICY}
    shape, writer, done = None, None, 0
    work = functools.partial(decode_files, size=size, channels=channels)
    with contextlib.ExitStack() as stack:
        stream = decode_stream(files, work, workers, per_chunk, CHUNKS_IN_FLIGHT_PER_WORKER * workers)
        stack.callback(stream.close)
        for results in stream:
            images, labels = [], []
            for index, decoded in enumerate(results, start=done):
                if not _take(decoded, index, files, tally, strict):
                    continue
                if writer is None:
                    shape, tally.first_good = decoded.pixels.shape, index
                    writer = stack.enter_context(PackWriter(destination, shape, listing.classes, total,
                                                            source=str(folder), extra=extra))
                elif decoded.pixels.shape != shape:
                    raise _size_mismatch(folder, files, tally.first_good, index, shape[:2], decoded.size)
                images.append(decoded.pixels)
                labels.append(listing.labels[index])
            if images:
                writer.append(np.stack(images), np.asarray(labels, np.int64))
            done += len(results)
            if progress is not None:
                progress(done, total)
        count = writer.count if writer is not None else 0
    return count, shape


def _write_table(folder: Path, listing, destination: Path, options: StoreOptions, strict: bool, workers: int,
                 tally: _Tally, progress: Progress | None) -> int:
    """Store the listed files at their own sizes and write the good ones in order, with their source paths."""
    files, total = listing.files, len(listing.files)
    largest = (options.max_side, options.max_side) if options.max_side else options.size
    per_chunk = files_per_chunk(files, largest, options.channels, workers)
    prefix = os.path.join(str(folder), "")
    policy = MAX_SIDE_POLICY if options.max_side else (RESIZE_POLICY if options.size else "none: each image's size")
    done = 0
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(TableWriter(
            destination, options.channels, listing.classes, total, options.encoding,
            quality=options.quality if options.encoding == "jpeg" else None, max_side=options.max_side,
            size=options.size, source=str(folder), extra={"resize": policy}, named=True))
        stream = decode_stream(files, functools.partial(store_files, options=options), workers, per_chunk,
                               CHUNKS_IN_FLIGHT_PER_WORKER * workers)
        stack.callback(stream.close)
        for results in stream:
            for index, stored in enumerate(results, start=done):
                if not _take(stored, index, files, tally, strict):
                    continue
                name = files[index][len(prefix):] if files[index].startswith(prefix) else files[index]
                writer.append(stored.data, stored.height, stored.width, int(listing.labels[index]),
                              crc32=stored.crc32, sums=stored.sums, name=name, passthrough=stored.passthrough)
                tally.passthrough += stored.passthrough
            done += len(results)
            if progress is not None:
                progress(done, total)
        if writer.count == 0:  # raised inside, so the writer discards its temporary file
            raise _nothing_decoded(folder, listing, tally)
        return writer.count


def _nothing_decoded(folder: Path, listing, tally: _Tally) -> ConfigError:
    first = tally.skipped[0] if tally.skipped else SkippedFile(str(folder), "no images")
    return ConfigError(f"none of the {len(listing.files)} images in {folder} could be decoded "
                       f"(first: {first.path}: {first.reason}); check the files")


def _listing(folder: Path, destination: Path, strict: bool):
    """The folder's images and classes, and the tally that starts with its files that are not images."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; give a folder with one subfolder of images per class")
    try:
        listing = list_folder(str(folder), exclude=os.path.abspath(destination))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    except OSError as error:
        raise ConfigError(f"cannot list {folder} ({error}); check that it is readable") from None
    tally = _Tally(skipped=[SkippedFile(path, reason) for path, reason in listing.not_images])
    if not listing.files:
        raise ConfigError(f"{folder} holds no images (looked for {', '.join(sorted(IMAGE_EXTENSIONS))}); "
                          f"put them in one subfolder per class")
    if strict and tally.skipped:
        raise ConfigError(f"{tally.skipped[0].path}: {tally.skipped[0].reason}; remove it, or pack without "
                          f"--strict to skip it")
    return listing, tally


def pack_folder(folder: str | os.PathLike, destination: str | os.PathLike, size: tuple[int, int] | None = None,
                channels: int = 3, strict: bool = False, workers: int | None = None,
                progress: Progress | None = None, max_side: int | None = None, encoding: str | None = None,
                quality: int | None = None) -> PackResult:
    """Pack a folder of images (one subfolder per class); see the module, `images.py` and `encode.py` for the
    policies.

    `size` (H, W) scales and centre-crops every image; without it (and without `max_side` or `encoding`) all
    images must share one size. `max_side` scales each image down so its longer side is at most that, keeping
    its aspect ratio. `encoding` "jpeg" (the default with `max_side`; `quality` 1..100, default 90) or "raw"
    writes a version-2 file (format/layout.py). `strict` makes the first bad file an error; otherwise bad files are
    skipped and listed in the result. `workers` decoding processes (default: the usable cores, or 0 for at
    most 128 files; 0 decodes in this process). `progress(done, total)` is called after each chunk of files.
    """
    started = time.perf_counter()
    destination = check_destination(destination)
    folder = Path(folder).expanduser()
    size, channels = check_image_options(size, channels, workers)
    options = store_options(encoding, quality, channels, max_side, size)
    listing, tally = _listing(folder, destination, strict)
    workers = default_workers(len(listing.files)) if workers is None else int(workers)
    workers = min(workers, -(-len(listing.files) // FILES_PER_CHUNK))
    try:
        if options is None:
            count, shape = _write_folder(folder, listing, destination, size, channels, strict, workers, tally,
                                         progress)
        else:
            count = _write_table(folder, listing, destination, options, strict, workers, tally, progress)
    except BrokenProcessPool:
        raise RunFailed(f"a decoding worker died while packing {folder} (out of memory, or a decoder crashed); "
                        f"retry with --workers 1, or --workers 0 to decode in this process. A script calling "
                        f"pack_folder needs an `if __name__ == '__main__':` guard") from None
    if count == 0:
        raise _nothing_decoded(folder, listing, tally)
    counts = dict(skipped=sorted(tally.skipped, key=lambda item: item.path), resized=tally.resized,
                  converted=tally.converted)
    if options is not None:
        shape, table = table_fields(destination)
        counts.update(table)
    return result_for(destination, count, shape, listing.classes, str(folder), started, **counts)
