"""What feeding the training costs the host, per sample: the bytes a sample is stored in, and how many samples one
CPU core stages per second for a GPU, measured on this machine through the real `Feed`.

Bytes per sample: from the packed file (`--data`: its payload over its samples); else from a stated encoding and
size (`--encoding jpeg --max-side 256`): TYPICAL_JPEG_BYTES_AT_256, scaled with the image's area; raw: height x
width x channels of a 4:3 image at that max side; else the input's element count in uint8 (a fixed-size pack).

Per-core rate: `Feed.staging_rate` on one thread, on a sample of the user's pack, or, with no pack, of generated
JPEGs (smooth noise with grain, 4:3 at the max side, quality 90, about the typical size; not photographs) packed
here. Photos at their own sizes train on random-resized crops, so the staging decodes, crops and resizes each
sample (decode "cpu"); when the planned machine decodes on the GPU (nvImageCodec, decode "gpu") the CPU only
gathers each batch's JPEG bytes and boxes. Both rates are measured for a JPEG pack, so the plan prints the other
case's cores beside its own. A version-1 (fixed-size) pack needs no decoding: its rate is the gather's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufeed.data.feed.feed import Feed
from gpufeed.data.format.header import read_header
from gpufeed.errors import ConfigError

# benchmarks/RESULTS.md, "Feed at real resolution" (2026-12-01): 5,000 JPEG crops of scikit-image's photographs
# (mean 317 x 314 px) packed by `gpufeed pack --max-side 256 --encoding jpeg` at quality 90: 80.1 MiB, 16,798 bytes
# an image. ImageNet's photos (mean about 400 x 350) packed the same way come out alike: the cap sets the size.
TYPICAL_JPEG_BYTES_AT_256 = 16_800
TYPICAL_SOURCE = ("16.8 KB an image at max side 256, quality 90: scikit-image's photographs packed by gpufeed "
                  "(benchmarks/RESULTS.md)")
ENCODINGS = ("jpeg", "raw")
DECODES = ("cpu", "gpu")
SAMPLED = 256  # samples of a pack the rate is measured on
GENERATED = 96  # generated JPEGs when there is no pack
RATE_SECONDS = 1.0  # per rate measured


@dataclass(frozen=True)
class InputCost:
    """Bytes and per-core staging rate of one sample. `decode` is where the planned machine decodes ("cpu" or
    "gpu"); `per_core_rate` its rate in samples/s and `per_core_reason` where it came from; `other_*` the other
    decode's, for a JPEG pack (else None)."""

    bytes_per_sample: int
    bytes_reason: str
    encoding: str  # "jpeg" or "raw" (pixels; a version-1 pack is raw and fixed-size)
    decode: str
    per_core_rate: float
    per_core_reason: str
    other_per_core_rate: float | None = None
    other_per_core_reason: str | None = None


def stated_bytes(encoding: str, max_side: int, channels: int = 3) -> tuple[int, str]:
    """(bytes, reason) of one image stored at `max_side` in `encoding`, when no packed file says."""
    if encoding == "jpeg":
        value = round(TYPICAL_JPEG_BYTES_AT_256 * (max_side / 256) ** 2)
        return value, f"typical JPEG: {TYPICAL_SOURCE}, scaled with the area to max side {max_side}"
    height = round(max_side * 3 / 4)
    return max_side * height * channels, f"raw: a 4:3 image at max side {max_side}, {max_side} x {height} x {channels}"


def _generated_pack(folder: Path, max_side: int, encoding: str) -> Path:
    from PIL import Image

    from gpufeed.data.pack.sources import pack

    generator = np.random.default_rng(0)
    width, height = max_side, round(max_side * 3 / 4)
    for index in range(GENERATED):
        base = generator.integers(0, 255, (height // 16 + 1, width // 16 + 1, 3)).astype(np.uint8)
        pixels = np.asarray(Image.fromarray(base).resize((width, height), Image.BICUBIC), dtype=np.float32)
        pixels = np.clip(pixels + generator.normal(0, 7, pixels.shape), 0, 255).astype(np.uint8)
        (folder / f"c{index % 2}").mkdir(exist_ok=True)
        Image.fromarray(pixels).save(folder / f"c{index % 2}" / f"{index}.png")
    packed = folder / "generated.gpuf"
    pack(folder, packed, max_side=max_side, encoding=encoding, quality=90 if encoding == "jpeg" else None, workers=0)
    return packed


def _rates(path: Path, image_size: tuple[int, int], jpeg: bool, fixed: bool, what: str,
           decode: str) -> tuple[float, str, float | None, str | None]:
    header = read_header(path)
    options = {} if fixed else {"augment": "random-resized-crop", "image_size": image_size}
    indices = np.arange(min(header.count, SAMPLED))
    feed = Feed(path, min(32, len(indices)), device="cpu", workers=1, indices=indices, **options)
    cpu = feed.staging_rate(RATE_SECONDS, "cpu")
    work = ("gathers packed uint8 samples" if fixed else
            f"decodes, random-resized-crops and resizes to {image_size[0]}x{image_size[1]}")
    cpu_reason = f"measured here through Feed: one core {work} at {cpu:,.0f} samples/s ({what})"
    if not jpeg:
        return cpu, cpu_reason, None, None
    gpu = feed.staging_rate(RATE_SECONDS, "gpu")
    gpu_reason = (f"measured here through Feed: one core gathers the JPEG bytes and crop boxes the GPU decodes, "
                  f"{gpu:,.0f} samples/s ({what})")
    if decode == "gpu":
        return gpu, gpu_reason, cpu, cpu_reason
    return cpu, cpu_reason, gpu, gpu_reason


def _check_decode(decode: str, encoding: str) -> None:
    if decode == "gpu" and encoding != "jpeg":
        raise ConfigError(f"--decode gpu decodes JPEG samples; this input is {encoding}: leave --decode out, or "
                          f"pack with --encoding jpeg")


def measure_input_cost(data: str | None, encoding: str | None, max_side: int | None, image_size: tuple[int, int],
                       decode: str = "cpu") -> InputCost | None:
    """The input's cost from a packed file (`data`), or from a stated `encoding` at `max_side` (generated JPEGs
    packed here for the rate); None when neither is given (the planner then times a plain uint8 gather)."""
    if decode not in DECODES:
        raise ConfigError(f"unknown --decode {decode!r}; choose one of {', '.join(DECODES)}")
    if encoding is not None and encoding not in ENCODINGS:
        raise ConfigError(f"unknown --encoding {encoding!r}; choose one of {', '.join(ENCODINGS)}")
    if data is not None:
        header = read_header(data)
        stored = header.encoding
        jpeg = stored == "jpeg"
        _check_decode(decode, stored)
        bytes_per_sample = round(header.stored_bytes_per_sample)
        bytes_reason = f"{data}: {header.count:,} samples stored in {bytes_per_sample:,} bytes each on average"
        rates = _rates(Path(data), image_size, jpeg, header.version == 1, f"{data}, "
                       f"{min(header.count, SAMPLED)} samples", decode)
        encoding = stored
    elif encoding is not None:
        _check_decode(decode, encoding)
        side = max_side or 256
        bytes_per_sample, bytes_reason = stated_bytes(encoding, side)
        with tempfile.TemporaryDirectory(prefix="gpufeed-plan-") as folder:
            packed = _generated_pack(Path(folder), side, encoding)
            rates = _rates(packed, image_size, encoding == "jpeg", False,
                           f"{GENERATED} generated {encoding} images at max side {side}, not photographs", decode)
    else:
        return None
    rate, reason, other, other_reason = rates
    return InputCost(bytes_per_sample, bytes_reason, encoding, decode, rate, reason, other, other_reason)
