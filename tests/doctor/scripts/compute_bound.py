"""A loop whose compute dominates: the data is in memory already, the model is a wide MLP."""

import torch
from torch import nn


def main(steps: int = 40, batch_size: int = 64) -> None:
    torch.manual_seed(0)
    inputs, labels = torch.randn(steps * batch_size, 512), torch.randint(0, 10, (steps * batch_size,))
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
