"""Many tiny kernels a step: 200 small Linear layers (64 -> 64, each with a ReLU) at batch 8.

Each layer's kernels take the GPU a few microseconds, less than the host needs to launch them (Python, the
dispatcher, the driver), so the GPU idles between kernels: the loop is launch-bound, about 2,000 launches a step.
The data is already on the GPU, there is no `.item()` and no copy; bf16 autocast keeps precision out of the
findings.
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F


def main(steps: int = 1000, batch_size: int = 8) -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_tiny_kernels.py needs a CUDA GPU: torch.cuda.is_available() is False")
    device = "cuda"
    torch.manual_seed(0)
    inputs, targets = torch.randn(64 * batch_size, 64, device=device), torch.randn(64 * batch_size, 64, device=device)
    model = nn.Sequential(*[layer for _ in range(200) for layer in (nn.Linear(64, 64), nn.ReLU())]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(steps):
        start = (step % 64) * batch_size
        batch, target = inputs[start:start + batch_size], targets[start:start + batch_size]
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.mse_loss(model(batch).float(), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
