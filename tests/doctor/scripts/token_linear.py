"""A language model's loop at its smallest: token ids (4 sequences of 16) looked up in an Embedding(32, 64), then a
bias-free Linear(64, 64). Per step, counted by hand: the forward's mm 2 x 64 x 64 x 64 = 524,288 FLOPs, the
backward's weight gradient the same and its input gradient (the embedding's output needs one) the same again:
1,572,864 FLOPs, 24,576 a token = 6N with N = 4,096 (the input table is looked up, not multiplied). No config:
the rule has no L and h, so only its 6N part is shown. No sleeps, no loader: the loop slices its own batches."""

import torch
from torch import nn


class TokenLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 64)
        self.linear = nn.Linear(64, 64, bias=False)

    def get_input_embeddings(self) -> nn.Embedding:  # as transformers' models name their input table
        return self.embed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, 64)
        return self.linear(self.embed(ids))


def main(steps: int = 40, batch_size: int = 4, length: int = 16) -> None:
    torch.manual_seed(0)
    tokens = torch.randint(0, 32, (steps * batch_size, length))
    model = TokenLinear()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        loss = model(tokens[step * batch_size:(step + 1) * batch_size]).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
