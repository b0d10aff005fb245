"""The issue's first case: a plain MLP (784-256-10) trained with Adam at batch 2, DataLoader with num_workers=0. The
step waits some of its time for data, but most of it is fixed per-step cost: the batch of 2 is the cause."""

import torch
from torch import nn


def main(samples: int = 4000, batch_size: int = 2) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(samples, 784), torch.randint(0, 10, (samples,)))
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for images, labels in loader:
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
