"""Training-loop benchmark: a standard PyTorch loop against `gpufeed train`'s loop, same model and data, one run.

    python benchmarks/train.py [--count 12800] [--batch-size 256] [--model cnn] [--repeats 2]

(a) the loop most scripts have: a DataLoader over a PNG folder with per-sample PIL decode and float transforms
    (pad, crop, flip, normalise), fp32, contiguous tensors, AdamW; num_workers = the number of cores;
(b) `gpufeed.train` on the same images packed as a .gpuf: the feed, channels_last, and `--precision auto`
    (on a CPU with bf16 instructions it measures bf16 against fp32 and keeps the faster).
Both train one epoch over the same images; printed: samples/s and the share of wall time spent waiting for
data (median of the repeats, with min and max), and the ratio (b)/(a).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feed import PngFolder, write_folder  # noqa: E402  (the same per-sample Dataset as the feed benchmark)

from gpufeed.data.format.reader import open_packed  # noqa: E402
from gpufeed.data.pack.builtin import CLASSES, make_builtin  # noqa: E402
from gpufeed.data.pack.sources import pack_arrays  # noqa: E402
from gpufeed.train.config import TrainConfig  # noqa: E402
from gpufeed.train.loop import train  # noqa: E402
from gpufeed.train.models import build_model  # noqa: E402


def standard_loop(files, mean, std, model_name: str, batch_size: int, workers: int) -> tuple[float, float]:
    """One epoch of the usual loop; returns (samples/s, data-wait share)."""
    torch.manual_seed(0)
    model = build_model(model_name, (3, 32, 32), len(CLASSES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=5e-4)
    loader = torch.utils.data.DataLoader(PngFolder(files, mean, std), batch_size=batch_size, shuffle=True,
                                         num_workers=workers, drop_last=True)
    waited, samples = 0.0, 0
    start = time.perf_counter()
    iterator = iter(loader)
    while True:
        before = time.perf_counter()
        batch = next(iterator, None)
        waited += time.perf_counter() - before
        if batch is None:
            break
        images, labels = batch
        loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        samples += len(labels)
    seconds = time.perf_counter() - start
    return samples / seconds, waited / seconds


def gpufeed_loop(packed: Path, model_name: str, batch_size: int) -> tuple[float, float, str]:
    result = train(TrainConfig(data=str(packed), validation=str(packed), model=model_name, epochs=1,
                               batch_size=batch_size, device="cpu", log_every_steps=10))
    return result.samples_per_s, result.data_wait_fraction, result.precision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=12800)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"train benchmark: model {args.model}, {args.count} images 32x32x3 (built-in), batch {args.batch_size}, "
          f"1 epoch, {args.repeats} repeats; {platform.machine()}, {cores} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op threads")
    images, labels = make_builtin(args.count, "train")
    with tempfile.TemporaryDirectory() as temporary:
        files = write_folder(images, labels, Path(temporary) / "png")
        packed = Path(temporary) / "train.gpuf"
        pack_arrays(images, labels, packed, classes=CLASSES)
        dataset = open_packed(packed)
        standard, ours = [], []
        for _ in range(args.repeats):
            standard.append(standard_loop(files, dataset.mean, dataset.std, args.model, args.batch_size, cores))
            ours.append(gpufeed_loop(packed, args.model, args.batch_size))
    for name, runs in (("(a) DataLoader + per-sample transforms, fp32", standard),
                       (f"(b) gpufeed train ({ours[0][2]}, channels_last)", ours)):
        rates = [run[0] for run in runs]
        waits = [run[1] for run in runs]
        print(f"  {name:<48} {statistics.median(rates):>8,.0f} samples/s (min {min(rates):,.0f}, max "
              f"{max(rates):,.0f})   data wait {statistics.median(waits):.1%}")
    ratio = statistics.median(r[0] for r in ours) / statistics.median(r[0] for r in standard)
    print(f"  ratio (b)/(a) = {ratio:.2f}x")


if __name__ == "__main__":
    main()
