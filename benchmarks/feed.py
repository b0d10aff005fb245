"""Feed benchmark: the same images as a PNG folder and as a .gpuf, read for two epochs, in one run.

    python benchmarks/feed.py [--count 20000] [--batch-size 256] [--epochs 2] [--repeats 3]

(a) a standard PyTorch DataLoader over the PNG folder: a Dataset that opens each file with PIL, converts it to
    float, pads and crops and flips it per sample, and normalises; at num_workers 0 and the number of cores;
(b) `Feed(device="cpu")` delivering the same float batches (crop + flip + normalise);
(c) the uint8 staging alone, i.e. what the GPU path asks of the CPU (gather into a ring slot, labels, draws);
FFCV is not run here (it does not install on this machine); its figures on the same images are anchors in
RESULTS.md.
Prints images/s (median and spread of the repeats) and the ratios (b)/(a-best), (c)/(a-best).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.staging import SlotPool, Staging
from gpufeed.data.feed.transfer import HostSlot
from gpufeed.data.format.reader import open_packed
from gpufeed.data.pack.builtin import CLASSES, make_builtin
from gpufeed.data.pack.sources import pack_arrays


class PngFolder(torch.utils.data.Dataset):
    """What a typical training script does: one file per sample, per-sample float transforms."""

    def __init__(self, files: list[tuple[str, int]], mean, std):
        self.files = files
        self.mean = torch.tensor(mean).view(3, 1, 1) / 255
        self.std = torch.tensor(std).view(3, 1, 1) / 255

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        path, label = self.files[index]
        with Image.open(path) as image:
            array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
        tensor = torch.from_numpy(array).permute(2, 0, 1)  # (C, H, W)
        padded = torch.nn.functional.pad(tensor, (4, 4, 4, 4))
        top, left = np.random.randint(0, 9, size=2)
        crop = padded[:, top:top + 32, left:left + 32]
        if np.random.rand() < 0.5:
            crop = crop.flip(2)
        return (crop - self.mean) / self.std, label


def write_folder(images: np.ndarray, labels: np.ndarray, folder: Path) -> list[tuple[str, int]]:
    files = []
    for name in CLASSES:
        (folder / name).mkdir(parents=True, exist_ok=True)
    for index, (image, label) in enumerate(zip(images, labels, strict=True)):
        path = folder / CLASSES[label] / f"{index:06d}.png"
        Image.fromarray(image).save(path)
        files.append((str(path), int(label)))
    return files


def rate(iterate, epochs: int) -> float:
    """Images per second over `epochs` passes of `iterate()`."""
    start, seen = time.perf_counter(), 0
    for _ in range(epochs):
        for images, _labels in iterate():
            seen += len(images)
    return seen / (time.perf_counter() - start)


def staging_only(feed: Feed):
    """Yield (images, labels) slots exactly as the GPU path stages them, without the copy to a device."""
    stop = threading.Event()
    channels, height, width = feed.sample_shape

    def make_slot() -> HostSlot:
        return HostSlot.empty(feed.batch_size, (height, width, channels))

    pool = SlotPool(make_slot, feed.prefetch + feed.workers, stop)
    images = None if feed.cropper is not None else feed.dataset.images_tensor()  # resized crops decode per sample
    order = feed.order()

    def prepare(index: int):
        slot = pool.acquire()
        return slot, feed.stage_batch(images, order, feed.epoch, index, slot)

    for _index, (slot, size) in Staging(prepare, 0, len(order), feed.workers, feed.prefetch, stop):
        yield slot.images[:size], slot.labels[:size]
        pool.release(slot)


def summarise(name: str, rates: list[float]) -> tuple[str, float]:
    median = statistics.median(rates)
    spread = (max(rates) - min(rates)) / median if len(rates) > 1 else 0.0
    print(f"  {name:<46} {median:>12,.0f} img/s   (min {min(rates):,.0f}, max {max(rates):,.0f}, spread {spread:.0%})")
    return name, median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"feed benchmark: {args.count} images 32x32x3 (built-in), batch {args.batch_size}, {args.epochs} epochs, "
          f"{args.repeats} repeats; {platform.processor() or platform.machine()}, {cores} cores, "
          f"torch {torch.__version__}, numpy {np.__version__}, python {platform.python_version()}")
    images, labels = make_builtin(args.count, "train")
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "png"
        started = time.perf_counter()
        files = write_folder(images, labels, folder)
        print(f"  wrote {len(files)} PNG files in {time.perf_counter() - started:.1f} s")
        packed = Path(temporary) / "data.gpuf"
        result = pack_arrays(images, labels, packed, classes=CLASSES)
        print(f"  packed the arrays in {result.seconds:.2f} s ({result.bytes_written / 2**20:.1f} MiB)")
        dataset = open_packed(packed)
        results = {}
        for workers in (0, cores):
            folder_dataset = PngFolder(files, dataset.mean, dataset.std)
            loader = torch.utils.data.DataLoader(folder_dataset, batch_size=args.batch_size, shuffle=True,
                                                 num_workers=workers, drop_last=True, persistent_workers=workers > 0)
            rates = [rate(lambda loader=loader: loader, args.epochs) for _ in range(args.repeats)]
            results.update([summarise(f"(a) DataLoader, PNG, num_workers={workers}", rates)])
        for workers in (1, cores):
            feed = Feed(dataset, args.batch_size, device="cpu", workers=workers)
            rates = [rate(lambda feed=feed: feed, args.epochs) for _ in range(args.repeats)]
            results.update([summarise(f"(b) Feed(device='cpu'), float, workers={workers}", rates)])
        feed = Feed(dataset, args.batch_size, device="cpu", workers=1)
        rates = [rate(lambda: staging_only(feed), args.epochs) for _ in range(args.repeats)]
        results.update([summarise("(c) uint8 staging (the GPU path's CPU work)", rates)])
    best_loader = max(value for key, value in results.items() if key.startswith("(a)"))
    best_feed = max(value for key, value in results.items() if key.startswith("(b)"))
    staging = results["(c) uint8 staging (the GPU path's CPU work)"]
    print(f"  ratio (b)/(a-best) = {best_feed / best_loader:.1f}x    ratio (c)/(a-best) = {staging / best_loader:.1f}x")
    print("  FFCV: not compared in this run (not installed; see the anchors in benchmarks/RESULTS.md)")


if __name__ == "__main__":
    main()
