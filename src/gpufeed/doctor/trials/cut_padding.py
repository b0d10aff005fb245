"""The "cut_padding" experiment for padding_waste (`gpufeed doctor --try`): every training batch cut to its longest
row, the effect of a collator that pads to the longest, without editing the script.

The doctor holds the batches, so it can serve them cut (observe/padding.py's `trimmed`: the columns that are
padding in every row cut at either end; an encoder-decoder's labels by their own padding):
- a DataLoader's batch, as `_BaseDataLoaderIter.__next__` returns it (patched inside the doctor's own patch, so the
  watch sees the cut batch, as it would the fixed script's): every tensor of the ids' width is cut, so the targets a
  plain loop takes from its batch (`x, y` token blocks, a mapping's `labels`) stay aligned with the ids;
- in a loop that builds its own batches (no DataLoader batch served), the step's model's input: a pre-hook on the
  step's model (the first outermost module called with grad enabled, found by a global forward pre-hook) cuts its
  arguments (keyword arguments when they hold input_ids) from its next call; a loss the loop computes outside the
  model from targets it did not pass may then fail on the shapes, and the experiment says so (the run's error)
  instead of a gain.
The model's pad id and whether it is an encoder-decoder come from the first outermost forward's module (its
transformers config); until then a batch is cut only by its attention mask, as a decoder-only model's. The check:
some batch was cut.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from gpufeed.doctor.observe.padding import encoder_decoder_of, model_input_trimmed, trimmed
from gpufeed.doctor.observe.tokens import pad_token_id_of
from gpufeed.doctor.patching import Patch
from gpufeed.doctor.trials.changes import Changes, Experiment


def cut_padding(changes: Changes) -> None:
    """Install the cuts (the module docstring) into `changes`; counts "cut batches"."""
    from torch.utils.data import dataloader

    model: dict[str, Any] = {"pad": None, "encoder_decoder": False, "found": False, "depth": 0}

    def make_next(original):
        def __next__(iterator):
            batch = original(iterator)
            changes.counts["loader batches"] += 1
            found = trimmed(batch, model["pad"], model["encoder_decoder"])
            if found is None:
                return batch
            changes.counts["cut batches"] += 1
            return found[0]
        return __next__

    def cut_input(module, args, kwargs):  # the step's model's own pre-hook, which may replace its arguments
        if changes.counts["loader batches"] or not torch.is_grad_enabled():
            return None  # a loader's batches are cut already
        found = model_input_trimmed(args, kwargs, model["pad"], model["encoder_decoder"])
        if found is None:
            return None
        changes.counts["cut batches"] += 1
        return found[0], found[1]

    def pre(module, args):  # global: finds the step's model, the first outermost module called with grad
        model["depth"] += 1
        if model["depth"] == 1 and not model["found"] and torch.is_grad_enabled():
            model.update(pad=pad_token_id_of(module), encoder_decoder=encoder_decoder_of(module), found=True)
            changes.handles.append(module.register_forward_pre_hook(cut_input, with_kwargs=True))

    def post(module, args, output):
        model["depth"] = max(0, model["depth"] - 1)

    changes.patches.append(Patch(dataloader._BaseDataLoaderIter, "__next__", make_next))
    changes.handles += [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]


def cut(watcher, changes: Changes, baseline) -> str | None:
    """The experiment's check: the change took only if some batch was cut."""
    if changes.counts["cut batches"] == 0:
        return "no batch was cut: no training batch held token ids with columns of padding in every row"
    return None


CUT_PADDING = Experiment("padding_waste", "cut_padding", "every training batch cut to its longest row (the columns "
                         "that are padding in every row removed), as a collator that pads to the longest would "
                         "make it", cut_padding, min_warmup=1, check=cut)
