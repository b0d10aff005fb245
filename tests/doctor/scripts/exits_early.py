"""A loop that calls sys.exit(0) after 2 steps (a smoke-test flag left on, say)."""

import sys

import torch
from torch import nn


def main() -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step + 1 == 2:
            sys.exit(0)


if __name__ == "__main__":
    main()
