"""A loop whose loader's time is known part by part: every sample sleeps --getitem-ms in the Dataset's
__getitem__, every batch --collate-ms in the collate function (`slow_collate`, module level so that spawned
workers unpickle it), and with --unpickle-ms every batch carries a `Parcel` that takes that long to unpickle in
the process that receives it (the hand-over from a worker). Batches of 4 samples in order: sample i is
(torch.full((8,), i), i). The model is tiny, so the loop waits for its data.

--record PATH saves every batch the loop received (torch.save of `describe(batch)`: types and values, a Parcel
by its seconds, so that the file loads outside this script), also when the doctor stops the loop.
"""

import argparse
import functools
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

BATCH = 4


class Sleepy(Dataset):
    def __init__(self, getitem_s: float):
        self.getitem_s = getitem_s

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int):
        if self.getitem_s:
            time.sleep(self.getitem_s)  # decoding a file, say
        return torch.full((8,), float(index)), index


class Parcel:
    """Slow to unpickle: `seconds` of sleep in the process that receives it."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __reduce__(self):
        return arrive, (self.seconds,)

    def __eq__(self, other) -> bool:
        return type(other) is Parcel and other.seconds == self.seconds


def arrive(seconds: float) -> Parcel:
    time.sleep(seconds)
    return Parcel(seconds)


def slow_collate(samples, seconds: float, parcel_s: float):
    if seconds:
        time.sleep(seconds)  # tokenising and padding a batch, say
    batch = default_collate(samples)
    return (*batch, Parcel(parcel_s)) if parcel_s else batch


def describe(batch) -> tuple:
    """(type name, [(type name, value) for each item]): a tensor as itself, a Parcel by its seconds."""
    return type(batch).__name__, [(type(item).__name__, item.seconds if type(item) is Parcel else item)
                                  for item in batch]


def make_loader(args) -> DataLoader:
    collate = functools.partial(slow_collate, seconds=args.collate_ms / 1000, parcel_s=args.unpickle_ms / 1000)
    return DataLoader(Sleepy(args.getitem_ms / 1000), batch_size=BATCH, num_workers=args.workers,
                      collate_fn=collate, multiprocessing_context=args.context if args.workers else None)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--context", default="fork", choices=("fork", "spawn"))
    parser.add_argument("--getitem-ms", type=float, default=0.0)
    parser.add_argument("--collate-ms", type=float, default=0.0)
    parser.add_argument("--unpickle-ms", type=float, default=0.0)
    parser.add_argument("--record")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    received = []
    try:
        for batch in make_loader(args):
            received.append(batch)
            inputs, labels = batch[0], batch[1]
            loss = nn.functional.cross_entropy(model(inputs), labels % 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        if args.record:
            torch.save([describe(batch) for batch in received], args.record)


if __name__ == "__main__":
    main(sys.argv[1:])
