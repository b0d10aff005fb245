"""Inside the loader (doctor/loader_split.py): a DataLoader's time per batch split into __getitem__, collate, the
hand-over from workers and pinning, checked against the sleeps of tests/doctor/scripts/loader_parts.py (lower
bounds derived by hand from them, generous upper bounds: no assertion on how fast anything is), without workers,
with two forked and two spawned workers; input_bound naming the part that costs most, with the collate
function's file:line; and the loop receiving exactly the batches the DataLoader makes without the doctor.
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
from observations import on_cpu, steps
from test_inject import SCRIPTS, patched_state
from torch.utils.data import DataLoader, IterableDataset, default_collate
from torch.utils.data import dataloader as torch_dataloader
from torch.utils.data._utils import fetch

from gpufeed.doctor.findings import input_bound
from gpufeed.doctor.findings.diagnose import diagnose
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
    """As `cd tests/doctor/scripts; gpufeed doctor loader_parts.py`, on one thread (a loaded 2-core machine)."""
    monkeypatch.chdir(SCRIPTS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def doctor(tmp_path: Path, *args: str):
    """The script under the doctor: its input_bound evidence and fix, and the batches its loop received."""
    record = tmp_path / "received.pt"
    before = patched_state()
    watcher = Watcher(steps=STEPS, warmup=WARMUP, profile_steps=0)
    outcome = run_script(str(SCRIPT), [*args, "--record", str(record)], False, watcher, timeout_s=60)
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


def test_a_slow_getitem_without_workers_is_the_wait(tmp_path: Path) -> None:
    finding, _, received = doctor(tmp_path, "--getitem-ms", str(GETITEM_MS))
    evidence = finding.evidence
    assert evidence["batches_split"] == STEPS  # one batch a step
    assert BATCH * GETITEM_MS <= evidence["getitem_ms"] <= 3 * BATCH * GETITEM_MS + 20  # 4 samples of 5 ms
    assert evidence["collate_ms"] < 10  # default_collate of 4 small samples, no sleep
    assert evidence["handover_ms"] is None and evidence["pin_ms"] is None  # no workers, not pinned
    # everything runs inside the loop's wait: the parts are in it, and are most of it
    inside_ms = evidence["getitem_ms"] + evidence["collate_ms"]
    assert 0.75 * evidence["mean_wait_ms"] <= inside_ms <= evidence["mean_wait_ms"]
    assert evidence["dominant_part"] == "getitem"
    assert "__getitem__ takes the most" in finding.fix and "num_workers=" in finding.fix
    assert_same_batches(received)


def test_a_slow_collate_without_workers_is_named_by_its_line(tmp_path: Path) -> None:
    finding, _, received = doctor(tmp_path, "--collate-ms", str(COLLATE_MS))
    evidence = finding.evidence
    assert COLLATE_MS <= evidence["collate_ms"] <= 3 * COLLATE_MS + 20
    assert evidence["getitem_ms"] < 10
    assert 0.75 * evidence["mean_wait_ms"] <= evidence["getitem_ms"] + evidence["collate_ms"] <= evidence[
        "mean_wait_ms"]
    assert evidence["dominant_part"] == "collate"
    assert evidence["collate_fn"] == "slow_collate" and evidence["collate_site"] == COLLATE_SITE  # through partial
    assert f"slow_collate ({COLLATE_SITE})" in finding.fix
    assert "pre-tokenise or pre-pack" in finding.fix and "into the Dataset's __getitem__" in finding.fix
    assert_same_batches(received)


@pytest.mark.parametrize("slow", ["getitem", "collate"])
def test_with_forked_workers_the_parts_are_timed_in_the_workers(tmp_path: Path, slow: str) -> None:
    sleep = ["--getitem-ms", str(GETITEM_MS)] if slow == "getitem" else ["--collate-ms", str(COLLATE_MS)]
    finding, _, received = doctor(tmp_path, "--workers", "2", *sleep)
    evidence = finding.evidence
    slept_ms = BATCH * GETITEM_MS if slow == "getitem" else COLLATE_MS
    other = "collate" if slow == "getitem" else "getitem"
    assert slept_ms <= evidence[f"{slow}_ms"] <= 3 * slept_ms + 20  # in a worker, not the loop's wait
    assert evidence[f"{other}_ms"] < 10
    # the hand-over is a part of the loop's wait (each batch's within its own): never more than the wait
    assert 0.0 <= evidence["handover_ms"] <= evidence["mean_wait_ms"]
    assert evidence["pin_ms"] is None and evidence["loader_workers"] == 2
    assert evidence["dominant_part"] == slow
    assert_same_batches(received)


def test_with_spawned_workers_getitem_and_collate_are_timed_there(tmp_path: Path) -> None:
    # a spawned worker imports torch afresh: the fetch is timed there once its TimedCollate is unpickled
    finding, _, received = doctor(tmp_path, "--workers", "2", "--context", "spawn", "--getitem-ms", "2",
                                  "--collate-ms", str(COLLATE_MS))
    evidence = finding.evidence
    assert BATCH * 2 <= evidence["getitem_ms"] <= 3 * BATCH * 2 + 20
    assert COLLATE_MS <= evidence["collate_ms"] <= 3 * COLLATE_MS + 20
    assert 0.0 <= evidence["handover_ms"] <= evidence["mean_wait_ms"]
    assert evidence["dominant_part"] == "collate" and evidence["collate_site"] == COLLATE_SITE
    assert f"({COLLATE_SITE}) runs once per batch in one of the 2 workers" in finding.fix
    assert_same_batches(received)


def test_a_batch_slow_to_unpickle_is_a_slow_hand_over(tmp_path: Path) -> None:
    # each batch takes 10 ms to unpickle in the loop's process, inside some call of the loop's __next__ after the
    # workers (nothing else to do) finished it; a batch that arrives out of order is unpickled in the call before
    # its own, so at most 2 of the watched batches' unpickling can fall outside the watched calls
    finding, _, received = doctor(tmp_path, "--workers", "2", "--unpickle-ms", str(UNPICKLE_MS))
    evidence = finding.evidence
    assert (STEPS - 2) * UNPICKLE_MS / STEPS <= evidence["handover_ms"] <= evidence["mean_wait_ms"]
    assert evidence["dominant_part"] == "handover"
    assert "the hand-over from the workers takes the most" in finding.fix
    assert_same_batches(received, UNPICKLE_MS)


class Slab:
    """A batch that pins itself (torch's pin_memory calls its method) in 5 ms."""

    def __init__(self, values: torch.Tensor):
        self.values = values

    def pin_memory(self):
        time.sleep(0.005)
        return self


def slab_collate(samples):
    return Slab(torch.tensor(samples))


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


@pytest.mark.parametrize("workers", [0, 2])
def test_pinning_is_timed(monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    # no accelerator here: torch would not pin; told there is one, it runs its pinning path (the pin thread with
    # workers) on batches that pin themselves
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(torch.accelerator, "set_device_index", lambda index: None)
    loader = DataLoader(list(range(64)), batch_size=BATCH, collate_fn=slab_collate, pin_memory=True,
                        num_workers=workers)
    watcher, received = watched(loader)
    assert all(type(batch) is Slab for batch in received)
    assert [batch.values.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in
                                                             range(0, BATCH * len(received), BATCH)]
    evidence = input_bound.loader_parts(watcher.observe(), Notes())
    assert 5.0 <= evidence["pin_ms"] <= 3 * 5.0 + 20
    if workers:
        # the pinning is not counted in the hand-over: were it, the hand-over would hold each batch's 5 ms pin on
        # top of its own wait. Under load the loop also waits there for the pin thread, up to about one pin (seen
        # once: 6.5 ms against 5.6), so one pin's sleep is the margin, and either part may cost the loop most.
        assert 0.0 <= evidence["handover_ms"] <= evidence["pin_ms"] + 5.0
        assert evidence["dominant_part"] in ("pin", "handover")
    else:
        parts = sum(r.loader_split.getitem_s + r.loader_split.collate_s + r.loader_split.pin_s
                    for r in watcher.records)
        assert parts <= sum(r.data_wait_s for r in watcher.records)
        assert evidence["handover_ms"] is None


class Counting(IterableDataset):
    def __iter__(self):
        for index in range(64):
            time.sleep(0.001)
            yield index


def test_an_iterable_dataset_has_no_getitem_to_time() -> None:
    collate = functools.partial(_sleepy_collate, seconds=0.005)
    watcher, received = watched(DataLoader(Counting(), batch_size=BATCH, collate_fn=collate))
    assert [batch.tolist() for batch in received] == [list(range(i, i + BATCH)) for i in
                                                      range(0, BATCH * len(received), BATCH)]
    notes = Notes()
    evidence = input_bound.loader_parts(watcher.observe(), notes)
    assert evidence["getitem_ms"] is None and 5.0 <= evidence["collate_ms"] <= 3 * 5.0 + 20
    assert evidence["dominant_part"] is None  # the iterator's time is not split out: no part is said to dominate
    assert [note.text for note in notes.items] == [loader_split.ITERABLE_GAP]


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
    finding = input_bound.detect(seen, Notes())
    assert finding.evidence["getitem_ms"] == pytest.approx(40.0) and finding.evidence["pin_ms"] == pytest.approx(10)
    assert finding.evidence["dominant_part"] == "pin"
    assert "pinning (pin_memory) takes the most: 10.0 ms per batch" in finding.fix
    # with one worker the same __getitem__ is the part to fix
    one = dataclasses.replace(seen, loader=LoaderSettings(1, True, 0.0, LoaderParts("default_collate", None)))
    assert input_bound.detect(one, Notes()).evidence["dominant_part"] == "getitem"


def test_without_timed_batches_the_parts_are_null_and_a_note_says_why() -> None:
    notes = Notes()
    finding = input_bound.detect(on_cpu(steps(20, wall=0.1, wait=0.05)), notes)
    assert [finding.evidence[key] for key in input_bound.PART_KEYS] == [None] * 4
    assert finding.evidence["dominant_part"] is None and finding.evidence["batches_split"] == 0
    assert any(note.text.startswith("DataLoader time by part (getitem, collate): not timed") for note in notes.items)


def test_a_copy_of_the_timed_collate_made_here_patches_nothing() -> None:
    # only a worker unpickling its arguments times its fetches for good; this process keeps torch's own
    before = fetch._MapDatasetFetcher.__dict__["fetch"]
    copied = copy.deepcopy(loader_split.TimedCollate(default_collate))
    assert fetch._MapDatasetFetcher.__dict__["fetch"] is before and copied.collate_fn is default_collate
