"""A script that never reaches a training step: it waits (for a server, a lock, a download) for 100 s."""

import time

import torch
from torch import nn

if __name__ == "__main__":
    model = nn.Linear(4, 2)
    model(torch.randn(3, 4))  # one forward: "seen" in the report, but no training step
    time.sleep(100)
