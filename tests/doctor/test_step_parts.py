"""Each watched step's compute split on the host clock (doctor/observe/parts.py): the model's forward, the optimizer
steps and the rest (backward_s), against sleeps of known length in a script run through the doctor, in
`gpufeed.watch`, and in the document; and the Watcher's bookkeeping of the parts on hand-fed events."""

from __future__ import annotations

import time

import pytest
import torch
from test_inject import SCRIPTS, patched_state
from torch import nn

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.ranks.context import rank_record
from gpufeed.doctor.ranks.timing import RankTimer
from gpufeed.doctor.wrapper import watch

# the script's sleeps (tests/doctor/scripts/step_parts.py), the forward's and the optimizer's doubled every other step
FORWARD_S, OPTIMIZER_S, BACKWARD_S, SAMPLE_S, BATCH = 0.02, 0.01, 0.015, 0.001, 4
# a sleep overshoots by well under a millisecond on an idle machine; a loaded 2-core one adds a few
LATE_S = 0.006


def rest(record) -> float:
    """backward_s by hand: what the step's wall time leaves of its other parts."""
    return max(0.0, record.wall_s - record.data_wait_s - record.copy_s - record.sync_s - record.forward_s
               - record.optimizer_s)


def test_a_scripts_forward_optimizer_and_backward_are_its_sleeps() -> None:
    before = patched_state()
    watcher = Watcher(steps=6, warmup=2, profile_steps=0)
    outcome = run_script(str(SCRIPTS / "step_parts.py"), ["--steps", "30"], False, watcher, timeout_s=30.0)
    assert outcome.error is None and watcher.source == "optimizer" and len(watcher.records) == 6
    # the optimizer's pre-hook is removed (the warning filters that the script's imports add stay: sympy's)
    assert {**patched_state(), "filters": None} == {**before, "filters": None}
    # optimizer steps in iterations 0 (the start), 1-2 (warm-up), 3-8 (watched): record i is iteration 3 + i
    for index, record in enumerate(watcher.records):
        slower = 1 + (3 + index) % 2  # the script's factor for that iteration
        # one training forward a step; the validation forward under no_grad (another FORWARD_S) is not in it
        assert slower * FORWARD_S <= record.forward_s < slower * FORWARD_S + LATE_S, record
        assert slower * OPTIMIZER_S <= record.optimizer_s < slower * OPTIMIZER_S + LATE_S, record
        assert record.data_wait_s >= BATCH * SAMPLE_S
        assert record.backward_s == pytest.approx(rest(record), abs=1e-9)
        # the rest holds the loss's slow backward and the validation forward
        assert record.backward_s >= BACKWARD_S + FORWARD_S, record
    steps = diagnose(watcher.observe()).to_json()["timeline"]["steps"]
    assert [(step["forward_s"], step["optimizer_s"], step["backward_s"]) for step in steps] == [
        (record.forward_s, record.optimizer_s, record.backward_s) for record in watcher.records]


class Sleepy(nn.Module):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.linear = seconds, nn.Linear(3, 2)

    def forward(self, inputs):
        time.sleep(self.seconds)
        return self.linear(inputs)


def test_watch_splits_the_step_too_and_counts_every_call_of_the_model() -> None:
    torch.manual_seed(0)
    model = Sleepy(0.005)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(steps=4, warmup=1, profile_steps=0) as w:
        for _ in range(8):
            optimizer.zero_grad()
            for _ in range(2):  # two micro-batches a step: both forwards are the step's
                model(torch.randn(4, 3)).square().mean().backward()
            optimizer.step()
            w.step()
            with torch.no_grad():
                model(torch.randn(4, 3))  # validation: not counted
    assert w.watcher.source == "manual" and len(w.records) == 4
    for record in w.records:
        assert 2 * 0.005 <= record.forward_s < 2 * 0.005 + LATE_S, record
        assert 0.0 < record.optimizer_s < LATE_S
        assert record.backward_s == pytest.approx(rest(record), abs=1e-9)
        assert record.backward_s >= 0.005  # the validation forward


def test_the_parts_land_in_the_step_they_end_in_and_none_until_timed() -> None:
    watcher = Watcher(steps=4, warmup=0, profile_steps=0)
    watcher.step_boundary()
    watcher.on_forward_time(0.5)  # timed before anyone said so: the step holds it
    watcher.step_boundary()
    watcher.timing("optimizer")  # the steps that begin from now on hold 0.0 without an optimizer step
    watcher.step_boundary()
    watcher.step_boundary()
    watcher.timing("forward")
    watcher.on_forward_time(0.125)
    watcher.on_forward_time(0.25)
    watcher.on_optimizer_time(0.0625)
    watcher.on_sync(0.03125)
    watcher.step_boundary()
    first, second, third, fourth = watcher.records
    assert (first.forward_s, first.optimizer_s, first.backward_s) == (0.5, None, None)
    assert (second.forward_s, second.optimizer_s, second.backward_s) == (None, None, None)  # began before
    assert (third.forward_s, third.optimizer_s, third.backward_s) == (None, 0.0, None)
    assert (fourth.forward_s, fourth.optimizer_s) == (0.375, 0.0625)
    assert fourth.backward_s == 0.0  # the step lasted less than its parts (hand-fed): clamped at 0


def test_the_backward_is_what_the_wall_time_leaves() -> None:
    watcher = Watcher(steps=1, warmup=0, profile_steps=0)
    watcher.timing("forward")
    watcher.timing("optimizer")
    watcher.step_boundary()
    started = time.perf_counter()
    watcher.on_batch_wait(0.001, torch.zeros(2, 3))
    watcher.on_copy(0.002, 10, pinned=True)
    watcher.on_forward_time(0.004)
    watcher.on_optimizer_time(0.008)
    while time.perf_counter() - started < 0.05:
        pass
    watcher.step_boundary()
    (record,) = watcher.records
    assert record.wall_s >= 0.05
    assert record.backward_s == pytest.approx(record.wall_s - 0.001 - 0.002 - 0.004 - 0.008, abs=1e-12)


def test_a_ranks_record_takes_its_optimizer_time_from_the_watched_steps() -> None:
    watcher = Watcher(steps=2, warmup=0, profile_steps=0)
    watcher.timing("optimizer")
    watcher.step_boundary()
    watcher.on_optimizer_time(0.004)
    watcher.step_boundary()
    watcher.step_boundary()  # no optimizer step in this one
    record = rank_record(1, watcher.records, watcher.started_s, RankTimer(), None, "cpu")
    assert [step["optimizer_s"] for step in record["steps"]] == [0.004, 0.0]
