"""What the framework scripts share: token ids made from each sample's index (no tokenizer, nothing downloaded),
a sleep per sample for the slow-input runs, and models built from their shapes alone."""

import time

import torch
from torch import nn
from torch.utils.data import Dataset

VOCAB, LENGTH = 100, 16


class TokenIds(Dataset):
    """`size` samples of LENGTH token ids, sample i a function of i; each takes `sleep_ms` to load (a file read
    and a tokenizer, say)."""

    def __init__(self, size: int = 512, sleep_ms: float = 0.0):
        self.ids = torch.randint(0, VOCAB, (size, LENGTH), generator=torch.Generator().manual_seed(0))
        self.sleep_s = sleep_ms / 1000.0

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor(index % 2)}


def classifier(width: int = 2048) -> nn.Module:
    """Token ids (B, LENGTH) -> two logits (B, 2), through two `width` layers: a step of some milliseconds on a
    CPU core, so that loading the batch is a small part of it when nothing sleeps."""
    return nn.Sequential(nn.Embedding(VOCAB, 64), nn.Flatten(), nn.Linear(64 * LENGTH, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2))


def bert_config(width: int = 192):
    """A BERT from its config alone (random weights): two layers of `width`, a step of some milliseconds on a CPU
    core, as with `classifier`."""
    from transformers import BertConfig

    return BertConfig(vocab_size=VOCAB, hidden_size=width, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=4 * width, max_position_embeddings=LENGTH, num_labels=2)
