"""A loop that waits for the GPU every step: the loss is read with `.item()` and printed at each step.

The model keeps the GPU busy for milliseconds a step (a head of width 8192 at batch 4096, under bf16 autocast), so
`.item()` blocks the host for much of each step; and it begins with 40 narrow layers whose kernels the host must
launch one by one, each done on the GPU sooner than the next is launched. Without the sync the host would launch
the next step's narrow layers while the GPU still works on this step's head; with it, the GPU waits for those
launches every step. The data is already on the GPU: no loader, no copies. Autocast keeps precision out of the
findings, so the sync is what there is to find.
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F


def main(steps: int = 400, batch_size: int = 4096) -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_item_sync.py needs a CUDA GPU: torch.cuda.is_available() is False")
    device = "cuda"
    torch.manual_seed(0)
    inputs = torch.randn(8 * batch_size, 256, device=device)
    labels = torch.randint(0, 1000, (8 * batch_size,), device=device)
    narrow = [layer for _ in range(40) for layer in (nn.Linear(256, 256), nn.ReLU())]
    model = nn.Sequential(*narrow, nn.Linear(256, 8192), nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU(),
                          nn.Linear(8192, 1000)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        start = (step % 8) * batch_size
        batch, target = inputs[start:start + batch_size], labels[start:start + batch_size]
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(batch), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")  # waits for the whole step to finish on the GPU


if __name__ == "__main__":
    main()
