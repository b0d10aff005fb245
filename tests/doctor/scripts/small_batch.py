"""Batches of 2 through a small model: each step is a fraction of a millisecond of fixed per-step cost."""

import torch
from torch import nn


def main(steps: int = 200, batch_size: int = 2) -> None:
    torch.manual_seed(0)
    inputs, labels = torch.randn(steps * batch_size, 32), torch.randint(0, 4, (steps * batch_size,))
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
