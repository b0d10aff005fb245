"""A language-model loop that builds each batch itself, as nanoGPT's get_batch does: random 64-token blocks sliced
from a np.memmap of token ids (written to a temporary file at the start: random ids, no download), stacked and
fed to a small model, with no DataLoader. `--sleep-ms N` adds N ms to every read (a slow disk, say): a lower
bound, known by construction, of the loop's own input work in each step."""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np
import torch
from torch import nn

VOCAB, BLOCK, BATCH, WIDTH = 256, 64, 8, 256


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.hidden = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, 2 * WIDTH),
                                    nn.GELU())
        self.head = nn.Linear(2 * WIDTH, VOCAB)

    def forward(self, ids):  # (B, T) -> (B, T, VOCAB)
        return self.head(self.hidden(self.embed(ids)))


def get_batch(data: np.memmap, rng: np.random.Generator, sleep_s: float) -> tuple[torch.Tensor, torch.Tensor]:
    starts = rng.integers(0, len(data) - BLOCK - 1, size=BATCH)
    blocks = torch.stack([torch.from_numpy(data[i:i + BLOCK + 1].astype(np.int64)) for i in starts])  # (B, T + 1)
    x, y = blocks[:, :-1], blocks[:, 1:]  # (B, T) each: the next token is the target
    if sleep_s:
        time.sleep(sleep_s)  # the deliberate cost of the read
    return x, y


def main(steps: int, sleep_ms: float) -> None:
    torch.manual_seed(0)
    folder = tempfile.mkdtemp(prefix="memmap_loop_")
    try:
        path = os.path.join(folder, "train.bin")
        tokens = np.memmap(path, dtype=np.uint16, mode="w+", shape=(1 << 16,))
        tokens[:] = np.random.default_rng(0).integers(0, VOCAB, size=tokens.shape)
        tokens.flush()
        data = np.memmap(path, dtype=np.uint16, mode="r")
        rng = np.random.default_rng(1)
        model = TinyLM()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(steps):
            x, y = get_batch(data, rng, sleep_ms / 1000.0)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    arguments = parser.parse_args()
    main(arguments.steps, arguments.sleep_ms)
