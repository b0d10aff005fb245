"""A deep stack of tiny layers: 100 Linear(8, 8) on batches of 4. Each operator does a few hundred flops, so the
step is the fixed cost of dispatching some thousand operators and the Python between them."""

import torch
from torch import nn


def main(steps: int = 60, batch_size: int = 4, layers: int = 100) -> None:
    torch.manual_seed(0)
    inputs, targets = torch.randn(steps * batch_size, 8), torch.randn(steps * batch_size, 8)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(layers)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        loss = nn.functional.mse_loss(model(inputs[batch]), targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
