"""Crop and resize: for each sample a box (top, left, height, width) in source pixels becomes an
(out_H, out_W, C) uint8 image written into a preallocated batch buffer (the staging slot).

Raw samples are cropped as a view of the packed pixels. JPEG samples are decoded by libjpeg-turbo through
simplejpeg, into a scratch buffer each staging thread keeps and reuses; when the box is at least twice the
output in both directions the decoder scales in the DCT domain by 1/2, 1/4 or 1/8 (the largest that keeps
the scaled box at least as large as the output), and the box is mapped onto the scaled image (its edges
rounded to whole scaled pixels: at most half a scaled pixel, so at most half an output pixel, of shift).
The crop is then resized with torch's antialiased bilinear filter on uint8 channels_last (its SIMD path; the
same triangle filter, widened when shrinking, as Pillow's BILINEAR). A box of exactly the output size is copied.

Both libjpeg-turbo and torch release the GIL, so staging threads decode in parallel. The work is one decoder
call and one resize call per sample (boxes and scales differ per sample, so there is no batched kernel). The
resize kernel (the one `F.interpolate(mode="bilinear", antialias=True)` calls) is called directly in its out=
form: it writes into the slot, where `F.interpolate`'s planar (1, C, H, W) result needed a transposing copy,
and the Python and dispatch around each sample fall from 55-75 us to 35-40 us (measured on 16x16 samples,
where the kernels themselves are negligible). A flipped sample is mirrored after its resize (torch's
vectorised flip of the contiguous image, and a copy back: about 35 us for 224x224), so it is exactly the
unflipped one mirrored.

Measured here (indicative only: 2 shared cores, other jobs running; torch 2.13 CPU build with AVX-512,
simplejpeg 1.9 / libjpeg-turbo, Pillow 13, OpenCV 5.0 headless; median of 80-100 calls on one thread):
- decode a 500x375 photo JPEG (q90, 57 kB): simplejpeg 0.86-0.97 ms full size, 0.70 at 1/2, 0.62 at 1/4,
  0.54 at 1/8; Pillow 1.85 ms full (open + decode + array), 0.8-1.1 at 1/2 with `draft`. A 1000x1200 JPEG:
  simplejpeg 4.3 ms, 3.0-3.3 at 1/2, 2.7-3.0 at 1/4; Pillow 10.7 ms, 3.6 at 1/2. Entropy decoding does not
  shrink with the scale, so DCT scaling saves 20-45%, not 4x. fastdct/fastupsample: no gain beyond noise
  here, and they part from Pillow's decode (identical by default) by up to 7 and 39 levels on the benchmark's
  photos, so left off. PyTurboJPEG was not measured: it needs a system libturbojpeg, absent here.
- resize to 224x224: torch bilinear antialias 0.13 ms from a 230x230 crop, 0.17 from 300x250, 0.43 from
  600x500, 0.77 from 1200x1000; Pillow BILINEAR 3-5x slower; OpenCV INTER_AREA (its antialiased filter)
  3.5-4.5x slower for these non-integer ratios, and INTER_LINEAR does not antialias.
`benchmarks/feed_jpeg.py` times each stage on photos packed at max side 256 (RESULTS.md): there decoding
takes about half of an image's time, resizing and flipping a quarter, the float conversion the rest. Its
`alternatives()` measured what issue 21 proposed and found no gain worth taking (RESULTS.md, 2026-12-02):
nvImageCodec's CPU backend decoding only the crop's box (233 against 238 us: at max side 256 the box spans most
iMCU rows, and every row above it is still entropy-decoded), OpenCV's INTER_LINEAR (faster by a third but not
antialiased when shrinking) and INTER_AREA, and pyvips (its per-call set-up dominates at this size).
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import simplejpeg
import torch
import torch.nn.functional as F

from gpufeed.errors import FormatError

DCT_FACTORS = (8, 4, 2)  # libjpeg-turbo's fast scaled IDCTs, tried largest first
JPEG_COLOURSPACES = {1: "GRAY", 3: "RGB"}


def dct_factor(box_height: int, box_width: int, out_height: int, out_width: int) -> int:
    """The largest of 8, 4, 2 by which the box may shrink and still cover the output; 1 when none does."""
    for factor in DCT_FACTORS:
        if box_height >= factor * out_height and box_width >= factor * out_width:
            return factor
    return 1


def scaled_box(box, factor: int, scaled_height: int, scaled_width: int) -> tuple[int, int, int, int]:
    """A box in source pixels mapped onto the image decoded at 1/factor, edges rounded to whole pixels."""
    top, left, height, width = (int(v) for v in box)
    if factor == 1:
        return top, left, height, width
    first_row, first_column = round(top / factor), round(left / factor)
    rows = min(max(1, round((top + height) / factor) - first_row), scaled_height - first_row)
    columns = min(max(1, round((left + width) / factor) - first_column), scaled_width - first_column)
    return first_row, first_column, rows, columns


def _direct_kernel():
    """torch's antialiased bilinear kernel, which `F.interpolate(mode="bilinear", antialias=True)` calls, in the
    form that writes into a given tensor; None when this torch has no such form (then `F.interpolate`)."""
    kernel = getattr(torch._C._nn, "_upsample_bilinear2d_aa", None)
    try:
        kernel(torch.zeros((1, 1, 2, 2), dtype=torch.uint8), (1, 1), False, None, None,
               out=torch.empty((1, 1, 1, 1), dtype=torch.uint8))
    except (TypeError, RuntimeError):
        return None
    return kernel


RESIZE_KERNEL = _direct_kernel()


def resize_into(source: torch.Tensor, out: torch.Tensor, flip: bool = False) -> None:
    """Resize uint8 (h, w, C) `source` (any strides, e.g. a crop view) into uint8 (H, W, C) `out`, mirrored left
    to right after the resize when `flip` (so a flipped sample is exactly the unflipped one mirrored)."""
    resize_planes(source.permute(2, 0, 1)[None], out, out.permute(2, 0, 1)[None], flip)


def resize_planes(planes: torch.Tensor, out: torch.Tensor, out_planes: torch.Tensor, flip: bool) -> None:
    """`resize_into` for a source already viewed as (1, C, h, w) (a crop of an (H, W, C) image, permuted);
    `out_planes` is `out` viewed the same way, which the kernel writes straight into."""
    size = tuple(out.shape[:2])
    if planes.shape[2:] == size:
        out.copy_(planes[0].permute(1, 2, 0))
    elif RESIZE_KERNEL is None:  # its result is (1, C, H, W) in planar memory: a transposing copy
        out.copy_(F.interpolate(planes, size=size, mode="bilinear", antialias=True, align_corners=False)[0]
                  .permute(1, 2, 0))
    else:
        RESIZE_KERNEL(planes, size, False, None, None, out=out_planes)
    if flip:
        out.copy_(out.flip(1))  # torch's vectorised mirror of contiguous 3- or 1-byte pixels, then a copy back


class CropResizer:
    """Crops and resizes samples of one `PackedDataset` (either version, raw or JPEG) into batch buffers; safe
    to call from several threads."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.encoding, self.channels = dataset.encoding, int(dataset.channels)
        if self.encoding not in ("raw", "jpeg"):
            raise FormatError(f"{dataset.path}: unknown sample encoding {self.encoding!r}; re-run gpufeed pack")
        if self.encoding == "jpeg" and self.channels not in JPEG_COLOURSPACES:
            raise FormatError(f"{dataset.path}: JPEG samples with {self.channels} channels; re-pack as RGB or grey")
        self.heights, self.widths = np.asarray(dataset.heights, np.int64), np.asarray(dataset.widths, np.int64)
        self._pixels = None if self.encoding == "jpeg" else _raw_pixels(dataset)
        self._scratch = threading.local()

    def stage(self, samples: np.ndarray, boxes: np.ndarray, out: torch.Tensor, flips: np.ndarray | None = None) -> None:
        """Write sample samples[k] cropped to boxes[k] and resized into out[k] (uint8 (B, H, W, C)), mirrored
        left to right where flips[k] is non-zero."""
        crop = self._crop_jpeg if self.encoding == "jpeg" else self._crop_raw
        flipped = [False] * len(samples) if flips is None else np.asarray(flips).astype(bool).tolist()
        images, planes = out.unbind(0), out.permute(0, 3, 1, 2).unsqueeze(1).unbind(0)  # (H, W, C), (1, C, H, W)
        for position, (sample, box) in enumerate(zip(samples.tolist(), boxes.tolist(), strict=True)):
            resize_planes(crop(sample, box, out.shape[1:3]), images[position], planes[position], flipped[position])

    def _crop_raw(self, sample: int, box: list[int], size: tuple[int, int]) -> torch.Tensor:
        """The box of raw sample `sample` as a (1, C, h, w) view of the payload."""
        return self._pixels(sample, box)

    def _crop_jpeg(self, sample: int, box: list[int], size: tuple[int, int]) -> torch.Tensor:
        """The box of JPEG sample `sample`, decoded (at 1/factor when the box allows), as a (1, C, h, w) view
        of this thread's decode buffer."""
        full_height, full_width = int(self.heights[sample]), int(self.widths[sample])
        factor = dct_factor(box[2], box[3], size[0], size[1])
        scaled_height, scaled_width = -(-full_height // factor), -(-full_width // factor)
        data = self.dataset.sample_bytes(sample)
        scale = dict(min_height=scaled_height, min_width=scaled_width, min_factor=factor)
        buffer = self._buffer(scaled_height * scaled_width * self.channels)
        try:
            image = simplejpeg.decode_jpeg(data, JPEG_COLOURSPACES[self.channels], buffer=buffer, **scale)
        except ValueError as error:  # damaged, or larger than the table says (then the buffer is too small)
            raise self._size_error(sample, data) or self._damaged(sample, error) from None
        if image.shape[:2] != (scaled_height, scaled_width):
            raise self._size_error(sample, data) or self._damaged(sample, f"it decodes to {image.shape[:2]}")
        top, left, height, width = scaled_box(box, factor, scaled_height, scaled_width)
        return torch.from_numpy(image[top:top + height, left:left + width].transpose(2, 0, 1)[None])

    def _size_error(self, sample: int, data: np.ndarray) -> FormatError | None:
        """The error for a JPEG whose header gives another size than the table; None when the sizes agree or
        the header cannot be read (checked only after a decode failed or gave another size: ~3 us a sample)."""
        try:
            height, width = simplejpeg.decode_jpeg_header(data)[:2]
        except ValueError:
            return None
        if (height, width) == (int(self.heights[sample]), int(self.widths[sample])):
            return None
        return FormatError(f"{self._which(sample)} is a {width}x{height} JPEG but the table says "
                           f"{int(self.widths[sample])}x{int(self.heights[sample])}; re-run gpufeed pack")

    def _damaged(self, sample: int, error) -> FormatError:
        return FormatError(f"{self._which(sample)} does not decode as JPEG ({error}); the file or its source image "
                           f"is damaged: re-run gpufeed pack")

    def _which(self, sample: int) -> str:
        """`data/train.gpuf: sample 13 (cat/001.jpg)`: the file, the sample and, when stored, its source."""
        name = self.dataset.sample_name(sample)
        return f"{self.dataset.path}: sample {sample}" + (f" ({name})" if name else "")

    def _buffer(self, size: int) -> np.ndarray:
        """This thread's decode buffer, grown to at least `size` bytes and kept for the next sample."""
        scratch = getattr(self._scratch, "buffer", None)
        if scratch is None or len(scratch) < size:
            scratch = self._scratch.buffer = np.empty(size, np.uint8)
        return scratch[:size]


def _raw_pixels(dataset):
    """(sample, box) -> the box of raw sample `sample` as a (1, C, h, w) CPU tensor view into the payload (no
    copy), in channels_last strides.

    The tensor over the payload is made once, here on the constructing thread: `torch.from_numpy` of a
    read-only memory map warns, and silencing warnings is not thread-safe."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only memory map: we never write to it
        payload = torch.from_numpy(np.asarray(dataset.payload))
    offsets, widths = (np.asarray(a, np.int64) for a in (dataset.offsets, dataset.widths))
    channels = int(dataset.channels)

    def pixels(sample: int, box: list[int]) -> torch.Tensor:
        top, left, height, width = box
        row = int(widths[sample]) * channels
        start = int(offsets[sample]) + top * row + left * channels
        return payload.as_strided((1, channels, height, width), (height * row, 1, row, channels), start)

    return pixels
