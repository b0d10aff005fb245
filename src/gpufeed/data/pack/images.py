"""Read a folder of images: list it, and decode each file into a uint8 array (H, W, C), in worker processes.

Policies `gpufeed pack FOLDER` applies to each file, in order:
- Animated images (GIF, WebP, APNG, multi-page TIFF): the first frame.
- EXIF orientation: applied (`ImageOps.exif_transpose`), so the array is the picture as a viewer shows it.
- JPEG with a target size: libjpeg decodes directly at 1/2, 1/4 or 1/8 scale when that still covers the
  target (`Image.draft`), which is much faster for photos; the result then goes through the resize below.
- Mode: every mode becomes "RGB" (channels=3) or "L" (channels=1) with Pillow's own `convert`, except:
  16-bit modes ("I;16*") and 32-bit integer "I" (how older Pillow opens 16-bit PNGs) are read as 16-bit
  values and scaled to 8 bits by rounding v / 257 (0 -> 0, 65535 -> 255; values outside 0..65535 are
  clipped); Pillow's own convert would clip everything above 255 to white. Float "F" images follow
  Pillow: values are taken as 0..255, clipped, and truncated to whole numbers. Alpha is dropped, not
  composited (RGBA, LA, PA and palettes with a transparent index keep their colour values), exactly as
  `Image.convert("RGB")` and torchvision's default image loader do, so a model sees the same pixels as it
  would with ImageFolder. CMYK uses Pillow's plain conversion (no ICC colour management).
- Size, when a target (H, W) is given: scale by max(H/h, W/w) so the image covers the target, with
  Pillow's BILINEAR filter (which widens its support when shrinking, so it does not alias), then crop the
  centre H x W (an odd leftover puts the extra pixel on the right or bottom). An image that needs no
  scaling (one side equal to the target, the other at least as long) is only cropped, never resampled.

A file that cannot be read or decoded completely yields a reason instead of an array. Truncated files are
bad files: Pillow's `ImageFile.LOAD_TRUNCATED_IMAGES` is left False and `load()` forces the full decode.

The workers are started with the "spawn" method: a fresh interpreter that imports only this module (and
so numpy and Pillow, not torch). No thread or lock of the parent (torch's thread pools, a staging thread,
the progress bar's refresh thread) is inherited, and Pillow's global settings are at their defaults.
Starting them costs a few tenths of a second, so at most `SMALL_FOLDER_FILES` files are decoded in the
calling process by default. A script that calls `pack_folder` must guard its entry point with
`if __name__ == "__main__":` (spawn imports the main script); `workers=0` decodes in the calling process.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff"})
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
ORIENTATION_TAG = 0x0112  # EXIF Orientation
FILES_PER_CHUNK = 64  # files sent to a worker at once, at most
CHUNKS_IN_FLIGHT_PER_WORKER = 4
IN_FLIGHT_BYTES = 256 * 1024 * 1024  # decoded pixels held in flight, roughly; bounds memory for big images
SMALL_FOLDER_FILES = 2 * FILES_PER_CHUNK  # decoded in the calling process unless workers are asked for


@dataclass(frozen=True)
class Decoded:
    """The outcome for one file: `pixels` (H, W, C) uint8, or `reason` when the file is bad.

    `size` is the (height, width) after orientation (and JPEG draft scaling) and before any resize;
    `converted` says the mode was changed, `resized` that the pixels were resampled or cropped to the target.
    """

    pixels: np.ndarray | None = None
    reason: str | None = None
    size: tuple[int, int] = (0, 0)
    converted: bool = False
    resized: bool = False


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


@dataclass(frozen=True)
class Opened:
    """A file's first frame decoded completely with its EXIF orientation applied; the file's `format` and EXIF
    `orientation` (None when absent); `size` (height, width) after orientation, before any JPEG draft scaling."""

    image: Image.Image
    format: str | None
    orientation: int | None
    size: tuple[int, int]


def open_complete(source: str | BinaryIO, scale_of: Callable[[tuple[int, int]], float] | None = None) -> Opened:
    """Open `source`, decode its first frame completely, apply its EXIF orientation, and close the file.

    `scale_of(size)`, given the oriented (height, width), says how much the image will be scaled; a JPEG
    scaled below 1 is then decoded by libjpeg at the smallest 1/2, 1/4 or 1/8 scale that still covers it.
    """
    with Image.open(source) as image:
        orientation = image.getexif().get(ORIENTATION_TAG)
        swapped = orientation in (5, 6, 7, 8)  # a quarter turn swaps H and W
        oriented = (image.width, image.height) if swapped else (image.height, image.width)
        facts = dict(format=image.format, orientation=orientation, size=oriented)
        scale = 1.0 if scale_of is None else scale_of(oriented)
        if image.format == "JPEG" and scale < 1:
            image.draft(None, (int(np.ceil(image.width * scale)), int(np.ceil(image.height * scale))))
        image.load()  # raises OSError for a truncated file: LOAD_TRUNCATED_IMAGES stays False
        return Opened(ImageOps.exif_transpose(image), **facts)  # a new image that outlives the file


def failure_reason(error: BaseException) -> str:
    """Why a file could not be decoded, in a few words (the reason a skipped file is listed with)."""
    if isinstance(error, PermissionError):
        return "permission denied"
    if isinstance(error, IsADirectoryError):
        return "is a folder"
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    if "truncated" in text:
        return f"truncated ({text})"
    if type(error).__name__ == "UnidentifiedImageError":
        return "not a readable image (Pillow cannot identify it)"
    return f"cannot decode ({type(error).__name__}: {text})"


def _scale_sixteen_bit(image: Image.Image) -> Image.Image:
    values = np.asarray(image).astype(np.int64)
    values = np.clip(values, 0, 65535)
    return Image.fromarray(((values + 128) // 257).astype(np.uint8), "L")  # round(v / 257)


def convert_mode(image: Image.Image, channels: int) -> tuple[Image.Image, bool]:
    """Return the image in "RGB" (channels=3) or "L" (channels=1), and whether its mode changed."""
    target = "RGB" if channels == 3 else "L"
    if image.mode == target:
        return image, False
    if image.mode in SIXTEEN_BIT_MODES:
        image = _scale_sixteen_bit(image)
        return (image if target == "L" else image.convert(target)), True
    return image.convert(target), True


def _cover_scale(size: tuple[int, int], target: tuple[int, int]) -> float:
    return max(target[0] / size[0], target[1] / size[1])


def resize_and_crop(image: Image.Image, target: tuple[int, int]) -> tuple[Image.Image, bool]:
    """Scale so the image covers `target` (H, W), then crop the centre; return it and whether it changed."""
    height, width = target
    if (image.height, image.width) == (height, width):
        return image, False
    scale = _cover_scale((image.height, image.width), target)
    new_height = max(height, round(image.height * scale))
    new_width = max(width, round(image.width * scale))
    if (new_height, new_width) != (image.height, image.width):
        image = image.resize((new_width, new_height), Image.Resampling.BILINEAR)
    top = (new_height - height) // 2
    left = (new_width - width) // 2
    return image.crop((left, top, left + width, top + height)), True


def decode_image(source: str | BinaryIO, size: tuple[int, int] | None, channels: int) -> Decoded:
    """Decode `source` (a path, or an open file of encoded bytes) following the module's policies; a bad file gives
    a `Decoded` with a `reason`."""
    try:
        if isinstance(source, str) and os.path.getsize(source) == 0:
            return Decoded(reason="empty file (0 bytes)")
        image = open_complete(source, None if size is None else lambda found: _cover_scale(found, size)).image
    except Exception as error:  # noqa: BLE001 - any failure to decode one file is that file's defect
        return Decoded(reason=failure_reason(error))
    return decode_picture(image, size, channels)


def decode_picture(image: Image.Image, size: tuple[int, int] | None, channels: int) -> Decoded:
    """The pixels of a decoded picture (an opened file, or a Dataset's PIL image) with the mode and size policies
    applied; a failure gives a `Decoded` with a `reason`."""
    try:
        original = (image.height, image.width)
        image, converted = convert_mode(image, channels)
        resized = False
        if size is not None:
            image, resized = resize_and_crop(image, size)
        pixels = np.asarray(image, dtype=np.uint8)
    except Exception as error:  # noqa: BLE001 - any failure to decode one file is that file's defect
        return Decoded(reason=failure_reason(error))
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return Decoded(pixels=np.ascontiguousarray(pixels), size=original, converted=converted, resized=resized)


def decode_files(paths: list[str], size: tuple[int, int] | None, channels: int) -> list[Decoded]:
    """Decode a chunk of files, in order (the unit of work sent to a worker process for a version-1 pack)."""
    return [decode_image(path, size, channels) for path in paths]


def read_size(path: str) -> tuple[int, int] | None:
    """(height, width) from the file's header without decoding its pixels, or None if it cannot be read."""
    try:
        with Image.open(path) as image:
            return image.height, image.width
    except Exception:  # noqa: BLE001 - only an estimate; the real decode reports the defect
        return None


@dataclass(frozen=True)
class FolderListing:
    """The images of a folder in packing order, their labels, the class names, and the files left out."""

    files: list[str]
    labels: np.ndarray
    classes: tuple[str, ...]
    not_images: list[tuple[str, str]]  # (path, reason)


def _visible(entries) -> list[os.DirEntry]:
    return sorted((entry for entry in entries if not entry.name.startswith(".")), key=lambda entry: entry.name)


def _walk(folder: str, exclude: str | None) -> tuple[list[str], list[tuple[str, str]]]:
    """Image files under `folder` (recursively, sorted, hidden names ignored) and the other files."""
    images, others = [], []
    for root, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(name for name in dirnames if not name.startswith("."))
        for name in sorted(filenames):
            path = os.path.join(root, name)
            if name.startswith(".") or (exclude is not None and os.path.abspath(path) == exclude):
                continue
            (images if is_image_name(name) else others).append(path)
    return images, [(path, _not_image_reason(path)) for path in others]


def _not_image_reason(path: str) -> str:
    extension = os.path.splitext(path)[1]
    return f"not an image (extension {extension})" if extension else "not an image (no extension)"


def _root_images_error(folder: str, images: list[str], subfolders: list[str]) -> ValueError:
    names = ", ".join(os.path.basename(path) for path in images[:3])
    more = f" and {len(images) - 3} more" if len(images) > 3 else ""
    return ValueError(f"{folder} holds images directly in it ({names}{more}) besides class subfolders "
                      f"({', '.join(subfolders[:5])}{', ...' if len(subfolders) > 5 else ''}); move each image "
                      f"into the subfolder of its class, or pack a folder that holds only images")


def list_folder(folder: str, exclude: str | None = None) -> FolderListing:
    """List a folder: one subfolder per class, or only images (one class named after the folder).

    Raises ValueError (the caller turns it into a ConfigError) when images sit beside class subfolders.
    `exclude` (an absolute path) is left out, so an output written inside the folder is not an input.
    """
    with os.scandir(folder) as scan:
        entries = _visible(scan)
    subfolders = [entry.name for entry in entries if entry.is_dir()]
    root_files = [entry.path for entry in entries
                  if not entry.is_dir() and os.path.abspath(entry.path) != exclude]
    if not subfolders:
        images, not_images = _walk(folder, exclude)
        name = os.path.basename(os.path.abspath(folder)) or "images"
        return FolderListing(images, np.zeros(len(images), np.int64), (name,), not_images)
    root_images = [path for path in root_files if is_image_name(path)]
    if root_images:
        raise _root_images_error(folder, root_images, subfolders)
    files, labels = [], []
    not_images = [(path, _not_image_reason(path)) for path in root_files]
    for label, name in enumerate(subfolders):
        images, others = _walk(os.path.join(folder, name), exclude)
        files += images
        labels += [label] * len(images)
        not_images += others
    return FolderListing(files, np.asarray(labels, np.int64), tuple(subfolders), not_images)


def default_workers(file_count: int) -> int:
    """The cores this process may run on; 0 (decode here) for a few files, where starting processes costs more."""
    if file_count <= SMALL_FOLDER_FILES:
        return 0
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def files_per_chunk(files: list[str], size, channels: int, workers: int) -> int:
    """Files per chunk so that the chunks in flight hold about `IN_FLIGHT_BYTES` of decoded pixels."""
    if size is None:  # estimate from the first readable header; all images must share it anyway
        size = next((found for found in map(read_size, files[:8]) if found), (256, 256))
    per_image = size[0] * size[1] * channels
    in_flight = CHUNKS_IN_FLIGHT_PER_WORKER * max(1, workers)
    return int(np.clip(IN_FLIGHT_BYTES // (in_flight * per_image), 1, FILES_PER_CHUNK))


def decode_stream(files: list[str], work: Callable[[list[str]], list], workers: int, chunk_files: int,
                  chunks_in_flight: int) -> Iterator[list]:
    """Run `work` on `files` in order, `chunk_files` at a time, with at most `chunks_in_flight` chunks queued.

    `work` takes a chunk of paths and returns one result per path: `functools.partial(decode_files, ...)`, or
    `encode.store_files` for a version-2 pack; it must be picklable (a module-level function or a partial of
    one). `workers=0` runs it in this process; otherwise a "spawn" process pool does. A worker that dies
    raises `BrokenProcessPool`. Closing the generator cancels the queued chunks and stops the workers.
    """
    starts = iter(range(0, len(files), chunk_files))
    if workers == 0:
        for start in starts:
            yield work(files[start:start + chunk_files])
        return
    context = multiprocessing.get_context("spawn")
    executor = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        pending = deque(executor.submit(work, files[start:start + chunk_files])
                        for start in itertools.islice(starts, chunks_in_flight))
        while pending:
            results = pending.popleft().result()
            start = next(starts, None)
            if start is not None:
                pending.append(executor.submit(work, files[start:start + chunk_files]))
            yield results
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
