"""Inside the loader (doctor/loader_split.py): a DataLoader's time per batch split into __getitem__, collate, the
hand-over from workers and pinning, checked against the sleeps of tests/doctor/scripts/loader_parts.py without
workers, with two forked and two spawned workers: lower bounds derived by hand from the sleeps, and a part that
does not sleep staying below the sleep of the part it must not hold (an order of magnitude apart: no assertion
on how fast anything is); input_bound naming the part that costs most, with the collate function's file:line,
end to end only where the parts are orders of magnitude apart; and the loop receiving exactly the batches the
DataLoader makes without the doctor. In this process without workers the parts are checked exactly on a fake
clock (observations.fake_clock), and the split and the part that dominates on hand-made stamps and records.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import os
import runpy
import time
from pathlib import Path

import psutil
import pytest
import torch
from observations import fake_clock, on_cpu, steps
from test_inject import SCRIPTS, patched_state
from torch.utils.data import DataLoader, IterableDataset, default_collate
from torch.utils.data import dataloader as torch_dataloader
from torch.utils.data._utils import fetch

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.kind import Judged
from gpufeed.doctor.findings.kinds import input_bound
from gpufeed.doctor.notes import Notes
from gpufeed.doctor.observation import LoaderParts, LoaderSettings
from gpufeed.doctor.observe import loader_split
from gpufeed.doctor.observe.hooks import Instrumentation
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.loader_split import TimedBatch, code_site
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.patching import shown_path
from gpufeed.measure.steps import LoaderSplit

SCRIPT = SCRIPTS / "loader_parts.py"
BATCH = 4  # the script's batch size
STEPS, WARMUP = 6, 2
GETITEM_MS, COLLATE_MS, UNPICKLE_MS = 5.0, 20.0, 10.0  # the sleeps asked of the script
COLLATE_LINE = SCRIPT.read_text().splitlines().index("def slow_collate(samples, seconds: float, parcel_s: float):")


def typed(path) -> str:
    """A path as the user types it: relative to the working directory when inside it (the tests run from the
    checkout, so these are)."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


# where the script defines its collate function, as typed from the script's folder, where `run` runs it
COLLATE_SITE = f"{SCRIPT.name}:{COLLATE_LINE + 1}"


@pytest.fixture(autouse=True)
def in_the_scripts_folder(monkeypatch: pytest.MonkeyPatch):
    """As `cd tests/doctor/scripts; gpufeed doctor loader_parts.py` (on one thread: conftest.py)."""
    monkeypatch.chdir(SCRIPTS)


def doctor(tmp_path: Path, *args: str):
    """The script under the doctor: its input_bound evidence and fix, and the batches its loop received."""
    record = tmp_path / "received.pt"
    before = patched_state()
    watcher = Watcher(steps=STEPS, warmup=WARMUP, profile_steps=0)
    # spawned workers import torch before the first batch: on a busy 2-core machine that takes tens of seconds
    outcome = run_script(str(SCRIPT), [*args, "--record", str(record)], False, watcher, timeout_s=120)
    assert outcome.problem is None
    assert {**patched_state(), "filters": None} == {**before, "filters": None}  # every patch restored
    assert [child for child in psutil.Process().children(recursive=True)
            if not any("resource_tracker" in part for part in child.cmdline())] == []  # no worker left
    report = diagnose(watcher.observe())
    finding = next(found for found in report.findings if found.kind == "input_bound")
    return finding, report, torch.load(record, weights_only=False)


def expected(count: int, parcel_ms: float = 0.0) -> list:
    """The first `count` batches without the doctor, by the script's definition, as its `describe` records them:
    sample i is (torch.full((8,), i), i), batches of 4 in order, default_collate's list [inputs, labels]; with a
    Parcel, the tuple (inputs, labels, Parcel)."""
    batches = []
    for first in range(0, BATCH * count, BATCH):
        indices = range(first, first + BATCH)
        items = [("Tensor", torch.stack([torch.full((8,), float(i)) for i in indices])),
                 ("Tensor", torch.tensor(list(indices)))]
        batches.append(("tuple", [*items, ("Parcel", parcel_ms / 1000)]) if parcel_ms else ("list", items))
    return batches


def assert_same_batches(received: list, parcel_ms: float = 0.0) -> None:
    """What the loop received is what the DataLoader makes without the doctor: types, values, order."""
    assert len(received) >= WARMUP + STEPS
    for (kind, items), (want_kind, want_items) in zip(received, expected(len(received), parcel_ms), strict=True):
        assert kind == want_kind and [name for name, _ in items] == [name for name, _ in want_items]
        assert all(torch.equal(got, want) if name == "Tensor" else got == want
                   for (name, got), (_, want) in zip(items, want_items, strict=True))


def test_the_reference_batches_are_what_the_loader_makes_without_the_doctor() -> None:
    script = runpy.run_path(str(SCRIPT))
    args = argparse.Namespace(getitem_ms=0.0, collate_ms=0.0, unpickle_ms=0.0, workers=0, context="fork")
    loader = iter(script["make_loader"](args))
    plain = [script["describe"](next(loader)) for _ in range(WARMUP + STEPS)]
    assert_same_batches(plain)


@pytest.mark.timing
def test_a_slow_getitem_without_workers_is_the_wait(tmp_path: Path) -> None:
    finding, _, received = doctor(tmp_path, "--getitem-ms", str(GETITEM_MS))
    evidence = finding.evidence
    assert evidence["batches_split"] == STEPS  # one batch a step
    assert evidence["getitem_ms"] >= BATCH * GETITEM_MS  # 4 samples of 5 ms
    # default_collate of 4 small samples, no sleep (tens of microseconds): the 20 ms of __getitem__ are not in it
    assert evidence["collate_ms"] < BATCH * GETITEM_MS
    assert evidence["handover_ms"] is None and evidence["pin_ms"] is None  # no workers, not pinned
    # everything runs inside the loop's wait, one batch a step: the parts are in it (one clock, nested stamps)
    assert evidence["getitem_ms"] + evidence["collate_ms"] <= evidence["mean_wait_ms"]
    assert evidence["dominant_part"] == "getitem"  # 20 ms against tens of microseconds
    assert "__getitem__ takes the most" in finding.fix and "num_workers=" in finding.fix
    assert_same_batches(received)


@pytest.mark.timing
def test_a_slow_collate_without_workers_is_named_by_its_line(tmp_path: Path) -> None:
    finding, _, received = doctor(tmp_path, "--collate-ms", str(COLLATE_MS))
    evidence = finding.evidence
    assert evidence["collate_ms"] >= COLLATE_MS
    assert evidence["getitem_ms"] < COLLATE_MS  # 4 samples that do not sleep: the collate's 20 ms are not in it
    assert evidence["getitem_ms"] + evidence["collate_ms"] <= evidence["mean_wait_ms"]
    assert evidence["dominant_part"] == "collate"  # 20 ms against tens of microseconds
    assert evidence["collate_fn"] == "slow_collate" and evidence["collate_site"] == COLLATE_SITE  # through partial
    assert f"slow_collate ({COLLATE_SITE})" in finding.fix
    assert "pre-tokenise or pre-pack" in finding.fix and "into the Dataset's __getitem__" in finding.fix
    assert_same_batches(received)


@pytest.mark.timing
@pytest.mark.parametrize("slow", ["getitem", "collate"])
def test_with_forked_workers_the_parts_are_timed_in_the_workers(tmp_path: Path, slow: str) -> None:
    sleep = ["--getitem-ms", str(GETITEM_MS)] if slow == "getitem" else ["--collate-ms", str(COLLATE_MS)]
    finding, _, received = doctor(tmp_path, "--workers", "2", *sleep)
    evidence = finding.evidence
    slept_ms = BATCH * GETITEM_MS if slow == "getitem" else COLLATE_MS
    other = "collate" if slow == "getitem" else "getitem"
    assert evidence[f"{slow}_ms"] >= slept_ms  # in a worker, not the loop's wait
    assert evidence[f"{other}_ms"] < slept_ms  # no sleep (tens of microseconds): the other part's 20 ms not in it
    # the hand-over is a part of the loop's wait (each batch's within its own): never more than the wait
    assert 0.0 <= evidence["handover_ms"] <= evidence["mean_wait_ms"]
    assert evidence["pin_ms"] is None and evidence["loader_workers"] == 2
    # which part costs the loop most is not asserted here: 20 ms over 2 workers against a hand-over that a loaded
    # machine stretches to milliseconds is no wide margin (test_workers_share_getitem_and_collate_but_not_pinning
    # and test_a_collate_in_workers_is_named_with_the_workers_that_share_it decide it on hand-made records)
    assert_same_batches(received)


@pytest.mark.timing
@pytest.mark.slow
def test_with_spawned_workers_getitem_and_collate_are_timed_there(tmp_path: Path) -> None:
    # a spawned worker imports torch afresh: the fetch is timed there once its TimedCollate is unpickled
    finding, _, received = doctor(tmp_path, "--workers", "2", "--context", "spawn", "--getitem-ms", "0.5",
                                  "--collate-ms", str(COLLATE_MS))
    evidence = finding.evidence
    assert evidence["getitem_ms"] >= BATCH * 0.5 and evidence["collate_ms"] >= COLLATE_MS
    # 2 ms of __getitem__ a batch, ten times less than the collate's sleep: the collate's time is not in it
    assert evidence["getitem_ms"] < COLLATE_MS
    assert 0.0 <= evidence["handover_ms"] <= evidence["mean_wait_ms"]
    assert evidence["collate_site"] == COLLATE_SITE and evidence["loader_workers"] == 2  # pickled to the workers
    assert_same_batches(received)


@pytest.mark.timing
def test_a_batch_slow_to_unpickle_is_a_slow_hand_over(tmp_path: Path) -> None:
    # each batch takes 10 ms to unpickle in the loop's process, inside some call of the loop's __next__ after the
    # workers (nothing else to do) finished it; a batch that arrives out of order is unpickled in the call before
    # its own, so at most 2 of the watched batches' unpickling can fall outside the watched calls
    finding, _, received = doctor(tmp_path, "--workers", "2", "--unpickle-ms", str(UNPICKLE_MS))
    evidence = finding.evidence
    assert (STEPS - 2) * UNPICKLE_MS / STEPS <= evidence["handover_ms"] <= evidence["mean_wait_ms"]
    # 6.7 ms or more against __getitem__ and collate that do not sleep (tens of microseconds, over 2 workers)
    assert evidence["dominant_part"] == "handover"
    assert "the hand-over from the workers takes the most" in finding.fix
    assert_same_batches(received, UNPICKLE_MS)


PIN_S = 0.005  # Slab's pinning sleep
# what the fake clock advances in this process's loaders below, per sample, collate and pin: binary fractions
TICK_SAMPLE_S, TICK_COLLATE_S, TICK_PIN_S = 1 / 256, 1 / 32, 1 / 16


class Slab:
    """A batch that pins itself (torch's pin_memory calls its method): a sleep of PIN_S, or with a fake `clock`
    a move of TICK_PIN_S."""

    def __init__(self, values: torch.Tensor, clock=None):
        self.values, self.clock = values, clock

    def pin_memory(self):
        if self.clock is None:
            time.sleep(PIN_S)
        else:
            self.clock.advance(TICK_PIN_S)
        return self


def slab_collate(samples, clock=None):
    if clock is not None:
        clock.advance(TICK_COLLATE_S)
    return Slab(torch.tensor(samples), clock)


class Ticking(torch.utils.data.Dataset):
    """Sample i is i, each moving the fake clock by TICK_SAMPLE_S."""

    def __init__(self, clock):
        self.clock = clock

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        self.clock.advance(TICK_SAMPLE_S)
        return index


def pretend_an_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    """No accelerator here: torch would not pin; told there is one, it runs its pinning path (the pin thread with
    workers) on batches that pin themselves."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda index: None)


def watched(loader, batches: int = STEPS + WARMUP + 1, remove_after: int | None = None) -> tuple[Watcher, list]:
    """`loader`'s first batches under the doctor's instrumentation in this process, one step each (the manual
    clock); with `remove_after`, the instrumentation is removed after that many and the loop goes on."""
    watcher = Watcher(steps=STEPS, warmup=WARMUP, profile_steps=0)
    instrumentation = Instrumentation(watcher)
    watcher.start()
    instrumentation.install()
    received = []
    try:
        iterator = iter(loader)
        for batch in iterator:
            received.append(batch)
            watcher.step_boundary("manual")
            if len(received) == remove_after:
                instrumentation.remove()
            if len(received) == batches:
                break
        del iterator
    finally:
        instrumentation.remove()
        watcher.close()
    return watcher, received


@pytest.mark.timing
def test_pinning_is_timed_in_the_pin_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend_an_accelerator(monkeypatch)
    loader = DataLoader(list(range(64)), batch_size=BATCH, collate_fn=slab_collate, pin_memory=True, num_workers=2)
    watcher, received = watched(loader)
    assert all(type(batch) is Slab for batch in received)
    assert [batch.values.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in
                                                             range(0, BATCH * len(received), BATCH)]
    evidence = input_bound.loader_parts(watcher.observe(), Notes())
    assert evidence["pin_ms"] >= 1000 * PIN_S
    # the hand-over is within the loop's wait, batch by batch (one clock, nested stamps). That the pinning is not
    # counted in it is checked on stamps (test_the_hand_over_is_the_wait_after_the_batch_was_finished_that_was_not_
    # pinning, test_the_iterator_timer_takes_the_pinning_in_the_wait_out_of_the_hand_over): here the loop may
    # also wait for the pin thread to finish the batch before, about one pin, so no bound near a pin holds.
    assert all(record.loader_split.handover_s <= record.data_wait_s for record in watcher.records)
    # the one pin thread or the loop's wait for it; __getitem__ and collate do not sleep (microseconds)
    assert evidence["dominant_part"] in ("pin", "handover")


def test_without_workers_the_parts_are_what_the_clock_moved_in_them(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend_an_accelerator(monkeypatch)
    clock = fake_clock(monkeypatch)
    loader = DataLoader(Ticking(clock), batch_size=BATCH, collate_fn=functools.partial(slab_collate, clock=clock),
                        pin_memory=True)
    watcher, received = watched(loader)
    assert [batch.values.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in
                                                             range(0, BATCH * len(received), BATCH)]
    # one batch a step; the clock moves only in __getitem__, collate and pinning, all inside the loop's wait
    per_batch = (BATCH * TICK_SAMPLE_S, TICK_COLLATE_S, None, TICK_PIN_S)
    for record in watcher.records:
        split = record.loader_split
        assert (split.batches, split.getitem_s, split.collate_s, split.handover_s, split.pin_s) == (1, *per_batch)
        assert record.data_wait_s == BATCH * TICK_SAMPLE_S + TICK_COLLATE_S + TICK_PIN_S
    evidence = input_bound.loader_parts(watcher.observe(), Notes())
    assert (evidence["getitem_ms"], evidence["collate_ms"], evidence["handover_ms"], evidence["pin_ms"]) == (
        15.625, 31.25, None, 62.5)
    assert evidence["dominant_part"] == "pin"


class Handing:
    """An iterator with workers whose `_next_data` takes `wait_s` of the fake clock and returns a TimedBatch that
    a worker finished `ready_s` before the loop asked (negative: after), pinned from `pin_from_s` to `pin_to_s`
    after the loop asked."""

    _num_workers = 2

    def __init__(self, clock, wait_s: float, ready_s: float, pin_from_s: float, pin_to_s: float):
        self.clock, self.wait_s, self.ready_s, self.pin = clock, wait_s, ready_s, (pin_from_s, pin_to_s)

    def _next_data(self):
        asked = self.clock.now
        self.clock.advance(self.wait_s)
        finished = asked - self.ready_s
        return TimedBatch("batch", collate_start=finished - 0.5, collate_end=finished, fetch_start=finished - 1.0,
                          pin_start=asked + self.pin[0], pin_end=asked + self.pin[1])


def test_the_iterator_timer_takes_the_pinning_in_the_wait_out_of_the_hand_over(monkeypatch) -> None:
    clock = fake_clock(monkeypatch)
    # ready before the loop asked; the loop waits 0.75 s, 0.25 of it for the pin thread pinning this batch
    handing = Handing(clock, wait_s=0.75, ready_s=0.5, pin_from_s=0.25, pin_to_s=0.5)
    timer = loader_split.IteratorTimer(handing, LoaderParts("collate", None))
    assert timer() == "batch" and timer.last == LoaderSplit(1, 0.5, 0.5, 0.5, 0.25)
    # finished 0.25 s after the loop asked: the hand-over starts there, less the 0.125 s pinning after it
    late = Handing(clock, wait_s=0.75, ready_s=-0.25, pin_from_s=0.375, pin_to_s=0.5)
    timer = loader_split.IteratorTimer(late, LoaderParts("collate", None))
    assert timer() == "batch" and timer.last == LoaderSplit(1, 0.5, 0.5, 0.375, 0.125)


class Counting(IterableDataset):
    """0, 1, ... 63, each moving the fake clock by TICK_SAMPLE_S."""

    def __init__(self, clock):
        self.clock = clock

    def __iter__(self):
        for index in range(64):
            self.clock.advance(TICK_SAMPLE_S)
            yield index


def test_an_iterable_dataset_has_no_getitem_to_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fake_clock(monkeypatch)
    watcher, received = watched(DataLoader(Counting(clock), batch_size=BATCH,
                                           collate_fn=functools.partial(_ticking_collate, clock=clock)))
    assert [batch.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in
                                                      range(0, BATCH * len(received), BATCH)]
    notes = Notes()
    evidence = input_bound.loader_parts(watcher.observe(), notes)
    assert evidence["getitem_ms"] is None and evidence["collate_ms"] == 1000 * TICK_COLLATE_S
    # the iterator's time is not split out: it stays in the wait, and no part is said to dominate
    assert all(record.data_wait_s == BATCH * TICK_SAMPLE_S + TICK_COLLATE_S for record in watcher.records)
    assert evidence["dominant_part"] is None
    assert [note.text for note in notes.items] == [loader_split.ITERABLE_GAP]


def _ticking_collate(samples, clock):
    clock.advance(TICK_COLLATE_S)
    return default_collate(samples)


def _sleepy_collate(samples, seconds: float):
    time.sleep(seconds)
    return default_collate(samples)


class OwnNextIterator(torch_dataloader._SingleProcessDataLoaderIter):
    def __next__(self):
        return self._next_data()


class OwnNextLoader(DataLoader):
    def __iter__(self):
        return OwnNextIterator(self)


def test_an_iterator_with_its_own_next_is_left_as_it_is() -> None:
    watcher, received = watched(OwnNextLoader(list(range(64)), batch_size=BATCH))
    assert [batch.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in
                                                      range(0, BATCH * len(received), BATCH)]
    assert all(record.loader_split is None for record in watcher.records)


def test_batches_timed_by_workers_reach_a_loop_that_outlives_the_doctor() -> None:
    # forked while the fetch was patched, the workers go on making TimedBatches: the iterator still unwraps them
    loader = DataLoader(list(range(64)), batch_size=BATCH, num_workers=2, persistent_workers=True)
    _, received = watched(loader, batches=12, remove_after=3)
    assert [type(batch) for batch in received] == [torch.Tensor] * 12
    assert [batch.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in range(0, 48, BATCH)]
    del loader


def test_the_hand_over_is_the_wait_after_the_batch_was_finished_that_was_not_pinning() -> None:
    # hand-made stamps, seconds: fetched from 1, collated from 3 to 9; the loop asked at 10 and received at 12
    batch = TimedBatch("batch", collate_start=3.0, collate_end=9.0, fetch_start=1.0, pin_start=10.5, pin_end=11.5)
    assert batch.split(asked=10.0, received=12.0, workers=True) == LoaderSplit(1, 2.0, 6.0, 1.0, 1.0)
    # finished after the loop asked: the hand-over starts there; without workers there is none
    late = TimedBatch("batch", collate_start=9.0, collate_end=10.4, fetch_start=9.0)
    assert late.split(asked=10.0, received=10.6, workers=True).handover_s == pytest.approx(0.2)
    assert late.split(asked=10.0, received=10.6, workers=False) == LoaderSplit(1, 0.0, pytest.approx(1.4), None,
                                                                               None)
    summed = LoaderSplit(1, 2.0, 6.0, 1.0, None) + LoaderSplit(2, 1.0, 1.0, 0.5, None)
    assert summed == LoaderSplit(3, 3.0, 7.0, 1.5, None)
    assert summed.per_batch_ms() == {"getitem_ms": 1000.0, "collate_ms": pytest.approx(7000.0 / 3),
                                     "handover_ms": 500.0, "pin_ms": None}


class Padder:
    def __call__(self, samples):
        return samples


def test_the_collate_function_is_found_by_its_code() -> None:
    line = Padder.__call__.__code__.co_firstlineno
    assert code_site(Padder()) == ("Padder", f"{typed(__file__)}:{line}")
    assert code_site(functools.partial(_sleepy_collate, seconds=0)) == (
        "_sleepy_collate", f"{typed(__file__)}:{_sleepy_collate.__code__.co_firstlineno}")
    assert code_site(sorted) == ("sorted", None)  # a builtin: no Python code
    # an installed package's function is shown from its package, wherever the environment lives
    from torch.utils.data._utils.collate import default_collate
    name, site = code_site(default_collate)
    assert name == "default_collate" and site.startswith("torch/utils/data/_utils/collate.py:")
    assert shown_path("/opt/venv/lib/python3.12/site-packages/torch/x.py") == "torch/x.py"
    assert shown_path("/usr/lib/python3/dist-packages/numpy/core.py") == "numpy/core.py"


def test_workers_share_getitem_and_collate_but_not_pinning() -> None:
    # 8 workers, 40 ms of __getitem__ a batch each: 5 ms a batch to the loop, less than the pin thread's 10 ms
    records = [dataclasses.replace(record, loader_split=LoaderSplit(1, 0.040, 0.001, 0.0005, 0.010))
               for record in steps(20, wall=0.1, wait=0.05)]
    seen = on_cpu(records, workers=8, pin_memory=True)
    seen = dataclasses.replace(seen, loader=LoaderSettings(8, True, 0.0, LoaderParts("default_collate", None)))
    finding = input_bound.InputBound().detect(seen, Notes(), Judged())
    assert finding.evidence["getitem_ms"] == pytest.approx(40.0) and finding.evidence["pin_ms"] == pytest.approx(10)
    assert finding.evidence["dominant_part"] == "pin"
    assert "pinning (pin_memory) takes the most: 10.0 ms per batch" in finding.fix
    # with one worker the same __getitem__ is the part to fix
    one = dataclasses.replace(seen, loader=LoaderSettings(1, True, 0.0, LoaderParts("default_collate", None)))
    assert input_bound.InputBound().detect(one, Notes(), Judged()).evidence["dominant_part"] == "getitem"


def test_a_collate_in_workers_is_named_with_the_workers_that_share_it() -> None:
    # 2 workers, 20 ms of collate and 8 ms of __getitem__ a batch each: 10 and 4 ms a batch to the loop, against
    # a hand-over of 6 ms that goes one batch at a time
    records = [dataclasses.replace(record, loader_split=LoaderSplit(1, 0.008, 0.020, 0.006, None))
               for record in steps(20, wall=0.1, wait=0.05)]
    parts = LoaderParts("slow_collate", COLLATE_SITE)
    seen = dataclasses.replace(on_cpu(records, workers=2), loader=LoaderSettings(2, False, 0.0, parts))
    finding = input_bound.InputBound().detect(seen, Notes(), Judged())
    assert finding.evidence["dominant_part"] == "collate" and finding.evidence["collate_site"] == COLLATE_SITE
    assert f"slow_collate ({COLLATE_SITE}) runs once per batch in one of the 2 workers" in finding.fix
    # a hand-over of 12 ms costs the loop more than either part shared by the 2 workers
    slower = [dataclasses.replace(record, loader_split=LoaderSplit(1, 0.008, 0.020, 0.012, None))
              for record in records]
    handover = input_bound.InputBound().detect(dataclasses.replace(seen, steps=tuple(slower)), Notes(), Judged())
    assert handover.evidence["dominant_part"] == "handover"


def test_without_timed_batches_the_parts_are_null_and_a_note_says_why() -> None:
    notes = Notes()
    finding = input_bound.InputBound().detect(on_cpu(steps(20, wall=0.1, wait=0.05)), notes, Judged())
    assert [finding.evidence[key] for key in input_bound.PART_KEYS] == [None] * 4
    assert finding.evidence["dominant_part"] is None and finding.evidence["batches_split"] == 0
    assert any(note.text.startswith("DataLoader time by part (getitem, collate): not timed") for note in notes.items)


def test_a_copy_of_the_timed_collate_made_here_patches_nothing() -> None:
    # only a worker unpickling its arguments times its fetches for good; this process keeps torch's own
    before = fetch._MapDatasetFetcher.__dict__["fetch"]
    copied = copy.deepcopy(loader_split.TimedCollate(default_collate))
    assert fetch._MapDatasetFetcher.__dict__["fetch"] is before and copied.collate_fn is default_collate
