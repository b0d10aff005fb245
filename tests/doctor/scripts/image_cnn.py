"""gpufeed's CIFAR-style CNN (train/models.py) trained on in-memory 3x32x32 images, a batch of 64 sliced from a tensor
per step: compute dominates (no loader, no copy), so the doctor's verdict is compute_bound, quiet or loaded."""

import argparse

import torch
from torch import nn

from gpufeed.train.models import build_model

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch", type=int, default=64)
options = parser.parse_args()

torch.manual_seed(0)
images = torch.randn(options.steps * options.batch, 3, 32, 32)
labels = torch.randint(0, 10, (options.steps * options.batch,))
model = build_model("cnn", (3, 32, 32), 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(options.steps):
    batch = slice(step * options.batch, (step + 1) * options.batch)
    loss = nn.functional.cross_entropy(model(images[batch]), labels[batch])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
