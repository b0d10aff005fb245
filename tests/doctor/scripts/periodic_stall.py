"""A loop that stops every 10th step for 0.2 s ("logging": writing a file, printing, a slow metric)."""

import time

import torch
from torch import nn


def main(steps: int = 40, batch_size: int = 32) -> None:
    torch.manual_seed(0)
    inputs, labels = torch.randn(batch_size * 4, 64), torch.randint(0, 10, (batch_size * 4,))
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        batch = slice((step % 4) * batch_size, (step % 4 + 1) * batch_size)
        loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            time.sleep(0.2)  # logging


if __name__ == "__main__":
    main()
