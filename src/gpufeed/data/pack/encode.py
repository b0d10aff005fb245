"""Store one image for a version-2 pack: decode it (images.py's policies), scale it, and give the bytes to store.

Policies, beyond images.py's (first frame, EXIF orientation applied, mode conversion of CMYK, grey, palette,
16-bit and alpha images to "RGB" or "L", truncated files are bad files):
- `max_side` N: an image whose longer side exceeds N is scaled by s = N / (longer side) to
  round(h * s) x round(w * s) (Python's round, halves to even; at least 1 pixel), so it keeps its aspect
  ratio and its longer side is N; a smaller image is never scaled up. A JPEG is decoded by libjpeg at the
  smallest DCT scale (1/2, 1/4, 1/8) that still covers that size (`Image.draft`); the result is then resized
  with Pillow's BILINEAR filter, which widens its support by the reduction factor (so it is antialiased), in
  one exact pass (no `reducing_gap`). Without draft scaling the pixels are exactly Pillow's own
  `image.convert(mode).resize((w, h), BILINEAR)`.
- `size` (H, W): images.py's scale to cover and centre crop, as in a version-1 pack.
- "jpeg": encoded by Pillow's libjpeg-turbo at `quality`, with Pillow's defaults otherwise (4:2:0 chroma
  subsampling, baseline, no metadata: the orientation is already applied). A source JPEG in the target mode
  ("RGB", or "L" for one channel) that needs no rotation (orientation tag absent or 1) and no scaling is
  stored byte for byte ("passthrough", baseline or progressive); it is still decoded completely, so a
  truncated one is skipped like any other bad file.
- "raw": the uint8 pixels, H x W x C row-major.
- A Dataset's item (dataset.py): its JPEG or PNG bytes are stored as a file's are (`store_encoded`, passthrough
  included); a picture (a PIL image, or pixels made one) goes through the same mode and size policies, with no
  orientation to apply and no file to pass through (`store_picture`).
The per-channel sums (the header's mean and std) are those of the pixels stored, or encoded for JPEG (a
passthrough file's decoded pixels). This module imports numpy and Pillow only: it runs in the spawned workers.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image

from gpufeed.data.format.layout import ENCODINGS
from gpufeed.data.format.statistics import channel_sums
from gpufeed.data.pack.images import Opened, convert_mode, failure_reason, open_complete, resize_and_crop
from gpufeed.errors import ConfigError

DEFAULT_QUALITY = 90
RESAMPLE = Image.Resampling.BILINEAR


@dataclass(frozen=True)
class StoreOptions:
    """How samples are stored: `encoding` "raw" or "jpeg", `channels` 3 or 1, and at most one of `max_side`
    (the longest side, in pixels) and `size` (H, W)."""

    encoding: str
    channels: int = 3
    quality: int = DEFAULT_QUALITY
    max_side: int | None = None
    size: tuple[int, int] | None = None


def _whole(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def store_options(encoding: str | None, quality: int | None, channels: int, max_side: int | None = None,
                  size: tuple[int, int] | None = None) -> StoreOptions | None:
    """The checked options of a version-2 pack, or None for a version-1 pack (no `encoding`, no `max_side`).

    `encoding` defaults to "jpeg" with `max_side` (the sizes differ); `quality` (1..100, default 90) is JPEG's.
    """
    if max_side is not None and size is not None:
        raise ConfigError("--max-side and --size are mutually exclusive: --size H W crops every image to one size, "
                          "--max-side N keeps each image's aspect ratio; give one")
    if max_side is not None and (not _whole(max_side) or max_side <= 0):
        raise ConfigError(f"--max-side must be a positive whole number of pixels, got {max_side!r}")
    if encoding is None and max_side is None:
        if quality is not None:
            raise ConfigError("--quality applies to JPEG only: add --encoding jpeg (or --max-side N)")
        return None
    encoding = encoding or "jpeg"
    if encoding not in ENCODINGS:
        raise ConfigError(f"--encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    if quality is not None and encoding != "jpeg":
        raise ConfigError(f"--quality applies to --encoding jpeg, not {encoding}; leave it out")
    quality = DEFAULT_QUALITY if quality is None else quality
    if not _whole(quality) or not 1 <= quality <= 100:
        raise ConfigError(f"--quality must be a whole number from 1 to 100 (90 is the default), got {quality!r}")
    if encoding == "jpeg" and channels not in (1, 3):
        raise ConfigError(f"JPEG holds 1 or 3 channels, not {channels}; use --encoding raw")
    return StoreOptions(encoding, int(channels), int(quality), None if max_side is None else int(max_side),
                        None if size is None else tuple(size))


@dataclass(frozen=True)
class Stored:
    """The outcome for one file: the bytes to store, or `reason` when the file is bad.

    `sums` are the per-channel sum and sum of squares of the pixels (`channel_sums`); `crc32` is that of
    `data`; `converted`, `resized` and `passthrough` say what was done.
    """

    data: bytes | None = None
    reason: str | None = None
    height: int = 0
    width: int = 0
    crc32: int = 0
    sums: tuple[np.ndarray, np.ndarray] | None = None
    converted: bool = False
    resized: bool = False
    passthrough: bool = False


def scaled_size(size: tuple[int, int], max_side: int | None) -> tuple[int, int]:
    """(height, width) of an image of `size` with its longer side brought down to `max_side` (never up)."""
    height, width = size
    if max_side is None or max(height, width) <= max_side:
        return height, width
    scale = max_side / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def _scale_of(options: StoreOptions):
    if options.max_side is not None:
        return lambda found: min(1.0, options.max_side / max(found))
    if options.size is not None:
        return lambda found: max(options.size[0] / found[0], options.size[1] / found[1])
    return None


def _encoded(image: Image.Image, pixels: np.ndarray, options: StoreOptions) -> bytes:
    if options.encoding == "raw":
        return pixels.tobytes()
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=options.quality)
    return buffer.getvalue()


def _stored(data: bytes, pixels: np.ndarray, **facts) -> Stored:
    return Stored(data=data, height=pixels.shape[0], width=pixels.shape[1], crc32=zlib.crc32(data),
                  sums=channel_sums(pixels[None]), **facts)


def store_image(path: str, options: StoreOptions) -> Stored:
    """Decode and store `path` following the module's policies; a bad file gives a `Stored` with a `reason`."""
    try:
        with open(path, "rb") as handle:
            source = handle.read()
    except Exception as error:  # noqa: BLE001 - a file that cannot be read is that file's defect
        return Stored(reason=failure_reason(error))
    return store_encoded(source, options)


def store_encoded(source: bytes, options: StoreOptions) -> Stored:
    """Store one encoded image file's bytes (a folder's file, or a Dataset's JPEG or PNG bytes) following the
    module's policies, passthrough included; bad bytes give a `Stored` with a `reason`."""
    try:
        if not source:
            return Stored(reason="empty file (0 bytes)")
        opened = open_complete(io.BytesIO(source), _scale_of(options))
    except Exception as error:  # noqa: BLE001 - any failure to decode one file is that file's defect
        return Stored(reason=failure_reason(error))
    return _store_opened(opened, options, source)


def store_picture(image: Image.Image, options: StoreOptions) -> Stored:
    """Store a decoded picture (a Dataset's PIL image or array) following the module's mode and size policies; it
    has no file to pass through, and no orientation tag: it is stored as it is shown."""
    return _store_opened(Opened(image, None, None, (image.height, image.width)), options, None)


def _store_opened(opened: Opened, options: StoreOptions, source: bytes | None) -> Stored:
    try:
        image, converted = convert_mode(opened.image, options.channels)
        if options.size is not None:
            target = options.size
            image, resized = resize_and_crop(image, target)
        else:
            target = scaled_size(opened.size, options.max_side)
            resized = target != opened.size
            if (image.height, image.width) != target:
                image = image.resize((target[1], target[0]), RESAMPLE)
        pixels = np.asarray(image, dtype=np.uint8)
        pixels = pixels[:, :, None] if pixels.ndim == 2 else pixels
        passthrough = (source is not None and options.encoding == "jpeg" and opened.format == "JPEG"
                       and not converted and opened.orientation in (None, 1) and target == opened.size
                       and (image.height, image.width) == opened.size)
        data = source if passthrough else _encoded(image, pixels, options)
    except Exception as error:  # noqa: BLE001 - any failure to decode one file is that file's defect
        return Stored(reason=failure_reason(error))
    return _stored(data, np.ascontiguousarray(pixels), converted=converted, resized=resized, passthrough=passthrough)


def store_files(paths: list[str], options: StoreOptions) -> list[Stored]:
    """Store a chunk of files, in order: the unit of work sent to a worker (as `partial(store_files, options=...)`)."""
    return [store_image(path, options) for path in paths]


def store_pixels(pixels: np.ndarray, options: StoreOptions) -> Stored:
    """Store one array (H, W, C) uint8 as it is (no scaling): for arrays, `.npz` files and the built-in set."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    image = None
    if options.encoding == "jpeg":
        image = Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels, "L" if pixels.shape[2] == 1
                                else "RGB")
    return _stored(_encoded(image, pixels, options), pixels)
