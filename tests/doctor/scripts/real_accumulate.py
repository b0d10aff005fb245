"""A Hugging Face-style fine-tuning loop: a collate_fn that pads token ids into a dict-like batch (a UserDict, as
transformers' BatchEncoding is: {"input_ids", "attention_mask", "labels"}), a small transformer classifier called
as model(**batch) that returns a dict with the loss, AdamW with a linear warm-up schedule, gradient clipping, and
gradient accumulation: the optimizer steps once every --accumulate micro-batches. With --no-loader the batches are
slices of tensors padded once up front (no DataLoader). The data is synthetic token sequences."""

import argparse
import math
from collections import UserDict

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

PAD = 0


class Sentences(Dataset):
    def __init__(self, count: int, vocabulary: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(8, 32, (count,), generator=generator)
        self.tokens = [torch.randint(1, vocabulary, (int(n),), generator=generator).tolist() for n in lengths]
        self.labels = torch.randint(0, 2, (count,), generator=generator).tolist()

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.tokens[index], "label": self.labels[index]}


class Batch(UserDict):
    """What a tokenizer's padding collator returns: a mapping, not a dict."""


def collate(examples: list[dict]) -> Batch:
    width = max(len(example["input_ids"]) for example in examples)
    input_ids = torch.full((len(examples), width), PAD, dtype=torch.long)
    for row, example in enumerate(examples):
        input_ids[row, :len(example["input_ids"])] = torch.tensor(example["input_ids"])
    return Batch(input_ids=input_ids, attention_mask=(input_ids != PAD).long(),
                 labels=torch.tensor([example["label"] for example in examples]))


def sliced(dataset: Sentences, batch_size: int):
    """Without a DataLoader: everything padded once, then consecutive slices, as dicts."""
    everything = collate([dataset[index] for index in range(len(dataset))])
    for start in range(0, len(dataset), batch_size):
        yield {name: value[start:start + batch_size] for name, value in everything.items()}


class Classifier(nn.Module):
    def __init__(self, vocabulary: int, width: int = 32, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 2)

    def forward(self, input_ids, attention_mask, labels=None) -> dict:
        hidden = self.encoder(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)  # (B, T, C)
        mask = attention_mask.unsqueeze(-1).float()
        logits = self.head((hidden * mask).sum(1) / mask.sum(1))  # (B, 2)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--no-loader", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    dataset = Sentences(1024, 1000, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    model = Classifier(1000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    total = args.epochs * math.ceil(len(loader) / args.accumulate)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 10) * (1 - step / total))
    model.train()
    updates = 0
    for epoch in range(args.epochs):
        for micro_step, batch in enumerate(sliced(dataset, args.batch_size) if args.no_loader else loader):
            outputs = model(**batch)
            (outputs["loss"] / args.accumulate).backward()
            if (micro_step + 1) % args.accumulate == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                updates += 1
                if updates % 10 == 0:
                    print(f"epoch {epoch} update {updates} loss {outputs['loss'].item():.4f}")


if __name__ == "__main__":
    main()
