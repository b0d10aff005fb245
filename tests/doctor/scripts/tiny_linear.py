"""A least-squares fit with Linear(5, 1) on batches of 32: 640 FLOPs a step (the forward's addmm, 2 x 32 x 5 x 1,
and the backward's weight gradient, the same again; the input needs no gradient), a fraction of a millisecond of
per-operator dispatch. No sleeps, no loader: the data is in memory."""

import torch
from torch import nn


def main(steps: int = 300, batch_size: int = 32) -> None:
    torch.manual_seed(0)
    weights = torch.tensor([[1.0, -2.0, 0.5, 3.0, -1.0]])
    inputs = torch.randn(steps * batch_size, 5)
    targets = inputs @ weights.T + 0.1 * torch.randn(steps * batch_size, 1)
    model = nn.Linear(5, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        loss = nn.functional.mse_loss(model(inputs[batch]), targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
