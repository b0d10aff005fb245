"""Eight intra-op threads on a machine with fewer cores: the threads take turns on the cores."""

import torch
from torch import nn


def main(steps: int = 60, batch_size: int = 256) -> None:
    torch.set_num_threads(8)
    torch.manual_seed(0)
    inputs, labels = torch.randn(batch_size, 256), torch.randint(0, 10, (batch_size,))
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
