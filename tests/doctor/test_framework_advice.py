"""small_batch's and compute_bound's fixes in the words of the framework that trains (frameworks/words.py's
`larger_batch` and `mixed_precision`), from hand-made observations whose Setup names the framework: the Hugging
Face Trainer's TrainingArguments (per_device_train_batch_size, gradient_accumulation_steps, learning_rate, bf16)
at the user's line, and none of plain PyTorch's DataLoader or autocast code; plain PyTorch's, Lightning's and
accelerate's own, and none of the Trainer's. The Trainer's argument names are checked against the installed
transformers' TrainingArguments."""

from __future__ import annotations

import dataclasses
import re

import pytest
from observations import by_kind, host, on_cpu, steps

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.frameworks.setup import LoaderKnobs, Setup
from gpufeed.doctor.observation import BatchProbe, OperatorFlops, StepArithmetic

TRAINER = Setup("transformers", "train.py:30", "TrainingArguments(...)", "TrainingArguments",
                LoaderKnobs(0, False, False, None, 2))
PLAIN_LOOP = Setup("torch", "train.py:12", "DataLoader(...)", "DataLoader", LoaderKnobs(0, False, False, None, 2),
                   dataset_variable="train_set")
LIGHTNING = dataclasses.replace(PLAIN_LOOP, framework="lightning")
ACCELERATE = dataclasses.replace(PLAIN_LOOP, framework="accelerate")
# the small_batch case of test_batch_probe.py: steps of 1 ms at a batch of 2, the probe proposing a batch of 8
PROBE = BatchProbe(2, ((1, 0.0004), (2, 0.0005), (4, 0.0007)), 5)
# 1e9 FLOPs of fp32 matrix products a step on a device that computes bf16 natively: compute_bound's bf16 lever
FP32_PRODUCTS = StepArithmetic(10**9, (OperatorFlops("aten.mm", "fp32", None, 10**9),), "fp32", 1e11, "a test's peak",
                               True)


def small_batch(setup: Setup, batches_per_step: int | None = None):
    shape = {"batches_per_step": batches_per_step, "loader_batch_size": 2} if batches_per_step else {}
    seen = on_cpu(steps(20, wall=0.001, wait=0.0001), host(), batch_size=2 * (batches_per_step or 1), probe=PROBE,
                  **shape)
    return by_kind(diagnose(dataclasses.replace(seen, setup=setup)))["small_batch"]


def compute_bound(setup: Setup):
    seen = on_cpu(steps(20), host(), arithmetic=FP32_PRODUCTS)
    return by_kind(diagnose(dataclasses.replace(seen, setup=setup)))["compute_bound"]


def keywords(snippet: str) -> set[str]:
    return set(re.findall(r"(\w+)=(?!=)", snippet))


def test_small_batch_under_the_trainer_names_training_arguments_at_their_line():
    found = small_batch(TRAINER)
    assert "set per_device_train_batch_size=8 in TrainingArguments(...) at train.py:30" in found.fix
    assert "learning_rate" in found.fix and "learning_rate=4 * base_lr" in found.snippet
    assert "per_device_train_batch_size=8," in found.snippet
    assert "DataLoader" not in found.fix + found.snippet and "param_groups" not in found.snippet
    fields = {field.name for field in dataclasses.fields(pytest.importorskip("transformers").TrainingArguments)}
    assert keywords(found.snippet) <= fields


def test_small_batch_with_accumulation_under_the_trainer_accumulates_fewer_in_training_arguments():
    # 4 batches of 2 accumulated per optimizer step: one batch of 8, the same 8 samples per step
    found = small_batch(TRAINER, batches_per_step=4)
    assert "per_device_train_batch_size=8, gradient_accumulation_steps=1 in TrainingArguments(...) at " \
           "train.py:30" in found.fix
    assert "gradient_accumulation_steps=1,  # was 4" in found.snippet and "accumulation_steps = 1" not in found.snippet
    assert "learning_rate" not in found.snippet  # the same samples per step: the same learning rate
    # 2 batches of 2 accumulated: of the probe's factors only 2 keeps the 4 samples per optimizer step (4x would
    # make it 8), whatever 4x would gain
    two = small_batch(TRAINER, batches_per_step=2)
    assert two.evidence["proposed_factor"] == 2
    assert "per_device_train_batch_size=4, gradient_accumulation_steps=1 in TrainingArguments" in two.fix


@pytest.mark.parametrize(("setup", "where"), [
    (PLAIN_LOOP, "set batch_size=8 in the DataLoader(...) at train.py:12"),
    (LIGHTNING, "set batch_size=8 in the DataLoader(...) at train.py:12 (or the LightningDataModule's batch_size"),
    (ACCELERATE, "set batch_size=8 in the DataLoader(...) at train.py:12, before accelerator.prepare")])
def test_small_batch_elsewhere_names_the_dataloader_and_not_the_trainer(setup: Setup, where: str):
    found = small_batch(setup)
    assert where in found.fix
    dataset = "self.train_set" if setup is LIGHTNING else "train_set"  # Lightning's train_dataloader() holds it
    assert f"torch.utils.data.DataLoader({dataset}, batch_size=8, shuffle=True)" in found.snippet
    assert "TrainingArguments" not in found.fix + found.snippet
    assert "per_device_train_batch_size" not in found.fix + found.snippet
    lr = "# in configure_optimizers(): lr = 4 * base_lr" if setup is LIGHTNING else 'group["lr"] = 4 * base_lr'
    assert lr in found.snippet


def test_compute_bound_bf16_under_the_trainer_is_bf16_true_in_training_arguments():
    found = compute_bound(TRAINER)
    assert "set bf16=True in TrainingArguments(...) at train.py:30" in found.fix
    assert "bf16=True," in found.snippet and "torch.autocast" not in found.fix + found.snippet
    assert "GPUs older than Ampere" not in found.fix  # the CPU: no fp16 alternative to name


@pytest.mark.parametrize(("setup", "switch"), [
    (PLAIN_LOOP, 'with torch.autocast("cpu", dtype=torch.bfloat16):'),
    (LIGHTNING, 'trainer = pl.Trainer(..., precision="bf16-mixed")'),
    (ACCELERATE, 'accelerator = Accelerator(mixed_precision="bf16")')])
def test_compute_bound_bf16_elsewhere_is_the_frameworks_own_switch(setup: Setup, switch: str):
    found = compute_bound(setup)
    assert switch in found.snippet and "bf16=True" not in found.fix + found.snippet
    assert "TrainingArguments" not in found.fix + found.snippet


def test_padding_s_fix_keeps_the_user_s_path_and_names_the_arguments_class_the_script_made() -> None:
    from gpufeed.doctor.frameworks import words

    fix, _ = words.shorter_padding(PLAIN_LOOP, 'the tokenizer\'s padding="max_length"', "/Users/Ann/Train.py:7", False)
    assert fix.startswith('Drop padding="max_length" from the tokenizer call at /Users/Ann/Train.py:7: ')
    seq2seq = dataclasses.replace(TRAINER, site_is="Seq2SeqTrainingArguments(...)")
    assert words.arguments_class(seq2seq) == "Seq2SeqTrainingArguments"
    assert words.larger_batch(seq2seq, 8, 2)[0].startswith(
        "set per_device_train_batch_size=16 in Seq2SeqTrainingArguments(...) at train.py:30")
    assert words.arguments_class(dataclasses.replace(TRAINER, site_is="Trainer.train()")) == "TrainingArguments"
    sft = dataclasses.replace(TRAINER, site_is="SFTConfig(...)", trainer="trl.SFTTrainer")
    fix, snippet = words.shorter_padding(sft, "the collator DataCollatorForLanguageModeling(pad_to_multiple_of=512)",
                                         None, False)
    assert "pad_to_multiple_of in SFTConfig(...) at train.py:30" in fix and "padding_free=True" in fix
    assert snippet.startswith("args = SFTConfig(") and "group_by_length" not in fix
    # Lightning's and accelerate's loops over token batches: the collate in the DataLoader each builds
    collate = "the collate function pad_batch (train.py:20)"
    assert "in the DataLoader that train_dataloader() returns" in words.shorter_padding(LIGHTNING, collate,
                                                                                        "train.py:20", False)[0]
    fix, snippet = words.shorter_padding(ACCELERATE, collate, "train.py:20", False)
    assert fix.startswith("Make the collate function at train.py:20 pad to the batch's longest row")
    assert "in the DataLoader you pass to accelerator.prepare" in fix and "collate_fn=collate" in snippet
