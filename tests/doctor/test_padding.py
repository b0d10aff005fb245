"""Padding in token batches (doctor/observe/padding.py) and padding_waste (findings/kinds/padding_waste.py): spans
and cuts against hand-made batches (right and left padding, an encoder-decoder's labels, nanoGPT's x, y), the
tally's sums, where the padding is made, the share from hand-made trial times, the trial's own check, and the
cut_padding experiment's change on a DataLoader and on a loop without one."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from observations import by_kind, host, on_cpu, steps

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observation import PaddingReading, PaddingTrial
from gpufeed.doctor.observe import padding
from gpufeed.doctor.trials.changes import Changes
from gpufeed.doctor.trials.cut_padding import cut_padding

PAD = 0
# right padding to 6: rows of 3, 1 and 2 real tokens; columns 3-5 are padding in every row
RIGHT = torch.tensor([[5, 6, 7, PAD, PAD, PAD], [9, PAD, PAD, PAD, PAD, PAD], [1, 2, PAD, PAD, PAD, PAD]])


def test_the_span_is_the_columns_holding_a_real_token_in_some_row() -> None:
    found = padding.span({"input_ids": RIGHT, "attention_mask": (RIGHT != PAD).long()}, None)
    assert (found.rows, found.width, found.start, found.stop, found.lengths) == (3, 6, 0, 3, (3, 1, 2))
    left = torch.flip(RIGHT, dims=[1])  # left padding: real tokens in columns 3-5
    found = padding.span({"input_ids": left}, PAD)
    assert (found.start, found.stop, found.kept, found.cuttable) == (3, 6, 3, True)
    assert padding.span({"input_ids": RIGHT}, None) is None  # neither a mask nor a pad id: not told


def test_a_cut_batch_keeps_every_tensor_of_the_ids_width_aligned() -> None:
    labels = RIGHT.masked_fill(RIGHT == PAD, -100)
    batch = {"input_ids": RIGHT, "attention_mask": (RIGHT != PAD).long(), "labels": labels,
             "weights": torch.ones(3)}
    cut, found, decoder = padding.trimmed(batch, PAD)
    assert decoder is None and found.kept == 3
    assert torch.equal(cut["input_ids"], RIGHT[:, :3]) and torch.equal(cut["labels"], labels[:, :3])
    assert cut["attention_mask"].shape == (3, 3) and cut["weights"] is batch["weights"]
    x, y = RIGHT, RIGHT.roll(-1, dims=1)  # nanoGPT's blocks: both cut alike
    (cut_x, cut_y), _, _ = padding.trimmed((x, y), PAD)
    assert torch.equal(cut_x, x[:, :3]) and torch.equal(cut_y, y[:, :3])
    full = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert padding.trimmed({"input_ids": full, "attention_mask": torch.ones(2, 3)}, PAD) is None  # nothing to cut


def test_an_encoder_decoder_s_labels_are_cut_by_their_own_padding() -> None:
    # the encoder's ids padded to 6 (3 real at most); labels padded to 6 as well but 5 real in the longest row: a cut
    # by the encoder's span would drop real labels
    labels = torch.tensor([[4, 4, 4, 4, 4, -100], [4, 4, -100, -100, -100, -100], [4, -100, -100, -100, -100, -100]])
    batch = {"input_ids": RIGHT, "attention_mask": (RIGHT != PAD).long(), "labels": labels}
    cut, found, decoder = padding.trimmed(batch, PAD, encoder_decoder=True)
    assert found.kept == 3 and decoder.kept == 5
    assert cut["input_ids"].shape == (3, 3) and torch.equal(cut["labels"], labels[:, :5])


def test_the_tally_sums_positions_kept_and_real_tokens() -> None:
    tally = padding.Tally()
    tally.add(padding.span({"input_ids": RIGHT}, PAD))  # 18 positions, 9 kept (3 x 3), 6 real
    tally.add(padding.span({"input_ids": torch.tensor([[1, 2, 3, 4, 5, 6]])}, PAD))  # 6, 6, 6
    reading = tally.reading("the loop's own batches", None, None)
    assert (reading.positions, reading.kept_positions, reading.real_positions) == (24, 15, 12)
    assert reading.padding_share == pytest.approx(0.5) and reading.trimmable_share == pytest.approx(9 / 24)
    assert (reading.widths, reading.shortest, reading.median_length, reading.longest) == ((6,), 1, 2.5, 6)


def test_where_the_padding_is_made() -> None:
    tally = padding.Tally()
    tally.add(padding.span({"input_ids": RIGHT}, PAD))
    calls = padding.TokenizerCalls()
    assert padding.padding_asked((), {"padding": "max_length"}) == "max_length"
    assert padding.padding_asked((), {"pad_to_max_length": True}) == "max_length"
    assert padding.padding_asked((), {"padding": True}) == "longest" and padding.padding_asked((), {}) is None
    calls.seen["max_length"] = ("/somewhere/train.py", 12, 6)
    assert padding.source(tally, calls, None, True) == ('the tokenizer\'s padding="max_length"',
                                                        "/somewhere/train.py:12")
    calls.seen["max_length"] = ("/somewhere/train.py", 12, 512)  # asked for 512, the batches are 6 wide: not it

    class Collator:
        padding = "max_length"

    class Wrapper:  # the Trainer's RemoveColumnsCollator
        data_collator = Collator()

    assert padding.source(tally, calls, Wrapper(), True) == ('the collator Collator(padding="max_length")', None)

    def collate(rows):
        return rows

    where, site = padding.source(tally, calls, collate, True)
    assert where.startswith("the collate function ") and "collate" in where and site.endswith(
        f":{collate.__code__.co_firstlineno}")
    assert padding.source(tally, padding.TokenizerCalls(), None, False)[0] == "the loop's own batches"


def _reading(trial: PaddingTrial | None) -> PaddingReading:
    return PaddingReading(batches=20, positions=20 * 8 * 256, kept_positions=20 * 8 * 64, real_positions=20 * 8 * 30,
                          widths=(256,), shortest=9, median_length=30.0, longest=60,
                          source='the tokenizer\'s padding="max_length"', site="train.py:12", trial=trial)


def _steps(forward: float, backward: float, wall: float = 0.1):
    return [dataclasses.replace(record, forward_s=forward, backward_s=backward, optimizer_s=wall - forward - backward)
            for record in steps(20, wall=wall)]


def test_padding_waste_s_share_is_the_measured_saving_over_the_step() -> None:
    # steps of 100 ms, 80 ms of them forward and backward; the trial: 75 ms as it came, 30 ms cut to its longest
    # row: 45 of 75 ms saved, 0.6 of the forward and backward, 48 ms of the watched 80 in a step of 100: 0.48
    trial = PaddingTrial(rows=8, width=256, kept=64, seconds=0.075, trimmed_seconds=0.030, rounds=5)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial)))
    found = by_kind(report)["padding_waste"]
    assert found.share == pytest.approx(0.48) and found.severity == "high"
    assert found.evidence["saved_ms_per_batch"] == pytest.approx(45.0)
    assert found.evidence["padding_share"] == pytest.approx(1 - 30 / 256)
    assert found.evidence["trimmable_share"] == pytest.approx(0.75)
    assert report.verdict.primary == "padding_waste"
    assert 'padding="max_length"' in found.fix and "train.py:12" in found.fix and "30 ms instead of 75 ms" in found.fix


def test_a_trial_much_slower_than_every_watched_step_is_used_by_its_ratio_with_a_note() -> None:
    # the watched steps' forward and backward take 80 ms each; the trial's batch as it came took 105 ms, over
    # DRIFT (1.25) x 80 = 100 ms: the machine was busier after the watch. Its two widths ran interleaved, so the
    # fraction the cut saved, 75 of 105 ms, stands: 75 / 105 x 80 ms of a 100 ms step. A note says so, beside the
    # trial's own note on what it ran (one note per subject: it has its own)
    trial = PaddingTrial(rows=8, width=256, kept=64, seconds=0.105, trimmed_seconds=0.030, rounds=5)
    ran = "padding trial: after the watch, a forward and backward ..."
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial), notes=(ran,)))
    assert by_kind(report)["padding_waste"].share == pytest.approx(75 / 105 * 0.8)
    assert ran in report.unmeasured
    assert any(note.text.startswith("padding trial slower than the watch: its fastest forward and backward of the "
                                    "batch as it came took 105 ms, more than 1.25x the slowest watched step's 80 ms")
               for note in report.notes), report.notes
    # 95 ms: within the drift of a shared machine between the watch and the trial (1.19x): no note
    within = dataclasses.replace(trial, seconds=0.095)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(within)))
    assert by_kind(report)["padding_waste"].share == pytest.approx(65 / 95 * 0.8)
    assert not any(note.text.startswith("padding trial slower") for note in report.notes)


def test_no_finding_when_cutting_saved_nothing() -> None:
    trial = PaddingTrial(rows=8, width=256, kept=250, seconds=0.075, trimmed_seconds=0.076, rounds=5)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial)))
    assert "padding_waste" not in by_kind(report)


def test_cut_padding_cuts_a_loader_s_batches() -> None:
    rows = [{"input_ids": RIGHT[i], "attention_mask": (RIGHT[i] != PAD).long()} for i in range(3)]
    loader = torch.utils.data.DataLoader(rows, batch_size=3)
    changes = Changes()
    cut_padding(changes)
    try:
        batch = next(iter(loader))
    finally:
        changes.restore()
    assert batch["input_ids"].shape == (3, 3) and changes.counts["cut batches"] == 1
    assert next(iter(loader))["input_ids"].shape == (3, 6)  # restored


def test_cut_padding_cuts_the_model_s_input_in_a_loop_without_a_loader() -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.widths: list[int] = []

        def forward(self, input_ids, attention_mask):
            self.widths.append(input_ids.shape[1])
            return self.embed(input_ids).sum()

    model = Model()
    changes = Changes()
    cut_padding(changes)
    try:
        for _ in range(2):
            model(input_ids=RIGHT, attention_mask=(RIGHT != PAD).long()).backward()
    finally:
        changes.restore()
    model(input_ids=RIGHT, attention_mask=(RIGHT != PAD).long())
    assert model.widths == [6, 3, 6]  # found at its first call, cut from the next, and not after the restore


def test_small_batch_is_judged_after_padding_waste_and_its_probe_must_cover_the_padding() -> None:
    from gpufeed.doctor.observation import BatchProbe

    # steps of 100 ms, forward and backward 80 ms, batch 8. The probe: 1x 75 ms, 2x 140 ms, 4x 270 ms, a slope of
    # (270 - 75) / (3 x 8) = 8.125 ms a sample, 65 ms for the batch, taken x 80/75 to the watched forward and
    # backward (small_batch.in_watched_scale): 69.33 ms, so 30.67 ms fixed, a share of 0.3067 whose 4x batch
    # saves over 10%. The padding trial saves 45 ms (75 -> 30), at most the samples' 65 ms: both hold, and
    # padding_waste (0.6 of the 80 ms forward and backward: 0.48) is the verdict, small_batch judged after it.
    trial = PaddingTrial(rows=8, width=256, kept=64, seconds=0.075, trimmed_seconds=0.030, rounds=5)
    probe = BatchProbe(8, ((1, 0.075), (2, 0.140), (4, 0.270)), 5)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial), probe=probe))
    found = by_kind(report)
    assert found["small_batch"].share == pytest.approx(1 - 0.8 / 0.75 * 0.65)
    assert found["padding_waste"].share == pytest.approx(0.48)
    assert report.verdict.primary == "padding_waste"
    # a larger fixed share does not make small_batch the verdict while padding_waste reaches its level
    flatter = BatchProbe(8, ((1, 0.075), (2, 0.110), (4, 0.180)), 5)  # 35 ms for the batch: 65 ms fixed, 0.65
    trial = dataclasses.replace(trial, trimmed_seconds=0.050)  # saves 25 ms, within the samples' 35 ms
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial), probe=flatter))
    assert by_kind(report)["small_batch"].share > by_kind(report)["padding_waste"].share
    assert report.verdict.primary == "padding_waste"
    assert any(note.text.startswith("small_batch: not the verdict while padding_waste reaches its level")
               for note in report.notes)
    # a probe whose samples cost less than the padding cut saved under-measured its slope: not used
    flat = BatchProbe(8, ((1, 0.075), (2, 0.076), (4, 0.078)), 5)  # 1 ms for 8 samples, against 45 ms saved
    trial = dataclasses.replace(trial, trimmed_seconds=0.030)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial), probe=flat))
    assert "small_batch" not in by_kind(report) and report.verdict.primary == "padding_waste"
    assert any("than the 45 ms the padding trial saved" in note.text for note in report.notes)


def test_a_trial_timed_on_one_thread_is_used_by_its_ratio_and_said_so() -> None:
    # the script's threads waited for cores in every round, so the trial ran on one thread, each run less its wait:
    # 120 ms as it came, 30 ms cut, slower than the watched steps' 80 ms (one thread, not a busier machine): the
    # fraction saved, 90 of 120 ms, applied to the watched 80 ms of a 100 ms step: 0.6; no "slower than the watch"
    trial = PaddingTrial(rows=8, width=256, kept=64, seconds=0.120, trimmed_seconds=0.030, rounds=5, threads=1)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial)))
    found = by_kind(report)["padding_waste"]
    assert found.share == pytest.approx(90 / 120 * 0.8) and found.evidence["trial_threads"] == 1
    assert "took 30 ms instead of 120 ms on one thread, in its CPU time (other processes" in found.fix
    assert not any(note.text.startswith("padding trial slower") for note in report.notes)
    # its 90 ms saved is in one thread's scale: not weighed against the batch probe's samples (1 ms by its slope)
    from gpufeed.doctor.observation import BatchProbe

    flat = BatchProbe(8, ((1, 0.075), (2, 0.076), (4, 0.078)), 5)
    report = diagnose(on_cpu(_steps(0.030, 0.050), host(), batch_size=8, padding=_reading(trial), probe=flat))
    assert not any("the padding trial saved" in note.text for note in report.notes)


def test_a_trial_whose_runs_waited_for_cores_runs_again_on_one_thread(monkeypatch) -> None:
    # probe.attempt stands in for the timing: on the script's threads the fastest runs waited 486 and 1,123 ms of
    # 518 and 1,102 (the CI run that lost padding_waste); on one thread, its CPU time, 60.2 and 14.7 ms
    from gpufeed.doctor.observe import probe

    calls = []

    def attempt(module, inputs, autocast, subject, largest, watched_s=None, order=(), unwaited=False, alone=False):
        calls.append((unwaited, alone, [args[0]["input_ids"].shape[1] if args else kwargs["input_ids"].shape[1]
                                        for args, kwargs in inputs]))
        return ([0.0602, 0.0147], 6, [0.004, 0.0]) if alone else ([0.518, 1.102], 8, [0.486, 1.123])

    monkeypatch.setattr(probe, "attempt", attempt)
    model = torch.nn.Embedding(10, 4)
    captured = padding.Capture(model, (), {"input_ids": RIGHT, "attention_mask": (RIGHT != PAD).long()}, None, None)
    trial, note = padding.measure(captured)
    assert calls == [(True, False, [6, 3]), (False, True, [6, 3])]
    assert (trial.seconds, trial.trimmed_seconds, trial.rounds, trial.threads) == (0.0602, 0.0147, 6, 1)
    assert "the fastest of 8: 518.00 ms and 1102.00 ms (waiting for cores: 486.00 and 1123.00 ms); its fastest " \
           "runs waited for a core" in note
    assert note.endswith("so it ran again on one thread, each run's time that thread's CPU time: the fastest of 6: "
                         "60.20 ms and 14.70 ms (beyond it on the clock: 4.00 and 0.00 ms)")
    # runs that waited under 1 ms: no second timing, the script's threads' trial kept
    calls.clear()
    monkeypatch.setattr(probe, "attempt", lambda *args, **kwargs: ([0.0317, 0.0093], 7, [0.0004, 0.0]))
    trial, note = padding.measure(captured)
    assert (trial.seconds, trial.threads) == (0.0317, None) and "one thread" not in note
