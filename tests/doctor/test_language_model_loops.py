"""The doctor on small language models trained as fine-tuning scripts train them (tests/doctor/scripts/lm_padding.py:
GPT-2, Llama and T5 from tiny configurations, random weights, in-memory texts of 8-40 words): padding to a fixed
length is padding_waste, in a plain loop, under the Trainer, in a loop without a DataLoader and for an
encoder-decoder; the same loop padded to each batch's longest row, or packed blocks, is not. One doctor run per
module-scoped fixture, read by several tests; tiny configurations keep each run to seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufeed import doctor
from gpufeed.doctor.findings.grading import DRIFT

SCRIPT = Path(__file__).parent / "scripts" / "lm_padding.py"
# the line of the script that asks the tokenizer for padding="max_length", found in its text: an independent reference
# for the site the doctor reads from the call
MAX_LENGTH_LINE = next(number for number, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                       if 'padding="max_length", max_length=options.width' in line)

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow


def _doctor(*args: str):
    # 20 watched steps: in 10, two slow steps of a loaded host made a false beat that took the verdict (periodic_stall)
    return doctor.run(str(SCRIPT), "--width", "128", "--steps", "40", *args, steps=20, warmup=2, profile_steps=0)


@pytest.fixture(scope="module")
def plain_max_length():
    return _doctor("--model", "gpt2", "--pad", "max_length", "--loop", "plain")


@pytest.fixture(scope="module")
def plain_longest():
    return _doctor("--model", "gpt2", "--pad", "longest", "--loop", "plain")


@pytest.fixture(scope="module")
def packed():
    return _doctor("--model", "gpt2", "--pad", "packed", "--loop", "plain")


@pytest.fixture(scope="module")
def trainer_max_length():
    return _doctor("--model", "gpt2", "--pad", "max_length", "--loop", "trainer")


@pytest.fixture(scope="module")
def t5_max_length():
    return _doctor("--model", "t5", "--pad", "max_length", "--loop", "plain")


@pytest.fixture(scope="module")
def llama_own_loop():
    return _doctor("--model", "llama", "--pad", "max_length", "--loop", "own")


def _finding(report, kind):
    return next((finding for finding in report.findings if finding.kind == kind), None)


def _model_bound(report) -> float:
    """The most a cut of padding can recover: the watched steps' forward and backward, over their wall time (the
    share is the fraction of it the trial saved)."""
    steps = report.timeline["steps"]
    return sum(s["forward_s"] + s["backward_s"] for s in steps) / sum(s["wall_s"] for s in steps)


def _padding_waste_holds(report) -> None:
    found = _finding(report, "padding_waste")
    assert found is not None, "\n".join([str(report.verdict)] + [str(note) for note in report.notes])
    assert report.verdict.primary == "padding_waste"
    assert 0.05 <= found.share <= _model_bound(report)
    evidence = found.evidence
    assert evidence["cut_ms"] < evidence["as_came_ms"] and evidence["kept_width"] < evidence["width"] == 128
    # the trial's batch is cut to its own longest row: no longer than the longest row of any batch
    assert evidence["shortest"] <= evidence["kept_width"] <= evidence["longest"] and evidence["widths"] == [128]
    # texts of 8-40 words plus the end token, padded to 128: at least 1 - 41/128 of the positions are padding
    assert evidence["padding_share"] >= 1 - 41 / 128 and evidence["shortest"] >= 9 and evidence["longest"] <= 41


def _probe_agrees_or_is_set_aside(report) -> None:
    """The batch probe's 1x time is at most DRIFT times the slowest watched forward and backward, or it was not
    used (grading.timed_elsewhere)."""
    probe = next((note for note in report.unmeasured if note.startswith("batch probe: after the watch")), None)
    if probe is None or any(note.startswith("batch probe not used") for note in report.unmeasured):
        return
    one_ms = float(probe.split("1x ")[1].split(" ms")[0])
    slowest = max(s["forward_s"] + s["backward_s"] for s in report.timeline["steps"])
    assert one_ms <= DRIFT * 1000 * slowest


def test_a_plain_loop_padding_to_max_length_is_padding_waste_at_the_tokenizer_s_line(plain_max_length) -> None:
    _padding_waste_holds(plain_max_length)
    found = _finding(plain_max_length, "padding_waste")
    assert found.evidence["padding_site"].endswith(f"lm_padding.py:{MAX_LENGTH_LINE}")
    assert 'padding="max_length"' in found.evidence["source"] and "collate_fn" in found.fix
    _probe_agrees_or_is_set_aside(plain_max_length)


def test_the_same_loop_padded_to_each_batch_s_longest_row_is_not(plain_longest) -> None:
    assert _finding(plain_longest, "padding_waste") is None
    assert plain_longest.real_tokens_per_s < plain_longest.model_tokens_per_s  # padding within a batch remains
    _probe_agrees_or_is_set_aside(plain_longest)


def test_packed_blocks_are_not_padding_waste(packed) -> None:
    assert _finding(packed, "padding_waste") is None
    assert packed.real_tokens_per_s == pytest.approx(packed.model_tokens_per_s)  # no padding at all
    _probe_agrees_or_is_set_aside(packed)


def test_the_trainer_padding_to_max_length_gets_the_trainer_s_words(trainer_max_length) -> None:
    _padding_waste_holds(trainer_max_length)
    found = _finding(trainer_max_length, "padding_waste")
    assert found.evidence["framework"] == "transformers"
    assert "group_by_length=True" in found.fix and "data_collator=" in found.snippet
    assert found.evidence["padding_site"].endswith(f"lm_padding.py:{MAX_LENGTH_LINE}")
    _probe_agrees_or_is_set_aside(trainer_max_length)


def test_an_encoder_decoder_is_cut_on_both_sides(t5_max_length) -> None:
    _padding_waste_holds(t5_max_length)
    evidence = _finding(t5_max_length, "padding_waste").evidence
    # its labels, padded to 128 // 2 = 64, hold at most 40 reversed words and the end token: cut to at most 41
    assert evidence["decoder_width"] == 64 and evidence["decoder_kept_width"] <= 41
    _probe_agrees_or_is_set_aside(t5_max_length)


def test_a_loop_without_a_dataloader_is_padding_waste_of_its_own_batches(llama_own_loop) -> None:
    _padding_waste_holds(llama_own_loop)
    evidence = _finding(llama_own_loop, "padding_waste").evidence
    assert evidence["source"] == 'the tokenizer\'s padding="max_length"'
    assert evidence["padding_site"].endswith(f"lm_padding.py:{MAX_LENGTH_LINE}")
    _probe_agrees_or_is_set_aside(llama_own_loop)


# the line that makes TRL's SFTConfig in the script, found in its text (the site its settings are named at)
SFT_CONFIG_LINE = next(number for number, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                       if "arguments = SFTConfig(" in line)


@pytest.fixture(scope="module")
def sft_padded():
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    return _doctor("--model", "gpt2", "--pad", "max_length", "--loop", "sft")


def test_trl_s_sft_trainer_padding_to_a_multiple_gets_sft_config_s_words(sft_padded) -> None:
    # SFTConfig(pad_to_multiple_of=128): every batch of rows of 9-41 tokens padded to 128 by TRL's own collator
    _padding_waste_holds(sft_padded)
    found = _finding(sft_padded, "padding_waste")
    assert found.evidence["framework"] == "transformers"
    assert found.evidence["source"] == "the collator DataCollatorForLanguageModeling(pad_to_multiple_of=128)"
    assert found.evidence["padding_site"] is None  # TRL's collator is not the user's code: the fix names SFTConfig's
    assert "pad_to_multiple_of in SFTConfig(...) at " in found.fix and f"lm_padding.py:{SFT_CONFIG_LINE}" in found.fix
    assert "padding_free=True" in found.fix and "packing=True" in found.fix and "group_by_length" not in found.fix
    assert found.snippet.startswith("args = SFTConfig(") and "SFTTrainer(" in found.snippet
    assert "(pad_to_multiple_of=8, or None)" in found.fix  # capitalised without lowering the rest
    _probe_agrees_or_is_set_aside(sft_padded)
