"""Write `.gpuf` packed datasets from arrays, a `.npz` file, the built-in dataset or a folder of images.

Every writer streams into `PackWriter` (format.py), which writes a temporary file beside the destination and
renames it at the end: an error, a strict failure or a killed process leaves nothing at the destination.

A folder holds one subfolder per class (sorted names give the classes and labels 0..K-1; subfolders are
searched recursively), or only images, which then form one class named after the folder. Hidden files and
folders (names starting with ".") are ignored. Other files are skipped and reported. Images are decoded by
`decode.py` (read its policies: mode, 16-bit, alpha, orientation, resize, and why worker processes are
spawned) a bounded number of files at a time, and written in file order, so memory stays bounded for
folders bigger than RAM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpufeed.data import builtin
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
from gpufeed.data.format import PackWriter
from gpufeed.errors import ConfigError, RunFailed

Progress = Callable[[int, int], None]

ARRAY_SLICE_BYTES = 64 * 1024 * 1024
MISMATCH_SCAN_FILES = 10_000  # file headers read to count how many images differ in size
RESIZE_POLICY = "scale to cover (bilinear), centre crop"


@dataclass(frozen=True)
class SkippedFile:
    """A file left out of the pack, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class PackResult:
    """What a pack wrote. `shape` is (H, W, C); `seconds` is wall time; `bytes_written` the file's size.

    `resized` counts images resampled or cropped to `--size`; `converted` images whose mode changed.
    """

    destination: Path
    count: int
    shape: tuple[int, int, int]
    classes: tuple[str, ...]
    source: str
    bytes_written: int
    seconds: float
    skipped: list[SkippedFile] = field(default_factory=list)
    resized: int = 0
    converted: int = 0

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


def _result(destination: Path, count: int, shape, classes, source: str, started: float, **counts) -> PackResult:
    return PackResult(destination=destination, count=count, shape=tuple(int(v) for v in shape),
                      classes=tuple(classes), source=source, bytes_written=destination.stat().st_size,
                      seconds=time.perf_counter() - started, **counts)


def _write_stream(destination: Path, shape, classes, total: int, source: str, extra: dict,
                  chunks: Iterable[tuple[np.ndarray, np.ndarray]], progress: Progress | None) -> int:
    with PackWriter(destination, shape, classes, max_count=total, source=source, extra=extra) as writer:
        for images, labels in chunks:
            writer.append(images, labels)
            if progress is not None:
                progress(writer.count, total)
    return writer.count


def _check_arrays(images, labels, classes, origin: str) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Validate images (N, H, W[, C]) uint8 and labels (N,) integers; return images as 4-D and the classes."""
    if images.dtype != np.uint8:
        raise ConfigError(f"{origin}: images must be uint8 (0..255), got {images.dtype}; convert them with "
                          f"(x * 255).round().astype(np.uint8) if they are floats in 0..1")
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or 0 in images.shape[1:]:
        raise ConfigError(f"{origin}: images must have shape (N, H, W) or (N, H, W, C), got {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(f"{origin}: labels must be N={len(images)} integers (shape ({len(images)},)), "
                          f"got shape {labels.shape} of {labels.dtype}")
    if len(images) == 0:
        raise ConfigError(f"{origin}: the arrays hold no samples; give at least one image")
    low, high = int(labels.min()), int(labels.max())
    names = tuple(str(name) for name in classes) if classes is not None else tuple(map(str, range(high + 1)))
    if low < 0 or high >= len(names):
        raise ConfigError(f"{origin}: labels must lie in 0..{len(names) - 1} (one per class), "
                          f"found {low}..{high}")
    return images, labels, names


def pack_arrays(images, labels, destination: str | os.PathLike, classes=None, source: str = "arrays",
                progress: Progress | None = None) -> PackResult:
    """Pack in-memory (or memory-mapped) arrays: images (N, H, W[, C]) uint8, labels (N,) integers.

    `classes` names the labels (default "0".."K-1"). The arrays are written a slice at a time.
    """
    started = time.perf_counter()
    destination = check_destination(destination)
    images, labels, names = _check_arrays(np.asarray(images), np.asarray(labels), classes, source)
    rows = max(1, ARRAY_SLICE_BYTES // int(np.prod(images.shape[1:])))
    slices = ((images[start:start + rows], labels[start:start + rows]) for start in range(0, len(images), rows))
    count = _write_stream(destination, images.shape[1:], names, len(images), source, {}, slices, progress)
    return _result(destination, count, images.shape[1:], names, source, started)


def pack_npz(npz_path: str | os.PathLike, destination: str | os.PathLike,
             progress: Progress | None = None) -> PackResult:
    """Pack a `.npz` archive with arrays `x` (N, H, W[, C]) uint8 and `y` (N,) integers.

    An optional array `classes` of strings names the labels. The archive is loaded into memory (numpy cannot
    memory-map a `.npz`); nothing in it is unpickled.
    """
    started = time.perf_counter()
    path = Path(npz_path).expanduser()
    how = "save one with np.savez(PATH, x=images, y=labels): x uint8 (N, H, W[, C]), y integers (N,)"
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; {how}") from None
    except (OSError, ValueError, EOFError) as error:
        raise ConfigError(f"{path} is not a readable .npz archive ({error}); {how}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ConfigError(f"{path} holds a single array, not an .npz archive; {how}")
    with archive:
        missing = [key for key in ("x", "y") if key not in archive.files]
        if missing:
            raise ConfigError(f"{path} has no array {' or '.join(map(repr, missing))} "
                              f"(it holds {', '.join(archive.files) or 'nothing'}); {how}")
        try:
            images, labels = archive["x"], archive["y"]
            classes = archive["classes"] if "classes" in archive.files else None
        except ValueError as error:  # object arrays refuse to load without pickle
            raise ConfigError(f"{path} holds Python objects ({error}); {how}") from None
    if classes is not None and (classes.ndim != 1 or classes.dtype.kind not in "US"):
        raise ConfigError(f"{path}: 'classes' must be a 1-D array of strings, got {classes.dtype} {classes.shape}; "
                          f"save it with classes=np.array(['cat', 'dog'])")
    result = pack_arrays(images, labels, destination, classes=None if classes is None else list(classes),
                         source=str(path), progress=progress)
    return dataclasses.replace(result, seconds=time.perf_counter() - started)  # the load counts too


def pack_builtin(destination: str | os.PathLike, count: int | None = None, split: str = "train", seed: int = 0,
                 progress: Progress | None = None) -> PackResult:
    """Pack `count` samples of the built-in dataset (default: the whole split), streamed in chunks."""
    started = time.perf_counter()
    destination = check_destination(destination)
    if count is None:
        count = builtin.DEFAULT_TEST_COUNT if split == "test" else builtin.DEFAULT_TRAIN_COUNT
    if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count <= 0:
        raise ConfigError(f"count must be a whole number of at least 1, got {count!r}")
    if split not in builtin.SPLITS:
        raise ConfigError(f"split must be one of {', '.join(builtin.SPLITS)}, got {split!r}")
    chunks = builtin.builtin_chunks(count, split, seed)
    source, shape = f"builtin:{split}", (builtin.SIZE, builtin.SIZE, 3)
    written = _write_stream(destination, shape, builtin.CLASSES, count, source, {"split": split, "seed": seed},
                            chunks, progress)
    return _result(destination, written, shape, builtin.CLASSES, source, started)


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
    return _result(destination, count, shape, listing.classes, str(folder), started,
                   skipped=sorted(tally.skipped, key=lambda item: item.path),
                   resized=tally.resized, converted=tally.converted)


SOURCES_HELP = ("SRC may be 'builtin' (or 'builtin:test'), a .npz file with arrays x and y, "
                "or a folder with one subfolder of images per class")
OPTIONS = {
    "builtin": ("count", "split", "seed", "progress"),
    "npz": ("progress",),
    "folder": ("size", "channels", "strict", "workers", "progress"),
}


def _options_for(kind: str, options: dict) -> dict:
    """The options that were set (not None), checked against those `kind` accepts."""
    given = {name: value for name, value in options.items() if value is not None}
    unknown = sorted(set(given) - set(OPTIONS[kind]))
    if unknown:
        accepted = ", ".join(name for name in OPTIONS[kind] if name != "progress") or "no options"
        raise ConfigError(f"{', '.join(unknown)} does not apply when packing {kind} (it takes {accepted})")
    return given


def pack(source: str | os.PathLike, destination: str | os.PathLike, **options) -> PackResult:
    """Pack `source` into `destination` (a `.gpuf` file), choosing the writer from the source.

    `source` is "builtin" or "builtin:SPLIT", a `.npz` file, or a folder. Options that are None are
    ignored; one that does not apply to the source is an error.
    """
    check_destination(destination)
    text = str(source)
    if text == "builtin" or text.startswith("builtin:"):
        given = _options_for("builtin", options)
        split = text.partition(":")[2]
        if split and given.get("split", split) != split:
            raise ConfigError(f"SRC {text} and split {given['split']!r} disagree; give one of them")
        return pack_builtin(destination, **{**given, **({"split": split} if split else {})})
    path = Path(source).expanduser()
    if path.is_dir():
        return pack_folder(path, destination, **_options_for("folder", options))
    if path.suffix.lower() == ".npz":
        return pack_npz(path, destination, **_options_for("npz", options))
    if not path.exists():
        raise ConfigError(f"SRC {text} does not exist; {SOURCES_HELP}")
    raise ConfigError(f"SRC {text} is neither a folder nor a .npz file; {SOURCES_HELP}")
