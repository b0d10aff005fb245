"""Each watched step's compute split on the host clock (doctor/observe/parts.py): the model's forward, the optimizer
steps and the rest (backward_s). The bookkeeping is checked exactly on a fake clock (observations.fake_clock) that
moves only inside the model's forward, the optimizer's step and the loop's other work, in `gpufeed.watch` and under
the doctor's instrumentation, and on hand-fed events; once end to end against the sleeps of a script run through
the doctor and its document, with lower bounds only and one upper bound against a deliberate gap ten times
wider (the validation forward)."""

from __future__ import annotations

import pytest
import torch
from observations import fake_clock
from test_inject import SCRIPTS, patched_state
from torch import nn

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observe.hooks import Instrumentation
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.ranks.context import rank_record
from gpufeed.doctor.ranks.timing import RankTimer
from gpufeed.doctor.wrapper import watch

# the script's sleeps (tests/doctor/scripts/step_parts.py), the forward's and the optimizer's doubled every other step
FORWARD_S, OPTIMIZER_S, BACKWARD_S, SAMPLE_S, VALIDATION_S, BATCH = 0.01, 0.01, 0.015, 0.001, 0.2, 4
# what the fake clock advances in the in-process loops below: binary fractions, so that every sum is exact
TICK_FORWARD_S, TICK_OPTIMIZER_S, TICK_BACKWARD_S, TICK_VALIDATION_S = 0.0625, 0.03125, 0.015625, 0.25


def rest(record) -> float:
    """backward_s by hand: what the step's wall time leaves of its other parts."""
    return max(0.0, record.wall_s - record.data_wait_s - record.copy_s - record.sync_s - record.forward_s
               - record.optimizer_s)


@pytest.mark.timing
@pytest.mark.slow
def test_a_scripts_forward_optimizer_and_backward_are_its_sleeps() -> None:
    before = patched_state()
    watcher = Watcher(steps=4, warmup=1, profile_steps=0)
    outcome = run_script(str(SCRIPTS / "step_parts.py"), ["--steps", "30"], False, watcher, timeout_s=30.0)
    assert outcome.error is None and watcher.source == "optimizer" and len(watcher.records) == 4
    # the optimizer's pre-hook is removed (the warning filters that the script's imports add stay: sympy's)
    assert {**patched_state(), "filters": None} == {**before, "filters": None}
    # optimizer steps in iterations 0 (the start), 1 (warm-up), 2-5 (watched): record i is iteration 2 + i
    for index, record in enumerate(watcher.records):
        slower = 1 + (2 + index) % 2  # the script's factor for that iteration: a part one step late falls short
        assert record.forward_s >= slower * FORWARD_S, record
        # one training forward a step (10 or 20 ms); the validation forward under no_grad (200 ms, an order of
        # magnitude more) is not in it: counted, it would put forward_s above VALIDATION_S on any machine
        assert record.forward_s < VALIDATION_S, record
        assert record.optimizer_s >= slower * OPTIMIZER_S, record
        assert record.data_wait_s >= BATCH * SAMPLE_S and record.loop_input_s is None  # a DataLoader feeds it
        assert record.backward_s == pytest.approx(rest(record), abs=1e-9)
        # the rest holds the loss's slow backward and the validation forward (they would be missing from it had
        # either been counted in another part)
        assert record.backward_s >= BACKWARD_S + VALIDATION_S, record
    steps = diagnose(watcher.observe()).to_json()["timeline"]["steps"]
    assert [(step["forward_s"], step["optimizer_s"], step["backward_s"]) for step in steps] == [
        (record.forward_s, record.optimizer_s, record.backward_s) for record in watcher.records]


class Ticking(nn.Module):
    """A model whose forward moves the fake clock by `seconds`, through an inner module (whose call is inside the
    outer one's: counted once)."""

    def __init__(self, clock):
        super().__init__()
        self.clock, self.seconds, self.inner = clock, 0.0, nn.Linear(3, 2)

    def forward(self, inputs):
        self.clock.advance(self.seconds)
        return self.inner(inputs)


class TickingSGD(torch.optim.SGD):
    """SGD whose step moves the fake clock by `seconds`, then calls SGD's through super(): torch hooks the step of
    each optimizer class that makes an instance, so once a plain SGD has had one (the test makes one) the step
    hooks run twice, around this step and around SGD's inside it. One step all the same."""

    def __init__(self, parameters, clock):
        super().__init__(parameters, lr=0.01)
        self.clock, self.seconds = clock, 0.0

    def step(self, closure=None):
        self.clock.advance(self.seconds)
        return super().step(closure)


def ticking_iteration(clock, model: Ticking, optimizer: TickingSGD, slower: int) -> None:
    """Two micro-batches (both forwards are the step's, each followed by TICK_BACKWARD_S of the loop's own work),
    the optimizer's step, then a validation forward under no_grad (not the step's forward)."""
    optimizer.zero_grad()
    for _ in range(2):
        model.seconds = slower * TICK_FORWARD_S
        loss = model(torch.randn(4, 3)).square().mean()
        clock.advance(TICK_BACKWARD_S)
        loss.backward()
    optimizer.seconds = slower * TICK_OPTIMIZER_S
    optimizer.step()
    model.seconds = TICK_VALIDATION_S
    with torch.no_grad():
        model(torch.randn(4, 3))


def ticking(clock) -> tuple[Ticking, TickingSGD]:
    """The model and its optimizer, after a plain SGD has had an instance: SGD.step is then hooked by torch, so
    TickingSGD's step runs the hooks twice (the nesting the watch must count as one step)."""
    torch.manual_seed(0)
    model = Ticking(clock)
    torch.optim.SGD(model.parameters(), lr=0.01)
    return model, TickingSGD(model.parameters(), clock)


def test_under_the_doctor_each_part_is_what_the_clock_moved_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fake_clock(monkeypatch)
    model, optimizer = ticking(clock)
    watcher = Watcher(steps=4, warmup=1, profile_steps=0)
    instrumentation = Instrumentation(watcher)
    watcher.start()
    instrumentation.install()
    try:
        for iteration in range(7):  # optimizer steps: the start, a warm-up step, 4 watched, one after the watch
            ticking_iteration(clock, model, optimizer, 1 + iteration % 2)
    finally:
        instrumentation.remove()
        watcher.close()
    assert watcher.source == "optimizer" and len(watcher.records) == 4
    # record i ends with iteration 2 + i's optimizer step and began after iteration 1 + i's: it holds that
    # iteration's validation forward, then iteration 2 + i's forwards, backward work and optimizer step
    for index, record in enumerate(watcher.records):
        slower = 1 + index % 2
        assert (record.forward_s, record.optimizer_s) == (2 * slower * TICK_FORWARD_S, slower * TICK_OPTIMIZER_S)
        assert record.wall_s == TICK_VALIDATION_S + 2 * slower * TICK_FORWARD_S + 2 * TICK_BACKWARD_S + \
            slower * TICK_OPTIMIZER_S
        assert record.backward_s == TICK_VALIDATION_S + 2 * TICK_BACKWARD_S and record.data_wait_s == 0.0
        # no DataLoader, so the loop's own input is timed: nothing between the boundary and the training forward
        # but the validation forward under no_grad, which is not input (test_loop_input.py times a read)
        assert record.loop_input_s == 0.0


def test_watch_splits_the_step_too_and_counts_every_call_of_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fake_clock(monkeypatch)
    model, optimizer = ticking(clock)
    with watch(steps=4, warmup=1, profile_steps=0) as w:
        for _ in range(8):
            ticking_iteration(clock, model, optimizer, 1)
            w.step()
    assert w.watcher.source == "manual" and len(w.records) == 4
    for record in w.records:
        assert (record.forward_s, record.optimizer_s) == (2 * TICK_FORWARD_S, TICK_OPTIMIZER_S)
        # the validation forward ends the iteration, before w.step(): it is in the step's rest, not its forward
        assert record.wall_s == TICK_VALIDATION_S + 2 * TICK_FORWARD_S + 2 * TICK_BACKWARD_S + TICK_OPTIMIZER_S
        assert record.backward_s == TICK_VALIDATION_S + 2 * TICK_BACKWARD_S


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


def test_the_backward_is_what_the_wall_time_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fake_clock(monkeypatch)
    watcher = Watcher(steps=1, warmup=0, profile_steps=0)
    watcher.timing("forward")
    watcher.timing("optimizer")
    watcher.step_boundary()
    watcher.on_batch_wait(0.001, torch.zeros(2, 3))
    watcher.on_copy(0.002, 10, pinned=True)
    watcher.on_forward_time(0.004)
    watcher.on_optimizer_time(0.008)
    clock.advance(0.0625)
    watcher.step_boundary()
    (record,) = watcher.records
    assert record.wall_s == 0.0625
    assert record.backward_s == pytest.approx(0.0625 - 0.001 - 0.002 - 0.004 - 0.008, abs=1e-12)


def test_a_ranks_record_takes_its_optimizer_time_from_the_watched_steps() -> None:
    watcher = Watcher(steps=2, warmup=0, profile_steps=0)
    watcher.timing("optimizer")
    watcher.step_boundary()
    watcher.on_optimizer_time(0.004)
    watcher.step_boundary()
    watcher.step_boundary()  # no optimizer step in this one
    record = rank_record(1, watcher.records, watcher.started_s, RankTimer(), None, "cpu")
    assert [step["optimizer_s"] for step in record["steps"]] == [0.004, 0.0]
