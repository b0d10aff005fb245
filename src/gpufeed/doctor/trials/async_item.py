"""The "async_item" experiment for sync_stall (`gpufeed doctor --try`, CUDA only): `.item()` without the wait.

A per-step `loss.item()` makes the host wait until the device has finished the step, so the device runs dry while
the host launches the next one. The fix in a real script is to read a value that is already on the host: log a
one-step-stale value (copy it with non_blocking=True into pinned memory, read it a step later), or accumulate on
the device and read every N steps. This experiment does the first for the script, without editing it.

During the changed run `Tensor.item` (and `Tensor.tolist` on small tensors) is patched. For a CUDA tensor, per call
site (`call_site`), the call starts a non_blocking copy into a fresh pinned host buffer, records a CUDA event after
it, and returns the value of that site's previous call: its event has usually completed (queried; if not, the host
waits on that old event, which waits for a step-old copy, not for the current step). The first call at a site is a
real, waiting `.item()`. So the host runs about one step ahead of the device, as it would with the fix, and the
values the script sees are one call (one step) stale: the run measures the speed, not the script's results.
`StaleReads` holds that logic with its device operations injected (`copy_async`, `ready`, `wait`, `value`), so the
tests run it on the CPU with fakes; `CudaCopies` are the real ones.

Which calls are deferred: a CUDA tensor, no arguments, `.item()` (one element) or `.tolist()` of at most
MOST_LISTED elements whose shape is the site's previous one (a batch that shrinks at the epoch's end gets a real
read: a stale list of another length could break the script, not just its numbers). Calls from torch's own code
(GradScaler's inf check, say) stay exact, except `Tensor.__format__` (f"{loss:.4f}"), whose site is the caller's.
Everything else (CPU tensors, larger tensors, arguments) goes to the original method. `float(loss)`, `.cpu()`,
`print(loss)` and `torch.cuda.synchronize()` are not patched: a script that waits that way shows no deferred read,
and the experiment says so instead of a gain.

Limits: a helper that reads several tensors from one line (`def value(t): return t.item()`) is told apart by its
caller's line too (SITE_FRAMES frames), not by the tensor; a value that steers the script (a shape, a stopping
test) arrives a step late and may break or change the run (then a line in `unmeasured`). The host is at most about
a step ahead when the watch ends, so a run of W steps may overstate the rate by up to one step's device time in W.
Under torch.compile a patched Tensor method is a graph break (as the doctor's own patches are).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gpufeed.doctor.patching import Patch
from gpufeed.doctor.trials.changes import Experiment

# gpufeed's choice: a .tolist() of up to 1024 elements (a metric vector, per-class counts) is a small pinned copy;
# beyond that the list itself costs more than the wait, and the buffers would grow the pinned-memory cache.
MOST_LISTED = 1024
# gpufeed's choice: a site is the calling line and its caller's, so one helper called from two lines is two sites.
SITE_FRAMES = 2
# frames between the user's call and `call_site`: this module's wrapper and the doctor's own instrumentation
_PASSED = frozenset({__name__, "gpufeed.doctor.observe.hooks"})


def _in_torch(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name == "torch" or name.startswith("torch.")


def call_site(frames: int = SITE_FRAMES) -> tuple | None:
    """The caller's (code object, bytecode offset), and its caller's (up to `frames` in all), past this module and
    the doctor's hooks and past `Tensor.__format__`; None when the call comes from torch's own code. The offset, not
    the line, so that two reads on one line are two sites."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _PASSED:
        frame = frame.f_back
    if frame is not None and frame.f_code.co_name == "__format__" and _in_torch(frame):
        frame = frame.f_back
    if frame is None or _in_torch(frame):
        return None
    site = []
    while frame is not None and len(site) < frames:
        site.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    return tuple(site)


@dataclass
class PinnedCopy:
    """A device tensor's copy under way: the pinned host buffer it lands in, and the event recorded after it."""

    buffer: torch.Tensor
    event: Any  # torch.cuda.Event


class CudaCopies:
    """The device operations of `StaleReads` on CUDA. `copy_` is taken when this is made (before the doctor's
    instrumentation patches it), so the experiment's own copies are not counted as the script's."""

    def __init__(self) -> None:
        self._copy = torch.Tensor.copy_

    def copy_async(self, tensor: torch.Tensor) -> PinnedCopy:
        buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        self._copy(buffer, tensor.detach(), non_blocking=True)  # on the tensor device's current stream
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(tensor.device))
        return PinnedCopy(buffer, event)

    def ready(self, handle: PinnedCopy) -> bool:
        return handle.event.query()

    def wait(self, handle: PinnedCopy) -> None:
        handle.event.synchronize()

    def value(self, handle: PinnedCopy, read: Callable) -> Any:
        return read(handle.buffer)  # a host tensor: the original method, no wait


def _on_cuda(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda and tensor.layout == torch.strided  # a sparse tensor's read stays as it was


class StaleReads:
    """Device reads that return the value of the same site's previous read (see the module docstring).

    `copy_async(tensor) -> handle` starts a copy to the host; `ready(handle)` says whether it has landed,
    `wait(handle)` waits for it, `value(handle, read)` applies `read` (the original method) to the host copy.
    `on_device(tensor)`: whether a read of `tensor` waits for a device (others go to the original method).
    `counts` (the experiment's Changes.counts): "first reads" (real, at a new site), "stale reads" (deferred),
    "waits" (an old copy not yet landed)."""

    def __init__(self, counts: Counter, copy_async: Callable, ready: Callable, wait: Callable, value: Callable,
                 on_device: Callable[[torch.Tensor], bool] = _on_cuda):
        self.counts, self.on_device = counts, on_device
        self.copy_async, self.ready, self.wait, self.value = copy_async, ready, wait, value
        self.last: dict[tuple, tuple[Any, torch.Size]] = {}  # site -> (its previous read's handle, shape)

    def read(self, original: Callable, tensor: torch.Tensor, site: tuple | None, most: int = 1) -> Any:
        """`original(tensor)`'s value as of `site`'s previous call, or `original(tensor)` itself (a first call,
        a call from torch, a tensor off the device or of more than `most` elements, or of a new shape)."""
        if site is None or not self.on_device(tensor) or not 0 < tensor.numel() <= most:
            return original(tensor)
        previous = self.last.get(site)
        self.last[site] = (self.copy_async(tensor), tensor.shape)
        if previous is None or previous[1] != tensor.shape:
            self.counts["first reads"] += 1
            return original(tensor)  # waits for the device, and so for the copy just started
        handle = previous[0]
        if not self.ready(handle):
            self.counts["waits"] += 1
            self.wait(handle)
        self.counts["stale reads"] += 1
        return self.value(handle, original)

    def clear(self) -> None:
        self.last.clear()  # the pinned buffers go back to torch's cache


def defer_reads(changes, reads: StaleReads | None = None) -> StaleReads:
    """Patch `Tensor.item` and `Tensor.tolist` to read through `reads` (default: on CUDA, counting into
    `changes.counts`); `changes.restore()` puts the original methods back and drops the pending copies."""
    if reads is None:
        copies = CudaCopies()
        reads = StaleReads(changes.counts, copies.copy_async, copies.ready, copies.wait, copies.value)

    def make(most: int):
        def wrap(original):
            def method(tensor, *args, **kwargs):
                if args or kwargs or not reads.on_device(tensor):
                    return original(tensor, *args, **kwargs)
                return reads.read(original, tensor, call_site(), most)
            return method
        return wrap

    changes.patches += [Patch(torch.Tensor, "item", make(1)), Patch(torch.Tensor, "tolist", make(MOST_LISTED))]
    changes.cleanups.append(reads.clear)
    return reads


def deferred(watcher, changes, baseline) -> str | None:
    """The experiment's check: the change took only if some read was deferred."""
    if changes.counts["stale reads"] == 0:
        return "no .item() or .tolist() of a CUDA tensor was deferred: the script waits some other way (.cpu(), " \
               "float() or print of a device tensor, torch.cuda.synchronize)"
    return None


ASYNC_ITEM = Experiment("sync_stall", "async_item", "each CUDA .item() (and small .tolist()) returned its call "
                        "site's previous value, copied with non_blocking=True to pinned memory instead of waiting "
                        "for the device (the values the script saw were one step stale: this measures the speed, "
                        "not the results)", defer_reads, min_warmup=1, check=deferred)
