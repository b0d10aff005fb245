"""A text classifier in the EmbeddingBag style (issue 20, item 5): each batch is (token ids flattened, offsets,
labels), so the first tensor's length is the batch's tokens, not its 64 samples."""

import torch
from torch import nn


class Sentences(torch.utils.data.Dataset):
    def __len__(self):
        return 20_000

    def __getitem__(self, index):
        return torch.randint(0, 1000, (20 + index % 120,)), index % 4


def collate(samples):
    ids = [ids for ids, _ in samples]
    offsets = torch.tensor([0] + [len(item) for item in ids[:-1]]).cumsum(0)
    return torch.cat(ids), offsets, torch.tensor([label for _, label in samples])


def main() -> None:
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Sentences(), batch_size=64, shuffle=True, collate_fn=collate)
    bag, head = nn.EmbeddingBag(1000, 32), nn.Linear(32, 4)
    optimizer = torch.optim.SGD([*bag.parameters(), *head.parameters()], lr=0.1)
    for ids, offsets, labels in loader:
        loss = nn.functional.cross_entropy(head(bag(ids, offsets)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
