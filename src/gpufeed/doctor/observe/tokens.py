"""Tokens in a batch, counted on the host as the batch arrives (no device sync): how many positions the model
computes on (`positions`: the ids' B x T), how many of them are real tokens, not padding (`real`), and the
sequences' length (`sequence_length`: T, which the 6N + 12·L·h·s rule's attention term reads).

Where the ids are: a mapping's `input_ids` (a dict, transformers' BatchEncoding, a collator's output), itself or as
an element of a tuple/list batch; else a 2-D integer tensor as the batch or its first element (nanoGPT's `x, y`
blocks: images are floating point and class labels 1-D, so a 2-D integer tensor in first place is token ids).
Real tokens: the sum of the batch's `attention_mask` when it has one of the ids' shape; else the ids not equal to
the model's `pad_token_id` when that is known (its config's); else not counted (None). A batch whose ids are
already on a device is not counted (reading them would wait for it).

Counted from each training DataLoader batch as it arrives (watch.py `on_batch_wait`); in a loop that builds its own
batches (a slice of a token array, `torch.stack`), with no training DataLoader seen, from the step's model's input
at each call with grad enabled (parts.py's pre-hook: its keyword arguments when they hold `input_ids`, else its
positional ones)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Tokens:
    positions: int  # the ids' elements: sequences x positions, padding included
    real: int | None  # positions that are not padding; None: neither a mask nor a pad id to tell them by
    sequence_length: int  # the ids' T: positions per sequence, padding included


def ids_and_mask(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The batch's token ids and its attention mask (None without one of the ids' shape), where the module docstring
    says they are found; None when it holds no token ids."""
    if isinstance(batch, Mapping) or (hasattr(batch, "keys") and hasattr(batch, "__getitem__")
                                      and not isinstance(batch, torch.Tensor)):
        try:
            ids = batch["input_ids"] if "input_ids" in batch.keys() else None
            mask = batch["attention_mask"] if "attention_mask" in batch.keys() else None
        except (TypeError, KeyError):
            return None
        if isinstance(ids, torch.Tensor) and ids.dim() == 2 and not ids.is_floating_point():
            return ids, mask if isinstance(mask, torch.Tensor) and mask.shape == ids.shape else None
        return None
    if isinstance(batch, torch.Tensor):
        return (batch, None) if batch.dim() == 2 and not batch.is_floating_point() and batch.dtype != torch.bool \
            else None
    if isinstance(batch, (tuple, list)) and batch:
        return ids_and_mask(batch[0])
    return None


def count_tokens(batch: Any, pad_token_id: int | None = None) -> Tokens | None:
    """The batch's tokens (the module docstring), or None: no token ids found, or they are not on the host."""
    found = ids_and_mask(batch)
    if found is None:
        return None
    ids, mask = found
    if ids.device.type != "cpu" or (mask is not None and mask.device.type != "cpu"):
        return None
    if mask is not None:
        real = int(mask.count_nonzero())
    elif pad_token_id is not None:
        real = int((ids != pad_token_id).count_nonzero())
    else:
        real = None
    return Tokens(int(ids.numel()), real, int(ids.shape[1]))


def pad_token_id_of(module: Any) -> int | None:
    """The model's padding id, from its transformers config (`config.pad_token_id`), or None."""
    value = getattr(getattr(module, "config", None), "pad_token_id", None)
    return value if isinstance(value, int) else None
