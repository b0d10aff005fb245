"""`gpufeed.watch()` and the `WatchedLoop` it returns: an iterable wrapper and a context manager around one
`Watcher` (observe/watch.py), with the doctor's instrumentation (observe/hooks.py) installed while it runs. Its
records split each step's compute as the doctor's do (observe/parts.py: `forward_s`, `optimizer_s`, `backward_s`),
the model being the first module called with grad enabled inside the watch; a step that began before that call
holds None for `forward_s` and `backward_s`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.report import Report
from gpufeed.doctor.observe.hooks import Instrumentation
from gpufeed.doctor.observe.profile import PROFILE_STEPS
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.measure.steps import StepRecord


class WatchedLoop:
    """What `watch()` returns: an iterable wrapper and a context manager around one `Watcher`."""

    def __init__(self, iterable: Iterable | None, steps: int, warmup: int, profile_steps: int = PROFILE_STEPS):
        self.watcher = Watcher(steps=steps, warmup=warmup, profile_steps=profile_steps)
        self._iterable = iterable
        self._instrumentation: Instrumentation | None = None
        if iterable is not None:
            self.watcher.loader_workers = getattr(iterable, "num_workers", None)
            self.watcher.loader_pin_memory = getattr(iterable, "pin_memory", None)

    def _install(self, patch_loader: bool) -> None:
        if self._instrumentation is None:
            self.watcher.start()
            self._instrumentation = Instrumentation(self.watcher, patch_loader=patch_loader)
            self._instrumentation.install()

    def _remove(self) -> None:
        if self._instrumentation is not None:
            self._instrumentation.remove()
            self._instrumentation = None
        self.watcher.close()

    def __enter__(self) -> WatchedLoop:
        self._install(patch_loader=self._iterable is None)
        return self

    def __exit__(self, *exc) -> None:
        self._remove()

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator:
        if self._iterable is None:
            raise TypeError("watch() was given nothing to iterate: use watch(loader), or `with watch() as w`")
        owner = self._instrumentation is None
        self._install(patch_loader=False)
        iterator, watcher = iter(self._iterable), self.watcher
        try:
            while True:
                watcher.on_wait_start()
                start = time.perf_counter()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                watcher.on_batch_wait(time.perf_counter() - start, batch)
                yield batch
        finally:
            if owner:
                self._remove()

    def step(self) -> None:
        """Mark the end of a training step (outranks every other step clock)."""
        self.watcher.step_boundary("manual")

    @property
    def records(self) -> list[StepRecord]:
        return self.watcher.records

    def report(self) -> Report:
        """The doctor's Report (`diagnose`) on the steps watched so far."""
        return diagnose(self.watcher.observe())


def watch(iterable: Iterable | None = None, *, steps: int = 50, warmup: int = 5,
          profile_steps: int = PROFILE_STEPS) -> WatchedLoop:
    """Watch a training loop from inside it: `for batch in watch(loader): ...`, or `with watch() as w: ...
    w.step()`. Records `steps` steps after `warmup`, profiles `profile_steps` more (0: none), then stops;
    `.records` and `.report()` any time."""
    return WatchedLoop(iterable, steps, warmup, profile_steps)
