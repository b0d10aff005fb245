"""Write a `.gpuf` packed dataset from a map-style Dataset (`__len__` and `__getitem__`): `pack_dataset`.

Each item must be an (image, label) pair: items.py says which kinds of image and label, and reads and stores one
(`read_item`). Classes: `classes=` when given, else the Dataset's `classes` (torchvision's; a Subset's from the
Dataset it wraps), else "0".."K-1" for the largest label K-1 seen; then, so that the header's room is reserved
before the labels are known, the largest label must be under max(len(dataset), CLASS_ROOM) (give `classes=`
beyond). The writers are a folder's: without `max_side` or `encoding` every image must end at one size and
`PackWriter` writes version 1; with either, `TableWriter` writes version 2, each sample named "item I" (its index
in the Dataset). The first bad item is a one-line `ConfigError` naming its index (nothing is skipped), and an error
or a killed process leaves nothing at the destination.

Reading: item 0 in this process (its size bounds the items in flight); with `workers` > 0 the rest through a
torch DataLoader (`batch_size=None`, `ItemChunks` as its Dataset, an identity collate, CHUNKS_IN_FLIGHT_PER_WORKER
chunks a worker), so each worker reads and encodes whole chunks of items, the file is written in the Dataset's
order and memory stays bounded. The workers start as the DataLoader's do by default (`START_METHOD`: fork on
Linux before Python 3.14, where the Dataset is not pickled; spawn on macOS and Windows and forkserver on Python
3.14's Linux, where a Dataset that cannot be pickled is an error naming workers=0, the fix; there is no silent
fallback).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufeed.data.pack.encode import Stored, store_options
from gpufeed.data.pack.folder import MAX_SIDE_POLICY, RESIZE_POLICY, check_image_options
from gpufeed.data.pack.images import CHUNKS_IN_FLIGHT_PER_WORKER, FILES_PER_CHUNK, IN_FLIGHT_BYTES, default_workers
from gpufeed.data.pack.items import ItemRead, Target, described, read_item
from gpufeed.data.pack.result import PackResult, Progress, check_destination, result_for, table_fields
from gpufeed.data.pack.table_writer import TableWriter
from gpufeed.data.pack.writer import PackWriter
from gpufeed.errors import ConfigError, RunFailed

# gpufeed's choice: without class names the header reserves room for this many (ImageNet's 1000 labels) or for
# one per item, whichever is more; a larger label needs classes=.
CLASS_ROOM = 1000
START_METHOD = None  # the DataLoader's multiprocessing_context: None is its default (fork on Linux)


def _identity(chunk: list[ItemRead]) -> list[ItemRead]:
    return chunk


class ItemChunks:
    """The Dataset the DataLoader's workers read: chunk c holds items first + c * per_chunk onwards, read and stored
    (`read_item`), up to the first bad one. Picklable when the user's Dataset is."""

    def __init__(self, dataset: Any, first: int, count: int, per_chunk: int, target: Target):
        self.dataset, self.first, self.count, self.per_chunk, self.target = dataset, first, count, per_chunk, target

    def __len__(self) -> int:
        return -(-(self.count - self.first) // self.per_chunk)

    def __getitem__(self, chunk: int) -> list[ItemRead]:
        start = self.first + chunk * self.per_chunk
        reads = []
        for index in range(start, min(start + self.per_chunk, self.count)):
            reads.append(read_item(self.dataset, index, self.target))
            if reads[-1].error is not None:
                break
        return reads


def _loader_chunks(chunks: ItemChunks, workers: int) -> Iterator[list[ItemRead]]:
    """The chunks in order from `workers` DataLoader processes."""
    from torch.utils.data import DataLoader

    loader = DataLoader(chunks, batch_size=None, shuffle=False, num_workers=workers, collate_fn=_identity,
                        prefetch_factor=CHUNKS_IN_FLIGHT_PER_WORKER, multiprocessing_context=START_METHOD)
    try:
        with warnings.catch_warnings():  # torch's own warning says what the error below says
            warnings.filterwarnings("ignore", message="Got pickle error")
            iterator = iter(loader)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise ConfigError(f"the Dataset cannot be sent to worker processes ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}); pack with workers=0 to read it in "
                          f"this process, or define the Dataset (and what it holds) at module level") from None
    try:
        yield from iterator
    except RuntimeError as error:
        if "DataLoader worker" not in str(error):
            raise
        raise RunFailed(f"a reading worker died while packing the Dataset ({str(error).splitlines()[0]}); retry with "
                        f"fewer workers, or workers=0 to read in this process") from None
    finally:
        del iterator


def read_items(dataset: Any, count: int, target: Target, workers: int) -> Iterator[list[ItemRead]]:
    """The items in order, a chunk at a time: item 0 here, the rest here or in `workers` processes."""
    first = read_item(dataset, 0, target, keep_cause=True)
    yield [first]
    sample = first.sample
    per_item = max(1, len(sample.data) if isinstance(sample, Stored) else sample.pixels.nbytes) if sample else 1
    in_flight = CHUNKS_IN_FLIGHT_PER_WORKER * max(1, workers)
    per_chunk = int(np.clip(IN_FLIGHT_BYTES // (in_flight * per_item), 1, FILES_PER_CHUNK))
    chunks = ItemChunks(dataset, 1, count, per_chunk, target)
    workers = min(workers, len(chunks))
    if workers == 0:
        for start in range(1, count, per_chunk):
            yield [read_item(dataset, index, target, keep_cause=True)
                   for index in range(start, min(start + per_chunk, count))]
        return
    yield from _loader_chunks(chunks, workers)


def _class_names(dataset: Any, classes) -> tuple[str, ...] | None:
    """`classes`, else the Dataset's `classes` (or that of the Dataset a Subset wraps); None: learnt from labels."""
    if classes is None:
        inner = getattr(dataset, "dataset", None) if hasattr(dataset, "indices") else None
        classes = getattr(dataset, "classes", None) or getattr(inner, "classes", None)
    if classes is None:
        return None
    if isinstance(classes, (str, bytes)) or not hasattr(classes, "__iter__"):
        raise ConfigError(f"classes must be a list of class names, got {described(classes)}")
    names = tuple(str(name) for name in classes)
    if not names:
        raise ConfigError("classes is empty; give one name per label, or leave it out to name them 0..K-1")
    return names


@dataclass
class _Written:
    """What the write loop counted: samples, the largest label, mode conversions, resamplings; version 1's shape."""

    count: int = 0
    largest: int = -1
    converted: int = 0
    resized: int = 0
    shape: tuple[int, ...] | None = None


def _check(read: ItemRead, names: tuple[str, ...] | None, room: int) -> None:
    if read.error is not None:
        raise ConfigError(read.error) from read.cause
    if names is not None and read.label >= len(names):
        raise ConfigError(f"dataset[{read.index}]'s label is {read.label}, but there are {len(names)} classes "
                          f"(labels 0..{len(names) - 1}); give classes= with a name for every label")
    if names is None and read.label >= room:
        raise ConfigError(f"dataset[{read.index}]'s label is {read.label}, and the Dataset names no classes: without "
                          f"names the labels must lie under {room}; give classes= with a name for every label")


def _size_mismatch(first: tuple[int, ...], read: ItemRead) -> ConfigError:
    (height, width), (other_height, other_width) = first[:2], read.sample.pixels.shape[:2]
    return ConfigError(
        f"the Dataset's images differ in size and no size was given: dataset[0] is {height}x{width} (height x "
        f"width) but dataset[{read.index}] is {other_height}x{other_width}; pass size=(H, W) (for example "
        f"size=({height}, {width})) to scale and centre-crop every image to one size, or max_side=N to keep each "
        f"image's aspect ratio")


def _write(stream: Iterator[list[ItemRead]], writer: PackWriter | TableWriter | None, make_writer, count: int,
           names: tuple[str, ...] | None, progress: Progress | None) -> _Written:
    """Check each read and append it in order; a version-1 writer is made at the first sample (its shape)."""
    written, room = _Written(), max(count, CLASS_ROOM)
    for reads in stream:
        for read in reads:
            _check(read, names, room)
            sample = read.sample
            if isinstance(sample, Stored):
                writer.append(sample.data, sample.height, sample.width, read.label, crc32=sample.crc32,
                              sums=sample.sums, name=f"item {read.index}", passthrough=sample.passthrough)
            else:
                if writer is None:
                    written.shape, writer = sample.pixels.shape, make_writer(sample.pixels.shape)
                elif sample.pixels.shape != written.shape:
                    raise _size_mismatch(written.shape, read)
                writer.append(sample.pixels[None], np.asarray([read.label], np.int64))
            written.count += 1
            written.largest = max(written.largest, read.label)
            written.converted += sample.converted
            written.resized += sample.resized
        if progress is not None:
            progress(written.count, count)
    if names is None:
        writer.set_classes([str(label) for label in range(written.largest + 1)])
    return written


def _length(dataset: Any) -> int:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dataset, torch.utils.data.IterableDataset):
        what = f"an IterableDataset ({type(dataset).__name__}), which has no items by index"
        raise ConfigError(f"the source is {what}; pack a map-style Dataset (with __len__ and __getitem__), or its "
                          f"images with pack_arrays", command_line=f"SRC is {what}")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        fix = ("give a folder, a .npz file, 'builtin', or a map-style Dataset (with __len__ and __getitem__) whose "
               "items are (image, label)")
        raise ConfigError(f"the source is {described(dataset)}: {fix}",
                          command_line=f"SRC is {described(dataset)}: {fix}")
    count = len(dataset)
    if count == 0:
        raise ConfigError(f"the Dataset ({type(dataset).__name__}) holds no items; give at least one")
    return count


def pack_dataset(dataset: Any, destination: str | os.PathLike, classes=None, size: tuple[int, int] | None = None,
                 channels: int = 3, workers: int | None = None, progress: Progress | None = None,
                 max_side: int | None = None, encoding: str | None = None, quality: int | None = None) -> PackResult:
    """Pack a map-style Dataset of (image, label) items (the module says which kinds, and the policies).

    `classes` names the labels (default: the Dataset's `classes`, else "0".."K-1"). `size`, `channels`,
    `max_side`, `encoding` and `quality` as for `pack_folder`: version 1 without `max_side` or `encoding` (every
    image one size, or `size` makes it so), else version 2. `workers` reading processes (default: the usable
    cores, or 0 for at most 128 items; 0 reads in this process). `progress(done, total)` after each chunk.
    """
    started = time.perf_counter()
    destination = check_destination(destination)
    size, channels = check_image_options(size, channels, workers)
    options = store_options(encoding, quality, channels, max_side, size)
    count = _length(dataset)
    names = _class_names(dataset, classes)
    workers = default_workers(count) if workers is None else int(workers)
    target, source = Target(options, size, channels), f"dataset:{type(dataset).__qualname__}"
    room = names or [str(label) for label in range(max(count, CLASS_ROOM))]  # placeholders until the labels are seen
    stream = read_items(dataset, count, target, workers)
    with contextlib.ExitStack() as stack:
        stack.callback(stream.close)  # runs after the writer's exit: the workers stop once the file is done or gone
        if options is None:
            extra = {"size": list(size) if size else None, "channels": channels, "resize": RESIZE_POLICY}
            written = _write(stream, None, lambda shape: stack.enter_context(PackWriter(
                destination, shape, room, count, source=source, extra=extra)), count, names, progress)
        else:
            policy = MAX_SIDE_POLICY if max_side else RESIZE_POLICY if size else "none: each image's size"
            writer = stack.enter_context(TableWriter(
                destination, channels, room, count, options.encoding,
                quality=options.quality if options.encoding == "jpeg" else None, max_side=options.max_side,
                size=options.size, source=source, extra={"resize": policy}, named=True))
            written = _write(stream, writer, None, count, names, progress)
    counts = dict(converted=written.converted, resized=written.resized)
    shape = written.shape
    if options is not None:
        shape, fields = table_fields(destination)
        counts.update(fields)
    final = names or tuple(str(label) for label in range(written.largest + 1))
    return result_for(destination, written.count, shape, final, source, started, **counts)
