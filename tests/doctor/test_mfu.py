"""Model FLOPs utilisation and FLOPs per token (findings/diagnose.py `utilisation`), against hand-derived FLOPs on a
machine without a GPU, through a stated peak: the FLOPs FlopCounterMode counts in a real step equal the hand count,
the rule's figure equals 6N + 12·L·h·s worked out from the model's parameters, and the report's mfu equals the
hand-derived FLOPs x steps / wall seconds / the stated peak. No timed assertion: the wall time is the records'."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from test_inject import SCRIPTS

from gpufeed.doctor.findings.diagnose import diagnose, utilisation
from gpufeed.doctor.findings.report import NO_TOKEN_IDS, Report, mfu_sentence
from gpufeed.doctor.observation import StepArithmetic, TransformerSize
from gpufeed.doctor.observe.flops import FlopCount, transformer_size
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.measure.transformer_flops import attention_shape

IDS = torch.tensor([[5, 6, 7, 8, 0, 0], [9, 3, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6]])  # 18 positions, sequences of 6
# a stated step: 1.8e9 FLOPs in bf16 over 18 positions, a model of N = 1,000 with 2 layers of attention width 64
STATED = StepArithmetic(1_800_000_000, (), "bf16", 6e10, "stated for the test", True, 18, 6,
                        TransformerSize(1_000, 1_000, (2, 64)))


def watched(arithmetic: StepArithmetic | None, batch=None):
    """3 watched steps of 0.1 s (0.02 s waiting for data), each of one batch of IDS (or `batch`)."""
    watcher = Watcher(steps=3, warmup=0, profile_steps=0)
    for _ in range(4):
        watcher.on_batch_wait(0.0, {"input_ids": IDS} if batch is None else batch)
    timed = tuple(dataclasses.replace(r, wall_s=0.1, data_wait_s=0.02) for r in watcher.records)
    return dataclasses.replace(watcher.observe(), steps=timed, arithmetic=arithmetic, device="cuda:0 (NVIDIA H200)")


def test_mfu_of_hand_made_steps_through_a_stated_peak() -> None:
    found = utilisation(watched(STATED))
    # 1.8e9 FLOPs x 3 steps / 0.3 s of wall time (the data wait counts) = 1.8e10 FLOP/s, over 6e10: 30%
    assert found["mfu"] == pytest.approx(0.3) and found["mfu_peak_flops_per_s"] == 6e10
    assert found["mfu_precision"] == "bf16" and found["mfu_missing"] is None
    # 1.8e9 / 18 positions; the rule: 6 x 1,000 + 12 x 2 x 64 x 6 = 6,000 + 9,216
    assert found["flops_per_token"] == pytest.approx(1e8)
    assert (found["rule_flops_per_token"], found["flops_rule"]) == (15_216, "6N+12Lhs")


def test_the_rule_without_layers_is_its_6n_part_and_a_frozen_base_takes_4_flops() -> None:
    plain = dataclasses.replace(STATED, model=TransformerSize(1_000, 1_000, None))
    assert plain.rule_flops_per_token == (6_000, "6N")
    lora = dataclasses.replace(STATED, model=TransformerSize(1_000, 100, (2, 64)))  # 4N + 2N_t + 12·L·h·s
    assert lora.rule_flops_per_token == (4_000 + 200 + 9_216, "6N+12Lhs")


def test_no_figure_without_its_basis() -> None:
    unknown = utilisation(watched(dataclasses.replace(STATED, peak_flops_per_s=None)))
    assert unknown["mfu"] is None and unknown["mfu_missing"] == "the device's bf16 peak is unknown"
    assert unknown["flops_per_token"] == pytest.approx(1e8)  # per token needs no peak
    uncounted = utilisation(watched(None))
    assert uncounted["mfu"] is None and uncounted["flops_per_token"] is None and uncounted["rule_flops_per_token"] \
        is None and uncounted["mfu_missing"] == "no FLOPs counted (see not measured)"
    images = utilisation(watched(STATED, batch=(torch.zeros(2, 3, 4, 4), torch.tensor([0, 1]))))
    assert images["mfu"] is None and images["mfu_missing"] == NO_TOKEN_IDS


def test_the_line_states_the_peak_and_both_per_token_figures_and_says_why_when_none() -> None:
    report = diagnose(watched(STATED))
    document = Report.from_json(report.to_json()).to_json()  # the keys survive a saved document
    assert document["mfu"] == pytest.approx(0.3) and document["rule_flops_per_token"] == 15_216
    assert mfu_sentence(document) == ("MFU 30% of the NVIDIA H200's bf16 dense peak 60 GFLOP/s (100 MFLOP per token "
                                      "counted; 6N+12Lhs rule 15.2 kFLOP)")
    cpu = dict(document, verdict=dict(document["verdict"], device="cpu"), rule_flops_per_token=6_000, flops_rule="6N")
    assert mfu_sentence(cpu).startswith("MFU 30% of the CPU's bf16 dense peak 60 GFLOP/s")
    assert mfu_sentence(cpu).endswith("6N rule 6 kFLOP, attention left out: no L and h in a model config)")
    assert mfu_sentence(dict(document, mfu=0.00106)).startswith("MFU 0.11% of the NVIDIA H200's")
    unknown = diagnose(watched(dataclasses.replace(STATED, peak_flops_per_s=None))).to_json()
    assert mfu_sentence(unknown).startswith("MFU not computed: the device's bf16 peak is unknown (100 MFLOP")
    images = diagnose(watched(STATED, batch=(torch.zeros(2, 3, 4, 4), torch.tensor([0, 1])))).to_json()
    assert mfu_sentence(images) is None and mfu_sentence({"verdict": {}}) is None  # no tokens, an older document


def test_a_watched_language_loop_counts_its_hand_derived_flops_and_its_mfu_follows_a_stated_peak() -> None:
    watcher = Watcher(steps=3, warmup=2, profile_steps=0)
    outcome = run_script(str(SCRIPTS / "token_linear.py"), [], False, watcher, timeout_s=60)
    seen = watcher.observe()
    arithmetic = seen.arithmetic
    assert outcome.problem is None and arithmetic.flops_per_step == 3 * 2 * 4 * 16 * 64 * 64 == 1_572_864
    assert (arithmetic.tokens, arithmetic.sequence_length) == (64, 16)
    assert arithmetic.model == TransformerSize(4_096, 4_096, None)  # the Embedding(32, 64) is looked up
    assert arithmetic.flops_per_token == 24_576 == 6 * 4_096 and arithmetic.rule_flops_per_token == (24_576, "6N")
    stated = dataclasses.replace(seen, arithmetic=dataclasses.replace(arithmetic, peak_flops_per_s=1e12))
    found = utilisation(stated)
    assert found["mfu"] == pytest.approx(1_572_864 * 3 / sum(r.wall_s for r in seen.steps) / 1e12)


def test_a_gpt2_step_counts_the_hand_derived_flops_beside_its_rule() -> None:
    """GPT-2 of 2 layers, width 64, 2 heads, 100 tokens (tied output), at 4 x 16. Counted per token: 6 FLOPs for
    each matrix weight (per layer c_attn 64·192, c_proj 64·64, c_fc 64·256, mlp c_proj 256·64: 49,152; two layers
    and the tied head's 6,400: 104,704) plus attention's 2 products of 2·16·64 forward, x3 with the backward, per
    layer: 6 x 104,704 + 2 x 12,288 = 652,800. The rule's N also counts biases, norms and the position table
    (108,544): 6 x 108,544 + 12 x 2 x 64 x 16 = 675,840."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=2, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    size = transformer_size(model)
    assert size == TransformerSize(108_544, 108_544, (2, 64)) and attention_shape(config) == (2, 64)
    ids = torch.randint(0, 100, (4, 16))
    count = FlopCount()
    count.start()
    model(input_ids=ids, labels=ids).loss.backward()
    count.stop()
    count.keep(True, (64, 16))
    counted = sum(row.flops for row in count.counted)
    arithmetic = StepArithmetic(counted, count.counted, "fp32", None, "not looked up", None, 64, 16, size)
    assert arithmetic.flops_per_token == 652_800 and arithmetic.rule_flops_per_token == (675_840, "6N+12Lhs")


def test_the_config_readers_name_layers_and_attention_width_as_the_plan_does() -> None:
    assert attention_shape(SimpleNamespace(n_layer=1, n_embd=64)) == (1, 64)
    assert attention_shape(SimpleNamespace(num_hidden_layers=4, num_attention_heads=8, head_dim=32,
                                           hidden_size=512)) == (4, 256)  # heads x head size first
    # T5: the decoder attends to itself and to the encoder: 2 + 2 x 3 layers
    assert attention_shape(SimpleNamespace(num_layers=2, num_decoder_layers=3, num_heads=4, d_kv=16,
                                           is_encoder_decoder=True)) == (8, 64)
    assert attention_shape(None) is None and attention_shape(SimpleNamespace(n_layer=2)) is None


def test_watched_steps_of_another_length_than_the_counted_one_have_a_note() -> None:
    seen = watched(dataclasses.replace(STATED, tokens=36))  # the counted step held twice the positions
    assert any(note.text.startswith("MFU: takes each watched step to do the counted warm-up step's FLOPs")
               for note in diagnose(seen).notes)
    assert not any(note.text.startswith("MFU:") for note in diagnose(watched(STATED)).notes)
