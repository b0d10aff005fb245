"""Float32 images copied to the GPU from pageable memory every step, into a tiny model.

The images (3x256x256 float32) sit in one tensor in CPU memory; the dataset hands out whole batches of 64 as
slices of it (50 MiB each, no copy on the host), and the loop moves each with `.to("cuda")`: no pinned memory, so
the driver stages every byte through its own buffer while the host waits. The model (one strided convolution and
a linear layer) takes the GPU well under a millisecond, so the copy is most of each step. bf16 autocast keeps
precision out of the findings.
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    """Batch `index` of images and labels held in memory: a slice of each tensor (a view, not a copy)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int):
        self.images, self.labels, self.batch_size = images, labels, batch_size

    def __len__(self) -> int:
        return len(self.images) // self.batch_size

    def __getitem__(self, index: int):
        rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.images[rows], self.labels[rows]


def main(epochs: int = 200, batch_size: int = 64) -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_pageable_copy.py needs a CUDA GPU: torch.cuda.is_available() is False")
    device = "cuda"
    torch.manual_seed(0)
    images = torch.rand(8 * batch_size, 3, 256, 256)  # 403 MB of float32 in ordinary (pageable) memory
    labels = torch.randint(0, 10, (8 * batch_size,))
    loader = DataLoader(Batches(images, labels, batch_size), batch_size=None, shuffle=True)
    model = nn.Sequential(nn.Conv2d(3, 16, kernel_size=4, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(epochs):
        for batch, target in loader:
            batch, target = batch.to(device), target.to(device)  # (64, 3, 256, 256) float32: 50 MiB a step
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(batch), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
