"""A loop that raises after 3 steps, as a NaN check would."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main(crash_after: int = 3) -> None:
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,))), batch_size=8)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (inputs, labels) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step + 1 == crash_after:
            raise ValueError(f"loss became NaN at step {step + 1}")


if __name__ == "__main__":
    main()
