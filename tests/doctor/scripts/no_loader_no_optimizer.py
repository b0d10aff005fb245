"""Hand-written SGD on batches sliced from tensors: no DataLoader and no torch.optim."""

import torch
from torch import nn


def main(steps: int = 40, batch_size: int = 32, lr: float = 0.05) -> None:
    torch.manual_seed(0)
    inputs, targets = torch.randn(steps * batch_size, 8), torch.randn(steps * batch_size, 1)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        loss = ((model(inputs[batch]) - targets[batch]) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= lr * parameter.grad
                parameter.grad = None


if __name__ == "__main__":
    main()
