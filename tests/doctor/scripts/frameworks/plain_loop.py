"""A plain PyTorch loop whose DataLoader call spans lines. --sleep-ms makes each sample slow to load; --width
narrows the model (so that loading stays most of the step however slow a busy machine makes it)."""

import argparse

import torch
from framework_parts import TokenIds, classifier
from torch.utils.data import DataLoader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--width", type=int, default=2048)
    options = parser.parse_args()
    loader = DataLoader(  # doctor: site
        TokenIds(sleep_ms=options.sleep_ms),
        batch_size=8,
        shuffle=True,
        num_workers=options.workers,
    )
    model = classifier(options.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in loader:
        loss = torch.nn.functional.cross_entropy(model(batch["input_ids"]), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
