"""GPU feed benchmark (needs a CUDA GPU): what the feed delivers to a GPU, and how busy it keeps the GPU.

    python benchmarks/feed_gpu.py [--count 50000] [--batch-size 512] [--repeats 3]

In one run, on the built-in images packed to a .gpuf on disk:
1. staging rate: uint8 batches gathered into the pinned ring by the staging threads (no copy);
2. feed rate through the pinned ring and the copy stream (resident=False), and with the dataset resident on
   the GPU (resident=True), both producing augmented bf16 batches, synchronised at the end of each epoch;
3. H2D rate of the ring: bytes of uint8 images per second in (2, ring);
4. the CNN fed by the feed (ring) against the same CNN fed from tensors already on the GPU (the upper bound),
   samples/s in bf16, and the share of wall time the GPU was busy (CUDA events around each step);
5. the same busy share for ResNet-18 fed by the ring.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gpufeed.data.feed.feed import Feed
from gpufeed.data.format.reader import open_packed
from gpufeed.data.pack.builtin import CLASSES, make_builtin
from gpufeed.data.pack.sources import pack_arrays
from gpufeed.measure.timing import DeviceBusyTimer
from gpufeed.train.models import build_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feed import staging_only  # noqa: E402


def epoch_rate(feed: Feed) -> float:
    torch.cuda.synchronize()
    start, seen = time.perf_counter(), 0
    for images, _labels in feed:
        seen += len(images)
    torch.cuda.synchronize()
    return seen / (time.perf_counter() - start)


def train_rate(model_name: str, batches, steps: int) -> tuple[float, float]:
    """(samples/s, GPU busy share) of bf16 training steps over `batches` (an iterable of (images, labels))."""
    model = build_model(model_name, (3, 32, 32), len(CLASSES)).cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    timer = DeviceBusyTimer(torch.device("cuda"))
    seen, iterator = 0, iter(batches)
    for step in range(steps + 5):
        if step == 5:  # warm-up done
            torch.cuda.synchronize()
            timer.collect()
            start, seen = time.perf_counter(), 0
        images, labels = next(iterator)
        timer.start()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        timer.stop()
        seen += len(labels)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return seen / seconds, timer.collect() / seconds


def endless(feed: Feed):
    while True:
        yield from feed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=50000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU; see benchmarks/feed.py for the CPU")
    print(f"GPU feed benchmark: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{args.count} images 32x32x3, batch {args.batch_size}, {args.repeats} repeats")
    images, labels = make_builtin(args.count, "train")
    with tempfile.TemporaryDirectory() as temporary:
        path = Path(temporary) / "train.gpuf"
        pack_arrays(images, labels, path, classes=CLASSES)
        dataset = open_packed(path, ram_budget_bytes=0)  # memory-mapped: staged from the page cache
        options = dict(device="cuda", dtype=torch.bfloat16)
        ring = Feed(dataset, args.batch_size, resident=False, **options)
        resident = Feed(dataset, args.batch_size, resident=True, **options)
        staging = Feed(dataset, args.batch_size, device="cpu", workers=1)
        rates = {
            "staging only (uint8 into the ring)": _staging_rates(staging, args),
            "feed, pinned ring + copy stream": [epoch_rate(ring) for _ in range(args.repeats)],
            "feed, dataset resident on the GPU": [epoch_rate(resident) for _ in range(args.repeats)],
        }
        for name, values in rates.items():
            print(f"  {name:<40} {statistics.median(values):>12,.0f} img/s "
                  f"(min {min(values):,.0f}, max {max(values):,.0f})")
        ring_rate = statistics.median(rates["feed, pinned ring + copy stream"])
        print(f"  H2D through the ring: {ring_rate * dataset.bytes_per_sample / 1e9:.2f} GB/s of uint8 images")
        on_gpu = [(torch.randn(args.batch_size, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last),
                   torch.randint(0, 10, (args.batch_size,), device="cuda"))] * (args.steps + 5)
        for model_name in ("cnn", "resnet18"):
            fed_rate, fed_busy = train_rate(model_name, endless(ring), args.steps)
            line = f"  {model_name}: fed by the ring {fed_rate:,.0f} samples/s, GPU busy {fed_busy:.1%}"
            if model_name == "cnn":
                bound_rate, bound_busy = train_rate(model_name, on_gpu, args.steps)
                line += f"; from tensors on the GPU {bound_rate:,.0f} samples/s ({fed_rate / bound_rate:.2f} of it)"
            print(line)


def _staging_rates(feed: Feed, args) -> list[float]:
    rates = []
    for _ in range(args.repeats):
        start, seen = time.perf_counter(), 0
        for images, _labels in staging_only(feed):
            seen += len(images)
        rates.append(seen / (time.perf_counter() - start))
    return rates


if __name__ == "__main__":
    main()
