"""Inside the loader: a DataLoader's time per batch split into the Dataset's `__getitem__`, the collate function,
the hand-over from its worker processes and pinning, each timed where it runs and carried to the loop with the
batch, which the loop then receives exactly as it would have without the doctor.

The parts, in seconds per batch (one `LoaderSplit`, measure/steps.py). Time stamps are `time.perf_counter()`,
which on Linux is CLOCK_MONOTONIC, one clock for every process of the machine, so a worker's stamps compare with
the main process's:
- getitem: from the start of the fetcher's `fetch` to the call of the collate function: the Dataset's
  `__getitem__` for each index of the batch (or its `__getitems__`; one `__getitem__` with batch_size=None),
  with the fetcher's own loop over them; in the worker that made the batch, when there are workers.
- collate: the collate function's call (the DataLoader's `collate_fn`, default_collate when none was given).
- handover (workers only): the part of the loop's wait in `__next__` after the worker finished the batch that
  was not pinning: received - max(finished, asked) - (the pinning inside that span), where `finished` is when
  its collate returned in the worker, `asked` when the loop's `_next_data` began and `received` when it returned.
  It is what the loop waited for the batch to cross from the worker (pickled into a queue with its tensors in
  shared memory, through the pin thread's queues, unpickled here), never time a finished batch sat ready before
  the loop asked for it. (A batch that arrives before the one the loop asked for is unpickled in that call, and
  counts there.) None without workers: nothing is handed over.
- pin: the `pin_memory` call on the batch (the pin thread with workers, the loop itself without); None when the
  loader does not pin (pin_memory=False, or no accelerator: torch then does not pin).
Without workers getitem, collate and pin run one after the other inside the loop's wait: together they are the
wait but the sampler's next index and a few calls of torch's. With workers getitem and collate are each worker's
work per batch, done by the workers in parallel; the wait is what of it the loop did not hide.

How (`instrument`, called by hooks.py as each DataLoader iterator is made, before its workers start):
- the iterator's `_collate_fn`, which its fetcher or workers are given (the DataLoader's `collate_fn` stays as
  it was), becomes a `TimedCollate`: it returns a `TimedBatch`, the user's batch with its time stamps. It is a
  module-level class, so that it pickles to workers started by spawn or forkserver (the user's collate function
  must pickle then anyway).
- `_MapDatasetFetcher.fetch` stamps its start onto a TimedBatch (`timed_fetch`): patched in this process by the
  Instrumentation (forked workers inherit it) and, in a worker that unpickles a TimedCollate, there (for good:
  the worker ends with its iterator). It touches nothing but a TimedBatch.
- torch's `pin_memory` calls the `pin_memory()` method of an object that has one: `TimedBatch.pin_memory` pins
  the batch inside it, timed.
- the iterator's `_next_data` is shadowed on the instance by its `IteratorTimer`, which hands out the user's
  batch and keeps the split for `taken` (the `__next__` patch gives it to the watcher). It stays with the
  iterator, so batches still timed after the doctor is removed (persistent workers, a loop outliving `watch()`)
  reach the loop plain all the same. It holds its iterator weakly: the workers still stop when the loop drops it.

Not timed (each a line in `LoaderParts.gaps`, told as a note by input_bound): `__getitem__` of an
IterableDataset (it has none; the time its iterator takes stays in the data wait, not split out); every part of
an iterator whose class has its own `__next__` (the batch might not pass through `_next_data`: it is left as it
is). A custom sampler or batch sampler changes nothing: its next index is outside every part.

Cost: per batch a few clock reads and one small object, pickled with the batch between processes; nothing per
sample.
"""

from __future__ import annotations

import functools
import multiprocessing
import time
import weakref
from typing import Any

from torch.utils.data import dataloader
from torch.utils.data._utils import fetch as fetch_module
from torch.utils.data._utils import pin_memory as pin_module

from gpufeed.doctor.observation import LoaderParts
from gpufeed.doctor.patching import shown_path
from gpufeed.measure.steps import LoaderSplit

ITERABLE_GAP = ("DataLoader __getitem__ time: the dataset is an IterableDataset, which has no per-sample "
                "__getitem__; the time its iterator takes stays in the data wait, not split out")


class TimedBatch:
    """The user's batch on its way from the fetcher to the loop, with when its parts began and ended."""

    __slots__ = ("batch", "fetch_start", "collate_start", "collate_end", "pin_start", "pin_end")

    def __init__(self, batch: Any, collate_start: float, collate_end: float, fetch_start: float | None = None,
                 pin_start: float | None = None, pin_end: float | None = None):
        self.batch, self.collate_start, self.collate_end = batch, collate_start, collate_end
        self.fetch_start, self.pin_start, self.pin_end = fetch_start, pin_start, pin_end

    def __reduce__(self):
        return TimedBatch, (self.batch, self.collate_start, self.collate_end, self.fetch_start, self.pin_start,
                            self.pin_end)

    def pin_memory(self) -> TimedBatch:
        """What torch's pin_memory calls on an object with this method: the batch inside pinned, timed."""
        start = time.perf_counter()
        self.batch = pin_module.pin_memory(self.batch)
        self.pin_start, self.pin_end = start, time.perf_counter()
        return self

    def split(self, asked: float, received: float, workers: bool) -> LoaderSplit:
        """The parts of this batch (module docstring), once the loop received it."""
        getitem = self.collate_start - self.fetch_start if self.fetch_start is not None else None
        pin = self.pin_end - self.pin_start if self.pin_start is not None else None
        handover = None
        if workers:
            begin = max(self.collate_end, asked)
            pinning = 0.0
            if pin is not None:
                pinning = max(0.0, min(self.pin_end, received) - max(self.pin_start, begin))
            handover = max(0.0, received - begin - pinning)
        return LoaderSplit(1, getitem, self.collate_end - self.collate_start, handover, pin)


class TimedCollate:
    """An iterator's collate function, timed: returns a TimedBatch. Unpickled (in a spawned worker) it also times
    the fetches of that process (`timed_fetch`)."""

    __slots__ = ("collate_fn",)

    def __init__(self, collate_fn):
        self.collate_fn = collate_fn

    def __call__(self, data):
        start = time.perf_counter()
        batch = self.collate_fn(data)
        return TimedBatch(batch, start, time.perf_counter())

    def __reduce__(self):
        return _in_worker, (self.collate_fn,)


def _in_worker(collate_fn) -> TimedCollate:
    """A TimedCollate unpickled: in a worker started by spawn or forkserver, whose torch has no patch of ours. A
    copy made in the doctor's own process patches nothing: a worker unpickles its arguments while multiprocessing
    marks it `_inheriting` (spawn.py's _main), before it knows its parent."""
    fetcher = fetch_module._MapDatasetFetcher
    child = getattr(multiprocessing.current_process(), "_inheriting", False) or multiprocessing.parent_process()
    if child and not getattr(fetcher.fetch, "timed", False):
        fetcher.fetch = timed_fetch(fetcher.fetch)
    return TimedCollate(collate_fn)


def timed_fetch(original):
    """`_MapDatasetFetcher.fetch` that stamps its start onto the TimedBatch its TimedCollate returns."""
    def fetch(fetcher, possibly_batched_index):
        start = time.perf_counter()
        data = original(fetcher, possibly_batched_index)
        if type(data) is TimedBatch:
            data.fetch_start = start
        return data
    fetch.timed = True
    return fetch


class IteratorTimer:
    """One DataLoader iterator's instrumentation: its `_next_data` (on the instance), and what the loop's
    `__next__` takes from it (`taken`): the latest batch's split and the iterator's `LoaderParts`."""

    __slots__ = ("_iterator", "_next_data", "workers", "parts", "last")

    def __init__(self, iterator, parts: LoaderParts):
        self._iterator = weakref.ref(iterator)
        self._next_data = type(iterator)._next_data
        self.workers = iterator._num_workers > 0
        self.parts, self.last = parts, None

    def __call__(self):
        asked = time.perf_counter()
        data = self._next_data(self._iterator())
        if type(data) is not TimedBatch:
            self.last = None
            return data
        self.last = data.split(asked, time.perf_counter(), self.workers)
        return data.batch


def instrument(iterator) -> None:
    """Time the batches of a DataLoader iterator being made (called at the end of `_BaseDataLoaderIter.__init__`,
    before a subclass's __init__ makes its fetcher or starts its workers); the module docstring says how."""
    name, site = code_site(iterator._collate_fn)
    gaps: list[str] = []
    own_next = type(iterator).__next__ is not dataloader._BaseDataLoaderIter.__next__
    if own_next:
        gaps.append(f"DataLoader time by part (__getitem__, collate, hand-over, pinning): the iterator "
                    f"{type(iterator).__qualname__} has its own __next__, so its batches are not timed inside")
    elif iterator._dataset_kind == dataloader._DatasetKind.Iterable:
        gaps.append(ITERABLE_GAP)
    timer = IteratorTimer(iterator, LoaderParts(name, site, tuple(gaps)))
    iterator._gpufeed_timer = timer
    if not own_next:  # the unwrapping first: no TimedBatch may reach the loop
        iterator._next_data = timer
        iterator._collate_fn = TimedCollate(iterator._collate_fn)


def taken(iterator) -> tuple[LoaderSplit | None, LoaderParts | None]:
    """The split of the batch `iterator` just handed out (None: not timed) and the iterator's LoaderParts (None:
    not instrumented)."""
    timer = iterator.__dict__.get("_gpufeed_timer")
    if timer is None:
        return None, None
    split, timer.last = timer.last, None
    return split, timer.parts


def code_site(function) -> tuple[str | None, str | None]:
    """(name, "file:line") where `function` is defined, from its code object: a function, a method, the function
    of a functools.partial, or a callable object's __call__; (name, None) for one without Python code."""
    while isinstance(function, functools.partial):
        function = function.func
    code = getattr(function, "__code__", None)
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    if code is None:  # a callable object
        code = getattr(type(function).__call__, "__code__", None) if callable(function) else None
        name = name or type(function).__qualname__
    return name, f"{shown_path(code.co_filename)}:{code.co_firstlineno}" if code is not None else None
