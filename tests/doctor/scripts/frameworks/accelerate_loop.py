"""A training loop under Hugging Face accelerate: the DataLoader built in the script, then passed to
accelerator.prepare (which wraps a new one). --sleep-ms makes each sample slow to load (the input-bound run);
--width narrows the model (there, so that loading stays most of the step however slow a busy machine makes it)."""

import argparse

import torch
from accelerate import Accelerator
from framework_parts import TokenIds, classifier
from torch.utils.data import DataLoader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--width", type=int, default=2048)
    options = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    loader = DataLoader(TokenIds(sleep_ms=options.sleep_ms), batch_size=8, shuffle=True)  # doctor: site
    model = classifier(options.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, batch in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(batch["input_ids"]), batch["labels"])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if step + 1 == options.steps:
            break


if __name__ == "__main__":
    main()
