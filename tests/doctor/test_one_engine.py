"""One engine for "is this difference real" (measure/difference.py): the same hand-made pairs of runs, given to
each entry point that judges pairs, get the same judgement everywhere: `--try` in this process (trials/runs.py with
a stub runner), the ranks' `--try` (ranks/job.py's JobRunner, its torchrun jobs replaced by a stub that writes
rank 0's result file), and the A/B mode (`doctor --baseline`: compare/pairs.py on the runs' documents).

Each case is three pairs whose rate ratios (NEW / BASE, samples/s) are chosen by hand; the expected judgement is
derived by hand from the rule: real when every pair's ratio is at least 1.01, or every one at most 1 / 1.01.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from tests.compare.documents import doctor_document

from gpufeed.compare.pairs import compare_pairs
from gpufeed.doctor.findings.grading import spread_confidence
from gpufeed.doctor.findings.report import Finding, Report, Verdict, gain_headline
from gpufeed.doctor.ranks import job as ranks_job
from gpufeed.doctor.ranks.job import RankJob, trial_jobs
from gpufeed.doctor.runs.runner import Run
from gpufeed.doctor.runs.script import Script, WatchSettings
from gpufeed.doctor.trials.changes import Experiment
from gpufeed.doctor.trials.runs import run_trial
from gpufeed.measure.difference import MIN_CHANGE, PairedRatios, is_real, judged_ratios, pairs_interval
from gpufeed.measure.steps import StepRecord

BASE_MS = 40.0  # every BASE step; NEW's steps take BASE_MS / ratio (the same batch: the rate ratio is `ratio`)
STEPS, BATCH, FIXED_MS = 5, 32, 1.0  # steps a run; its batch; forward, backward and optimizer each (A/B documents)

CASES = {  # rate ratios of the three pairs -> real?
    "a clear gain": ((2.0, 4.0, 2.5), True),
    "pairs that disagree": ((0.98, 1.02, 1.05), False),
    # every pair faster, but by less than MIN_CHANGE: told apart from 0, yet no change (before issue 31, --try
    # graded it by its spread alone and called it a gain of high confidence)
    "under 1%": ((1.004, 1.006, 1.008), False),
    # the median clears 1% but one pair does not: the interval straddles the line (before issue 31 compare called
    # it real, on its median)
    "straddling 1%": ((1.009, 1.03, 1.05), False),
    "a clear loss": ((0.5, 0.52, 0.55), True),
}
EXPERIMENT = Experiment("input_bound", "workers", "DataLoader(num_workers=2)", lambda changes: None)


def records(ratio: float) -> list[StepRecord]:
    """STEPS steps of BASE_MS / ratio each, batch BATCH, nothing else measured."""
    names = [field.name for field in dataclasses.fields(StepRecord)]
    known = {"data_wait_s": 0.0, "copy_s": 0.0, "copy_bytes": 0, "copy_pageable_bytes": 0, "sync_count": 0,
             "sync_s": 0.0, "batch_size": BATCH}
    wall = BASE_MS / ratio / 1000.0
    return [StepRecord(**{name: known.get(name) for name in names if name not in ("index", "start_s", "wall_s")},
                       index=index, start_s=index * wall, wall_s=wall) for index in range(STEPS)]


class Sides:
    """Hands out BASE's and NEW's records of each pair in pair order, whichever side the ABBA order asks for."""

    def __init__(self, ratios: tuple[float, ...]):
        self.base = [records(1.0) for _ in ratios]
        self.new = [records(ratio) for ratio in ratios]

    def next(self, changed: bool) -> list[StepRecord]:
        return (self.new if changed else self.base).pop(0)


def tried_in_process(ratios: tuple[float, ...]):
    sides = Sides(ratios)

    def runner(script, settings, experiment=None) -> Run:
        return Run(sides.next(experiment is not None))

    experiment = dataclasses.replace(EXPERIMENT, check=lambda watcher, changes, base: None)
    return run_trial(experiment, Script("train.py"), WatchSettings(STEPS, 0), len(ratios), runner).gain


def tried_on_ranks(ratios: tuple[float, ...], folder, monkeypatch):
    """The ranks' --try: each run a torchrun job (here a stub that does what rank 0 does: write its watched steps
    where the job's trial file says)."""
    sides = Sides(ratios)

    def job_of_ranks(words, nproc):
        trial = json.loads(open(os.environ[ranks_job.TRIAL_VARIABLE], encoding="utf-8").read())
        steps = sides.next(trial["experiment"] is not None)
        with open(trial["result"], "w", encoding="utf-8") as result:
            json.dump({"records": [dataclasses.asdict(step) for step in steps], "problem": None}, result)
        return []

    monkeypatch.setattr(ranks_job, "run_job", job_of_ranks)
    finding = Finding("input_bound", "high", 0.5, {"loader_workers": 0, "suggested_workers": 2}, "fix", "", None,
                      "high")
    report = Report(Verdict("input_bound", None, 0.5, 10, "cpu", 2), [finding])
    job = RankJob(Script("train.py"), WatchSettings(STEPS, 0), 2)
    [trial] = trial_jobs(job, report, [EXPERIMENT], folder, len(ratios))
    return trial.gain


def compared_ab(ratios: tuple[float, ...]):
    """The A/B mode's comparison of the same pairs, from doctor documents of the same step times."""
    def document(ratio: float) -> dict:
        wait_ms = BASE_MS / ratio - 3 * FIXED_MS
        return doctor_document([wait_ms] * STEPS, FIXED_MS, FIXED_MS, FIXED_MS, BATCH)

    return compare_pairs([document(1.0) for _ in ratios], [document(ratio) for ratio in ratios], Script("a.py"),
                         Script("b.py"))


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_pairs_get_the_same_judgement_through_every_entry_point(case, tmp_path, monkeypatch):
    ratios, expected = CASES[case]
    in_process, on_ranks, ab = tried_in_process(ratios), tried_on_ranks(ratios, tmp_path, monkeypatch), \
        compared_ab(ratios)
    for gain in (in_process, on_ranks):
        assert (gain.measured, gain.low, gain.high, gain.pairs) == pytest.approx(
            (sorted(ratios)[1], min(ratios), max(ratios), 3))
        assert judged_ratios(gain.low, gain.high, gain.pairs) is expected
        told = "not told apart from no change" in gain_headline(gain.to_json())
        if case == "straddling 1%":  # the range printed with the digit that shows it is not clear of 1.01
            assert "(1.009–1.050 over 3 pairs)" in gain_headline(gain.to_json())
        assert told is (not expected)
        assert ("slower" in gain_headline(gain.to_json())) is (expected and max(ratios) < 1.0)
        assert (spread_confidence(list(ratios)) == "low") or expected  # a change not real is never trusted
    figures = {figure.key: figure for figure in ab.figures}
    assert [pair["ratio"] for pair in ab.pairs] == pytest.approx([1.0 / ratio for ratio in ratios])
    assert figures["samples_per_s"].real is expected and figures["ms_per_sample"].real is expected
    assert ab.slower_real is expected
    assert PairedRatios(ratios).real is expected


def test_the_rule_by_hand():
    """MIN_CHANGE's band, symmetric in log: a rate 1.01x and the time per sample 1 / 1.01 are both real."""
    assert MIN_CHANGE == 0.01
    edge = 1.0 + MIN_CHANGE
    assert PairedRatios((edge, edge * 1.01)).real and PairedRatios((1.0 / edge, 1.0 / edge / 1.01)).real
    assert not PairedRatios((edge - 1e-6, 1.5)).real
    assert PairedRatios((1.5,)).real is None and PairedRatios((1.5,)).words() == "one pair: not judged"
    assert PairedRatios((0.5, 0.6)).words() == "slower" and PairedRatios((1.5, 1.6)).words() == ""
    # a part of the step: MIN_CHANGE of BASE's step, whatever the part's own size
    part = pairs_interval([0.5, 0.6], [1.0, 1.2])  # +0.5 to +0.6 ms of a part that was 0.5 ms
    assert is_real(part, reference=40.0) is True and is_real(part, reference=100.0) is False
