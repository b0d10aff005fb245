"""A DataLoader and hand-written SGD (no torch.optim): the loader's batches are the only step clock besides the
model's forward."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main(lr: float = 0.05) -> None:
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(640, 8), torch.randn(640, 1)), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    for inputs, targets in loader:
        loss = ((model(inputs) - targets) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= lr * parameter.grad
                parameter.grad = None


if __name__ == "__main__":
    main()
