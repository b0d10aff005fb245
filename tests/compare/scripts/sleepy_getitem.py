"""A small training loop whose Dataset's __getitem__ sleeps GPUFEED_TEST_GETITEM_MS milliseconds a sample
(or --getitem-ms MS; default 0): the same script made slower in its input only, for the comparison tests."""

import argparse
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--getitem-ms", type=float, default=float(os.environ.get("GPUFEED_TEST_GETITEM_MS", "0")))
SLEEP_S = parser.parse_args().getitem_ms / 1000.0
BATCH = int(os.environ.get("GPUFEED_TEST_BATCH", "8"))


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, index):
        if SLEEP_S:
            time.sleep(SLEEP_S)
        return torch.full((16,), float(index % 7)), index % 3


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Items(), batch_size=BATCH, shuffle=True)
    for _ in range(100):
        for inputs, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
