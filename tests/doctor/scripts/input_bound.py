"""A loop that waits for its data: every sample takes 5 ms to load and the model is tiny. The first argument is
the DataLoader's num_workers (default 0: loading runs inside the loop)."""

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int):
        time.sleep(0.005)  # decoding a file, say
        return torch.randn(16), index % 4


def main(workers: int = 0) -> None:
    torch.manual_seed(0)
    loader = DataLoader(SlowDataset(), batch_size=4, shuffle=True, num_workers=workers)
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, labels in loader:
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
