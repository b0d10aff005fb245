"""GPU JPEG decode benchmark (needs a CUDA GPU and nvImageCodec): `Feed(decode="gpu")` against `decode="cpu"`.

    python benchmarks/gpu_decode.py [--count 2000] [--batch-size 256] [--image-size 224] [--repeats 3]
                                    [--workers N] [--json FILE]

The data: `--count` synthetic photographs made here (no network): each side uniform on 240..360 px, smooth
waves plus mild pixel noise (so the entropy coding has work: about 24 KB a file), saved by simplejpeg at
quality 90, 4:2:0, into a version-2 `.gpuf` in a temporary folder. Both feeds give RandomResizedCrop `--image-size`
plus a flip, normalised float32 channels_last (B, 3, H, W) on cuda, `workers` CPU threads each (the staging threads
of the CPU path; nvImageCodec's CPU threads on the GPU path, whose staging threads only gather bytes).
Per feed: one warm-up epoch, then `--repeats` timed epochs, each ended by `torch.cuda.synchronize()`: img/s as the
median and the min-max over the repeats, and the ratio GPU / CPU. Then the correctness of the first batch of
epoch 0: both feeds with normalize=False, the mean and the largest absolute difference in 0..255 levels.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import simplejpeg
import torch

from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.gpu.decoder import DecoderUnavailable, load_nvimgcodec
from gpufeed.data.format.reader import open_packed
from gpufeed.data.format.statistics import channel_sums
from gpufeed.data.pack.table_writer import TableWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feed_gpu import epoch_rate  # noqa: E402

SIDES = (240, 360)
QUALITY = 90
CLASSES = 10


def synthetic_photo(rng: np.random.Generator, height: int, width: int, noise: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 3): low-frequency colour waves with random phases, plus a random window of `noise` (float32
    (S, S, 3), a few levels)."""
    rows = np.arange(height, dtype=np.float32)[:, None, None]
    columns = np.arange(width, dtype=np.float32)[None, :, None]
    phase, period = rng.uniform(0, 6.3, 3).astype(np.float32), rng.uniform(8, 40, 3).astype(np.float32)
    waves = np.sin(rows / period + phase) * np.cos(columns / (period * 1.3) - phase)  # (H, W, 3)
    top, left = (int(v) for v in rng.integers(0, len(noise) - max(height, width) + 1, 2))
    return np.clip(128 + 90 * waves + noise[top:top + height, left:left + width], 0, 255).astype(np.uint8)


def write_dataset(path: Path, count: int, seed: int = 0) -> float:
    """Pack `count` synthetic JPEGs into `path`; returns their mean size in bytes."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 6, (SIDES[1] + 64, SIDES[1] + 64, 3)).astype(np.float32)
    total = 0
    with TableWriter(path, 3, [str(c) for c in range(CLASSES)], count, "jpeg", quality=QUALITY) as writer:
        for index in range(count):
            height, width = (int(v) for v in rng.integers(SIDES[0], SIDES[1] + 1, 2))
            image = synthetic_photo(rng, height, width, noise)
            blob = simplejpeg.encode_jpeg(image, QUALITY, "RGB", "420")
            writer.append(blob, height, width, index % CLASSES, sums=channel_sums(image[None]))
            total += len(blob)
    return total / count


def measure(feed: Feed, repeats: int) -> list[float]:
    epoch_rate(feed)  # warm-up: the caching allocator, nvJPEG's buffers, the page cache
    return [epoch_rate(feed) for _ in range(repeats)]


def first_batch_levels(dataset, decode: str, options: dict) -> np.ndarray:
    feed = Feed(dataset, **{**options, "normalize": False, "decode": decode})
    images, _ = next(iter(feed))
    return (images.float() * 255).round().permute(0, 2, 3, 1).cpu().numpy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU; nothing measured")
        return 2
    try:
        codec = load_nvimgcodec()
    except DecoderUnavailable as error:
        print(f"GPU decode not measured: {error.reason}; pip install 'gpufeed[nvjpeg]'")
        return 2
    print(f"device {torch.cuda.get_device_name()} | torch {torch.__version__} (CUDA {torch.version.cuda}) | "
          f"nvImageCodec {codec.__version__} | simplejpeg {simplejpeg.__version__} | python "
          f"{platform.python_version()} | {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "photos.gpuf"
        start = time.perf_counter()
        mean_bytes = write_dataset(path, arguments.count)
        print(f"data: {arguments.count} JPEGs, sides {SIDES[0]}-{SIDES[1]} px, quality {QUALITY} 4:2:0, "
              f"{mean_bytes / 1024:.1f} KB mean (packed in {time.perf_counter() - start:.1f} s)")
        dataset = open_packed(path)
        options = dict(batch_size=arguments.batch_size, device="cuda", augment="random-resized-crop",
                       image_size=arguments.image_size, workers=arguments.workers, seed=0)
        print(f"feed: batch {arguments.batch_size}, RandomResizedCrop {arguments.image_size} + flip, float32 "
              f"channels_last, {arguments.workers} workers; {arguments.repeats} timed epochs after one warm-up")
        rates = {}
        for decode in ("cpu", "gpu"):
            feed = Feed(dataset, **{**options, "decode": decode})
            for note in feed.notes:
                print(f"  note ({decode}): {note}")
            rates[decode] = measure(feed, arguments.repeats)
            values = rates[decode]
            print(f"decode={decode}: {statistics.median(values):8.0f} img/s (min {min(values):.0f}, max "
                  f"{max(values):.0f})")
        ratio = statistics.median(rates["gpu"]) / statistics.median(rates["cpu"])
        print(f"ratio gpu / cpu: {ratio:.2f}x")
        gpu, cpu = first_batch_levels(dataset, "gpu", options), first_batch_levels(dataset, "cpu", options)
        difference = np.abs(gpu - cpu)
        print(f"first batch, gpu against cpu decode: mean abs diff {difference.mean():.3f} levels, max "
              f"{difference.max():.0f}, {100 * (difference > 2).mean():.2f}% of values off by more than 2")
    if arguments.json:
        arguments.json.write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "nvimgcodec": codec.__version__,
            "count": arguments.count, "batch_size": arguments.batch_size, "image_size": arguments.image_size,
            "workers": arguments.workers, "rates_img_per_s": rates, "ratio_gpu_to_cpu": ratio,
            "first_batch_mean_abs_diff": float(difference.mean()), "first_batch_max_abs_diff": float(difference.max()),
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
