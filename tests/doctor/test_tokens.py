"""Tokens counted on the host as a batch arrives (doctor/observe/tokens.py): positions and real tokens against
hand-counted batches, summed per step by the Watcher, and the report's token rates against the records."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gpufeed.doctor.findings.diagnose import token_rates
from gpufeed.doctor.observe.tokens import Tokens, count_tokens, pad_token_id_of
from gpufeed.doctor.observe.watch import Watcher

PAD = 0
# 3 sequences padded to 6 positions: 4, 2 and 6 real tokens (12 real of 18), right padding
IDS = torch.tensor([[5, 6, 7, 8, PAD, PAD], [9, 3, PAD, PAD, PAD, PAD], [1, 2, 3, 4, 5, 6]])
MASK = (IDS != PAD).long()


def test_a_mapping_with_an_attention_mask_counts_the_mask() -> None:
    assert count_tokens({"input_ids": IDS, "attention_mask": MASK, "labels": IDS}) == Tokens(18, 12, 6)
    left = torch.flip(MASK, dims=[1])  # left padding: the same count
    assert count_tokens({"input_ids": IDS, "attention_mask": left}) == Tokens(18, 12, 6)


def test_without_a_mask_the_pad_id_tells_padding_and_without_either_only_positions_count() -> None:
    assert count_tokens({"input_ids": IDS}, pad_token_id=PAD) == Tokens(18, 12, 6)
    assert count_tokens({"input_ids": IDS}) == Tokens(18, None, 6)
    assert count_tokens((IDS, IDS.roll(-1, dims=1)), pad_token_id=PAD) == Tokens(18, 12, 6)  # nanoGPT's x, y
    assert count_tokens(IDS) == Tokens(18, None, 6)


def test_images_labels_and_device_tensors_are_not_tokens() -> None:
    assert count_tokens((torch.zeros(4, 3, 8, 8), torch.tensor([1, 2, 3, 0]))) is None  # images, 1-D labels
    assert count_tokens(torch.zeros(4, 6)) is None  # floating point: not ids
    assert count_tokens({"pixel_values": torch.zeros(2, 3, 4, 4)}) is None
    assert count_tokens(torch.ones(4, 6, dtype=torch.bool)) is None
    meta = {"input_ids": torch.zeros(2, 5, dtype=torch.long, device="meta")}  # not on the host: never read
    assert count_tokens(meta) is None


def test_the_pad_id_comes_from_the_model_config() -> None:
    class Config:
        pad_token_id = 50256

    model = torch.nn.Linear(2, 2)
    assert pad_token_id_of(model) is None
    model.config = Config()
    assert pad_token_id_of(model) == 50256


def test_the_watcher_sums_tokens_per_step_and_the_report_rates_follow_the_records() -> None:
    watcher = Watcher(steps=3, warmup=0, profile_steps=0)
    batch = {"input_ids": IDS, "attention_mask": MASK}
    for _ in range(4):  # the loader's clock: a start and 3 steps of one batch each
        watcher.on_batch_wait(0.0, batch)
    steps = watcher.records
    assert [(r.tokens, r.real_tokens) for r in steps] == [(18, 12)] * 3
    # steps of 0.1 s, 0.02 s of it waiting for data: 3 x 0.08 s fed, for 54 positions and 36 real tokens
    timed = tuple(dataclasses.replace(r, wall_s=0.1, data_wait_s=0.02) for r in steps)
    seen = dataclasses.replace(watcher.observe(), steps=timed)
    assert token_rates(seen) == pytest.approx((54 / 0.24, 36 / 0.24))


def test_one_batch_without_a_way_to_tell_padding_leaves_the_steps_real_tokens_unknown() -> None:
    watcher = Watcher(steps=2, warmup=0, profile_steps=0)
    watcher.on_batch_wait(0.0, {"input_ids": IDS, "attention_mask": MASK})  # each batch opens its step
    watcher.on_batch_wait(0.0, {"input_ids": IDS})
    watcher.on_batch_wait(0.0, (torch.zeros(2, 3), torch.tensor([0, 1])))  # closes the second step
    first, second = watcher.records
    assert (first.tokens, first.real_tokens) == (18, 12)
    assert (second.tokens, second.real_tokens) == (18, None)
    timed = tuple(dataclasses.replace(r, wall_s=0.1) for r in watcher.records)
    seen = dataclasses.replace(watcher.observe(), steps=timed)
    assert token_rates(dataclasses.replace(seen, steps=timed[:1])) == pytest.approx((180.0, 120.0))
    assert token_rates(seen) == (pytest.approx(360 / 2), None)  # not every step told its real tokens


def test_the_token_rates_in_words() -> None:
    from gpufeed.doctor.findings.report import tokens_sentence

    assert tokens_sentence({"model_tokens_per_s": None}) is None
    assert tokens_sentence({"model_tokens_per_s": 12000.0, "real_tokens_per_s": 8000.0}) == (
        "the model computes 12,000 token positions/s fed instantly, of which 8,000/s real tokens (33% of the "
        "positions padding)")
    assert tokens_sentence({"model_tokens_per_s": 900.0, "real_tokens_per_s": None}).endswith(
        "(padding not told apart: no attention_mask and no pad_token_id)")
    # steps of 100 ms carrying 1,000 positions each, 20 ms of it waiting for input: 10,000/s over the whole step
    # against 12,500/s fed instantly; at a wait under 1% of the step the whole step's rate is not repeated
    waited = {"model_tokens_per_s": 12500.0, "real_tokens_per_s": 12500.0,
              "timeline": {"steps": [{"tokens": 1000, "wall_s": 0.1}] * 4}}
    assert tokens_sentence(waited).endswith("(0% of the positions padding); 10,000 token positions/s over the whole "
                                            "step, its input included")
    assert "whole step" not in tokens_sentence(dict(waited, model_tokens_per_s=10050.0))


def test_compare_judges_the_token_rates_of_two_doctor_results() -> None:
    """Two hand-made results whose steps carry tokens: NEW computes the same positions in half the wall time, so
    its token rates double (per wall second, as samples_per_s), and a result without tokens has no such figure."""
    from tests.compare.documents import doctor_document

    from gpufeed.compare.documents import compare_documents

    def with_tokens(document: dict) -> dict:
        for step in document["timeline"]["steps"]:
            step["tokens"], step["real_tokens"] = 18, 12
        return document

    base = with_tokens(doctor_document([10.0] * 30, 4.0, 4.0, 2.0))  # 20 ms steps
    new = with_tokens(doctor_document([0.0] * 30, 4.0, 4.0, 2.0))  # 10 ms steps
    figures = {figure.key: figure for figure in compare_documents(base, new).figures}
    assert figures["tokens_per_s"].base == pytest.approx(18 / 0.020) and figures["tokens_per_s"].ratio == \
        pytest.approx(2.0)
    assert figures["real_tokens_per_s"].new == pytest.approx(12 / 0.010) and figures["real_tokens_per_s"].real
    plain = {figure.key for figure in compare_documents(doctor_document([10.0] * 30), doctor_document([10.0] * 30))
             .figures}
    assert "tokens_per_s" not in plain


def test_a_loop_that_builds_its_own_batches_counts_the_models_input_and_a_loader_is_not_counted_twice() -> None:
    own = Watcher(steps=2, warmup=0, profile_steps=0)
    own.step_boundary("optimizer")
    for _ in range(2):
        own.on_model_call(torch.nn.Embedding(10, 2), (IDS,), {})  # model(x): x a slice of a token array, no DataLoader
        own.step_boundary("optimizer")
    assert [(r.tokens, r.real_tokens) for r in own.records] == [(18, None)] * 2
    fed = Watcher(steps=1, warmup=0, profile_steps=0)
    fed.on_batch_wait(0.0, {"input_ids": IDS, "attention_mask": MASK})
    batch = {"input_ids": IDS, "attention_mask": MASK}
    fed.on_model_call(torch.nn.Embedding(10, 2), (), batch)  # model(**batch) of that same batch
    fed.on_batch_wait(0.0, {"input_ids": IDS, "attention_mask": MASK})
    assert [(r.tokens, r.real_tokens) for r in fed.records] == [(18, 12)]  # the loader's batch, once
