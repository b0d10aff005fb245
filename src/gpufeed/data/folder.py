"""Write a `.gpuf` packed dataset from a folder of images: `pack_folder`.

A folder holds one subfolder per class (sorted names give the classes and labels 0..K-1; subfolders are
searched recursively), or only images, which then form one class named after the folder. Hidden files and
folders (names starting with ".") are ignored. Other files are skipped and reported. Images are decoded by
`decode.py` (read its policies: mode, 16-bit, alpha, orientation, resize, and why worker processes are
spawned) a bounded number of files at a time, and written in file order, so memory stays bounded for
folders bigger than RAM. The file is written by `PackWriter` (writer.py): an error, a strict failure or a
killed process leaves nothing at the destination.
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.data.decode import (
    CHUNKS_IN_FLIGHT_PER_WORKER,
    FILES_PER_CHUNK,
    IMAGE_EXTENSIONS,
    Decoded,
    decode_stream,
    default_workers,
    files_per_chunk,
    list_folder,
    read_size,
)
from gpufeed.data.pack_result import PackResult, Progress, SkippedFile, check_destination, result_for
from gpufeed.data.writer import PackWriter
from gpufeed.errors import ConfigError, RunFailed

MISMATCH_SCAN_FILES = 10_000  # file headers read to count how many images differ in size
RESIZE_POLICY = "scale to cover (bilinear), centre crop"



def _check_folder_options(size, channels, workers) -> tuple[tuple[int, int] | None, int]:
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
        f"every image to one size")


@dataclass
class _Tally:
    skipped: list[SkippedFile]
    converted: int = 0
    resized: int = 0
    first_good: int = -1


def _take(decoded: Decoded, index: int, files: list[str], tally: _Tally, strict: bool) -> bool:
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
    with contextlib.ExitStack() as stack:
        stream = decode_stream(files, size, channels, workers, per_chunk, CHUNKS_IN_FLIGHT_PER_WORKER * workers)
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


def pack_folder(folder: str | os.PathLike, destination: str | os.PathLike, size: tuple[int, int] | None = None,
                channels: int = 3, strict: bool = False, workers: int | None = None,
                progress: Progress | None = None) -> PackResult:
    """Pack a folder of images (one subfolder per class); see the module and `decode.py` for the policies.

    `size` (H, W) scales and centre-crops every image; without it all images must share one size.
    `strict` makes the first bad file an error; otherwise bad files are skipped and listed in the result.
    `workers` decoding processes (default: the usable cores, or 0 for at most 128 files; 0 decodes in this
    process).
    `progress(done, total)` is called after each chunk of files.
    """
    started = time.perf_counter()
    destination = check_destination(destination)
    folder = Path(folder).expanduser()
    size, channels = _check_folder_options(size, channels, workers)
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
    workers = default_workers(len(listing.files)) if workers is None else int(workers)
    workers = min(workers, -(-len(listing.files) // FILES_PER_CHUNK))
    try:
        count, shape = _write_folder(folder, listing, destination, size, channels, strict, workers, tally,
                                     progress)
    except BrokenProcessPool:
        raise RunFailed(f"a decoding worker died while packing {folder} (out of memory, or a decoder crashed); "
                        f"retry with --workers 1, or --workers 0 to decode in this process. A script calling "
                        f"pack_folder needs an `if __name__ == '__main__':` guard") from None
    if count == 0:
        first = tally.skipped[0] if tally.skipped else SkippedFile(str(folder), "no images")
        raise ConfigError(f"none of the {len(listing.files)} images in {folder} could be decoded "
                          f"(first: {first.path}: {first.reason}); check the files")
    return result_for(destination, count, shape, listing.classes, str(folder), started,
                   skipped=sorted(tally.skipped, key=lambda item: item.path),
                   resized=tally.resized, converted=tally.converted)
