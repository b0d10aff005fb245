"""FFCV's side of `feed_jpeg.py`, run by a Python that has ffcv installed (it needs no gpufeed):

    /tmp/ffcv-venv/bin/python benchmarks/feed_jpeg_ffcv.py FOLDER OUT.beton [--batch-size 256] [--workers 2]
                                                           [--epochs 2] [--repeats 3] [--max-side 256] [--quality 90]

Writes FOLDER (one subfolder per class) with FFCV's ImageNet recipe, `RGBImageField(write_mode="jpg",
max_resolution=256, jpeg_quality=90)`, then reads it with `RandomResizedCropRGBImageDecoder((224, 224))`,
`RandomHorizontalFlip`, `NormalizeImage(mean, std, np.float32)` (on the CPU it must come before `ToTensor`),
`ToTensor`, `ToTorchImage` (channels_last), order RANDOM, drop_last. Prints one JSON line: img/s per repeat
and their median, the file's bytes, the write time, the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from importlib import metadata

import numpy as np
import torch
from ffcv.fields import IntField, RGBImageField
from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
from ffcv.loader import Loader, OrderOption
from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage
from ffcv.writer import DatasetWriter
from PIL import Image

IMAGE_SIZE = 224


class Folder:
    """(PIL RGB image, label) per file of a folder with one subfolder per class, as FFCV's writer reads them."""

    def __init__(self, folder: str):
        classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
        self.files = [(os.path.join(folder, name, file), label) for label, name in enumerate(classes)
                      for file in sorted(os.listdir(os.path.join(folder, name)))]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        path, label = self.files[index]
        with Image.open(path) as image:
            return image.convert("RGB"), label


def channel_statistics(dataset: Folder) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (0..255) of the source files, for NormalizeImage."""
    total, squares, pixels = np.zeros(3), np.zeros(3), 0
    for index in range(len(dataset)):
        array = np.asarray(dataset[index][0], dtype=np.float64).reshape(-1, 3)
        total += array.sum(0)
        squares += (array ** 2).sum(0)
        pixels += len(array)
    mean = total / pixels
    return mean, np.sqrt(squares / pixels - mean ** 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("destination")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-side", type=int, default=256)
    parser.add_argument("--quality", type=int, default=90)
    args = parser.parse_args()
    dataset = Folder(args.folder)
    started = time.perf_counter()
    writer = DatasetWriter(args.destination, {
        "image": RGBImageField(write_mode="jpg", max_resolution=args.max_side, jpeg_quality=args.quality),
        "label": IntField()}, num_workers=args.workers)
    writer.from_indexed_dataset(dataset)
    write_s = time.perf_counter() - started
    mean, std = channel_statistics(dataset)
    pipelines = {
        "image": [RandomResizedCropRGBImageDecoder((IMAGE_SIZE, IMAGE_SIZE)), RandomHorizontalFlip(),
                  NormalizeImage(mean, std, np.float32), ToTensor(), ToTorchImage()],
        "label": [IntDecoder(), ToTensor(), Squeeze()],
    }
    loader = Loader(args.destination, batch_size=args.batch_size, num_workers=args.workers,
                    order=OrderOption.RANDOM, drop_last=True, pipelines=pipelines, os_cache=True)
    for images, _labels in loader:  # warm-up epoch: numba compiles the pipeline
        assert images.shape[1:] == (3, IMAGE_SIZE, IMAGE_SIZE) and images.dtype == torch.float32
    rates = []
    for _ in range(args.repeats):
        start, seen = time.perf_counter(), 0
        for _ in range(args.epochs):
            for images, _labels in loader:
                seen += len(images)
        rates.append(seen / (time.perf_counter() - start))
    print(json.dumps({"rate": statistics.median(rates), "rates": rates, "file_bytes": os.path.getsize(args.destination),
                      "write_s": write_s, "version": metadata.version("ffcv"), "torch": torch.__version__,
                      "numpy": np.__version__}))


if __name__ == "__main__":
    main()
