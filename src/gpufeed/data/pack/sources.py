"""Write `.gpuf` packed datasets from arrays, a `.npz` file or the built-in dataset, and `pack`, which picks the
writer from the source (a folder goes to `folder.py`, a map-style Dataset to `dataset.py`).

Every writer streams into `PackWriter` (writer.py), or with an `encoding` into `TableWriter` (table_writer.py,
format version 2: each array stored raw or as a JPEG by encode.py), which write a temporary file beside the
destination and rename it at the end: an error, a strict failure or a killed process leaves nothing at the
destination.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from gpufeed.data.pack import builtin
from gpufeed.data.pack.dataset import pack_dataset
from gpufeed.data.pack.encode import StoreOptions, store_options, store_pixels
from gpufeed.data.pack.folder import pack_folder
from gpufeed.data.pack.result import PackResult, Progress, check_destination, result_for, table_fields
from gpufeed.data.pack.table_writer import TableWriter
from gpufeed.data.pack.writer import PackWriter
from gpufeed.errors import ConfigError

ARRAY_SLICE_BYTES = 64 * 1024 * 1024


def _write_stream(destination: Path, shape, classes, total: int, source: str, extra: dict,
                  chunks: Iterable[tuple[np.ndarray, np.ndarray]], progress: Progress | None,
                  options: StoreOptions | None = None) -> int:
    """Write the chunks of images (n, H, W[, C]) and labels (n,): version 1, or version 2 with `options`."""
    if options is None:
        writer = PackWriter(destination, shape, classes, max_count=total, source=source, extra=extra)
    else:
        writer = TableWriter(destination, shape[2], classes, total, options.encoding, source=source, extra=extra,
                             quality=options.quality if options.encoding == "jpeg" else None)
    with writer:
        for images, labels in chunks:
            if options is None:
                writer.append(images, labels)
            else:
                for pixels, label in zip(images.reshape(len(images), *shape), labels, strict=True):
                    stored = store_pixels(pixels, options)
                    writer.append(stored.data, shape[0], shape[1], int(label), crc32=stored.crc32, sums=stored.sums)
            if progress is not None:
                progress(writer.count, total)
    return writer.count


def _finished(destination: Path, count: int, shape, classes, source: str, started: float,
              options: StoreOptions | None) -> PackResult:
    if options is None:
        return result_for(destination, count, shape, classes, source, started)
    shape, fields = table_fields(destination)
    return result_for(destination, count, shape, classes, source, started, **fields)


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
                progress: Progress | None = None, encoding: str | None = None,
                quality: int | None = None) -> PackResult:
    """Pack in-memory (or memory-mapped) arrays: images (N, H, W[, C]) uint8, labels (N,) integers.

    `classes` names the labels (default "0".."K-1"). The arrays are written a slice at a time. `encoding`
    "raw" or "jpeg" (`quality` 1..100, default 90) writes format version 2 (format/layout.py); without it, version 1.
    """
    started = time.perf_counter()
    destination = check_destination(destination)
    images, labels, names = _check_arrays(np.asarray(images), np.asarray(labels), classes, source)
    options = store_options(encoding, quality, images.shape[3])
    rows = max(1, ARRAY_SLICE_BYTES // int(np.prod(images.shape[1:])))
    slices = ((images[start:start + rows], labels[start:start + rows]) for start in range(0, len(images), rows))
    count = _write_stream(destination, images.shape[1:], names, len(images), source, {}, slices, progress, options)
    return _finished(destination, count, images.shape[1:], names, source, started, options)


def pack_npz(npz_path: str | os.PathLike, destination: str | os.PathLike, progress: Progress | None = None,
             encoding: str | None = None, quality: int | None = None) -> PackResult:
    """Pack a `.npz` archive with arrays `x` (N, H, W[, C]) uint8 and `y` (N,) integers.

    An optional array `classes` of strings names the labels. The archive is loaded into memory (numpy cannot
    memory-map a `.npz`); nothing in it is unpickled. `encoding` and `quality` as for `pack_arrays`.
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
                         source=str(path), progress=progress, encoding=encoding, quality=quality)
    return dataclasses.replace(result, seconds=time.perf_counter() - started)  # the load counts too


def pack_builtin(destination: str | os.PathLike, count: int | None = None, split: str = "train", seed: int = 0,
                 progress: Progress | None = None, encoding: str | None = None,
                 quality: int | None = None) -> PackResult:
    """Pack `count` samples of the built-in dataset (default: the whole split), streamed in chunks.

    `encoding` and `quality` as for `pack_arrays`."""
    started = time.perf_counter()
    destination = check_destination(destination)
    if count is None:
        count = builtin.DEFAULT_TEST_COUNT if split == "test" else builtin.DEFAULT_TRAIN_COUNT
    if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count <= 0:
        raise ConfigError(f"count must be a whole number of at least 1, got {count!r}")
    if split not in builtin.SPLITS:
        raise ConfigError(f"split must be one of {', '.join(builtin.SPLITS)}, got {split!r}")
    options = store_options(encoding, quality, 3)
    chunks = builtin.builtin_chunks(count, split, seed)
    source, shape = f"builtin:{split}", (builtin.SIZE, builtin.SIZE, 3)
    written = _write_stream(destination, shape, builtin.CLASSES, count, source, {"split": split, "seed": seed},
                            chunks, progress, options)
    return _finished(destination, written, shape, builtin.CLASSES, source, started, options)


SOURCES_HELP = ("SRC may be 'builtin' (or 'builtin:test'), a .npz file with arrays x and y, "
                "or a folder with one subfolder of images per class")
OPTIONS = {
    "builtin": ("count", "split", "seed", "encoding", "quality", "progress"),
    "npz": ("encoding", "quality", "progress"),
    "folder": ("size", "max_side", "encoding", "quality", "channels", "strict", "workers", "progress"),
    "dataset": ("classes", "size", "max_side", "encoding", "quality", "channels", "workers", "progress"),
}


def _options_for(kind: str, options: dict) -> dict:
    """The options that were set (not None), checked against those `kind` accepts."""
    given = {name: value for name, value in options.items() if value is not None}
    unknown = sorted(set(given) - set(OPTIONS[kind]))
    if unknown:
        accepted = ", ".join(name for name in OPTIONS[kind] if name != "progress") or "no options"
        raise ConfigError(f"{', '.join(unknown)} does not apply when packing {kind} (it takes {accepted})")
    return given


def pack(source, destination: str | os.PathLike, **options) -> PackResult:
    """Pack `source` into `destination` (a `.gpuf` file), choosing the writer from the source.

    `source` is "builtin" or "builtin:SPLIT", a `.npz` file, a folder, or a map-style Dataset (any object with
    `__len__` and `__getitem__`, not a path) whose items are (image, label): `pack_dataset` (dataset.py). Options
    that are None are ignored; one that does not apply to the source is an error.
    """
    check_destination(destination)
    if not isinstance(source, (str, os.PathLike)):
        return pack_dataset(source, destination, **_options_for("dataset", options))
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
