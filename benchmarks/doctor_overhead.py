"""The doctor's overhead: the same training loop with and without its instrumentation, in one run.

    python benchmarks/doctor_overhead.py [--steps 60] [--repeats 5] [--batch-size 256]

A plain loop (DataLoader over in-memory tensors, the project's CNN, AdamW) runs `--steps` steps bare, then with
the doctor's hooks installed (`Instrumentation` + `Watcher`: the DataLoader iterator patch, the optimizer
step hook, the forward hooks until a clock is chosen, the background sampler), alternating, `--repeats` times.
Prints the median seconds per step of each and the ratio; the issue's target is at most 2% more.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from gpufeed.doctor.inject import Instrumentation
from gpufeed.doctor.watch import Watcher
from gpufeed.train.models import build_model


def loop(loader, model, optimizer, steps: int) -> float:
    """Seconds per step over `steps` steps (after 3 warm-up steps)."""
    iterator = iter(loader)
    for _ in range(3):
        _step(next(iterator), model, optimizer)
    started = time.perf_counter()
    for _ in range(steps):
        _step(next(iterator), model, optimizer)
    return (time.perf_counter() - started) / steps


def _step(batch, model, optimizer) -> None:
    images, labels = batch
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)
    count = args.batch_size * (args.steps + 3)
    dataset = torch.utils.data.TensorDataset(torch.randn(count, 3, 32, 32), torch.randint(0, 10, (count,)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = build_model("cnn", (3, 32, 32), 10, width=args.width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    print(f"doctor overhead: CNN width {args.width}, batch {args.batch_size}, {args.steps} steps x {args.repeats} "
          f"repeats, alternating; {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    bare, watched = [], []
    for _ in range(args.repeats):
        bare.append(loop(loader, model, optimizer, args.steps))
        watcher = Watcher(steps=args.steps * 10, warmup=0)  # never done: the loop, not the doctor, ends the run
        watcher.start()  # the background sampler runs too, as under gpufeed doctor
        hooks = Instrumentation(watcher)
        hooks.install()
        try:
            watched.append(loop(loader, model, optimizer, args.steps))
        finally:
            hooks.remove()
            watcher.close()
    for name, values in (("bare", bare), ("with the doctor's hooks", watched)):
        print(f"  {name:<26} {statistics.median(values) * 1e3:8.2f} ms/step (min {min(values) * 1e3:.2f}, "
              f"max {max(values) * 1e3:.2f})")
    ratios = [w / b for w, b in zip(watched, bare, strict=True)]
    print(f"  overhead: median ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) "
          f"of bare step time; target <= 1.02")


if __name__ == "__main__":
    main()
