"""The copy-on-read Dataset (pytorch/pytorch#13246): a list of Python tuples (a path and a label per sample), read
shuffled by 2 forked DataLoader workers. Each read writes the tuple's reference count, so every worker copies the
pages it reads, and its private memory grows through the epoch. argv[1]: the number of samples."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Paths(Dataset):
    def __init__(self, samples: int):
        self.items = [(f"/data/images/{index:08d}.jpg", index % 1000) for index in range(samples)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        path, label = self.items[index]
        return torch.full((8,), float(len(path))), label % 4


def main() -> None:
    torch.manual_seed(0)
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    loader = DataLoader(Paths(samples), batch_size=256, shuffle=True, num_workers=2,
                        multiprocessing_context="fork")
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for inputs, labels in loader:
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
