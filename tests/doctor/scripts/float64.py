"""A loop in float64 throughout: the data came from numpy (float64) and the model was made to match it."""

import numpy as np
import torch
from torch import nn


def main(steps: int = 40, batch_size: int = 64) -> None:
    generator = np.random.default_rng(0)
    inputs = torch.from_numpy(generator.standard_normal((steps * batch_size, 32)))  # float64, as numpy makes it
    labels = torch.from_numpy(generator.integers(0, 4, steps * batch_size))
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
