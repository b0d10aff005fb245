"""An endless loop: `while True` over itertools.cycle(loader) with a step counter kept by hand, DataLoader workers
started with multiprocessing_context="spawn" (each worker imports this file afresh), and sys.exit(0) once
--max-steps updates are done. itertools.cycle keeps every batch of the first pass and replays them afterwards,
so only the first pass asks the loader."""

import argparse
import itertools
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    """Each sample costs about 1 ms to 'decode'."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int):
        time.sleep(0.001)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=generator), index % 5


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Slow(), batch_size=16, shuffle=True, num_workers=args.workers,
                        multiprocessing_context="spawn" if args.workers else None)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 5))
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    step = 0
    batches = itertools.cycle(loader)
    while True:
        inputs, labels = next(batches)
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step >= args.max_steps:
            break
    print(f"finished {step} steps, last loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
