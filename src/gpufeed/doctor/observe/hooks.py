"""The doctor's instrumentation, installed into torch: `Instrumentation` feeds a `Watcher` (watch.py) and
`remove()` restores everything it patched. Used by `run_script` (inject.py) and by `gpufeed.watch`.

- `_BaseDataLoaderIter.__next__` (the single- and multi-process iterators both inherit it): time blocked there is
  the data wait; `DataLoader.__iter__` (worker start-up counts as waiting); the loader's workers and pin_memory.
  Each batch is named by the line that asked for it (`call_site`), so that the Watcher can leave a validation
  loop's batches out (clock.py); the loader's __iter__ and its final StopIteration are data wait of the step.
  Inside the loader (loader_split.py): `_BaseDataLoaderIter.__init__` and `_MapDatasetFetcher.fetch`, so that
  each batch's time is split into __getitem__, collate, the hand-over from a worker and pinning.
  `DataLoader.__init__` (and TrainingArguments, when transformers is imported): where each loader was built and
  its settings (frameworks/setup.py), passed with each batch of its iterators so the fixes can name the user's line.
- a global optimizer step post-hook: the step clock once any optimizer steps (the first optimizer to step, when
  there are several: a GAN's discriminator, say; the distinct optimizers are counted for the report); with a
  pre-hook (parts.py), each optimizer step's host time (`optimizer_s`), added to the step before it ends.
- global module forward pre/post hooks: the outermost forward (no other active) with grad enabled after a backward
  pass (a hook on its output) marks a step, so a validation forward under torch.no_grad() does not; its inputs
  (positional and keyword: `model(**batch)`) and first parameter tell the batch size, float64 and CUDA, read when
  it returns. The first training forward at a small batch is kept for the batch probe (probe.py), which the
  hooks ignore while it runs. The first outermost forward with grad enabled names the step's model, whose own
  forward hooks (parts.py) then time its forward (`forward_s`) and, in a loop with no DataLoader, mark the end of
  the loop's own input work (`loop_input_s`, watch.py). Dropped at the end of the first outermost forward
  once a loader or an optimizer is the step clock and the step's model is known, so that their cost (a call per
  module) stops there.
- with CUDA only: `Tensor.to/.cuda/.cpu/.copy_` (host-to-device copies: host time, bytes, pinned or not; device to
  host counts as a wait), `Tensor.item/.tolist` and `torch.cuda.synchronize` (host waits: counted and timed), and,
  once the script uses CUDA, `torch.cuda.set_sync_debug_mode("warn")` with a warnings filter that counts implicit
  synchronisations (their time is unknown). On a machine without CUDA nothing of this is patched.

With `stop_when_done`, once the watch is complete (or `stop_requested` is set, by the watchdog in inject.py) the
next hook raises `DoctorStop`, a BaseException that `except Exception` in the script does not swallow.

Cost: a step costs the clock's hook (about 10 µs for the optimizer's on a 2-core CPU), the optimizer's pre-hook, and
two hook calls per call of the step's model (its forward pre-hook and forward hook, registered on that one module,
not on every module: parts.py), plus, on CUDA, two events and a few µs per patched call; loops timed by the forward
clock pay a hook call per module call (inside the model's forward_s); inside the loader a batch costs a few clock
reads and one small object (loader_split.py), nothing per sample. Patched Tensor methods are a graph break under
torch.compile. DataLoader workers fork with the hooks installed; they count nothing.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from gpufeed.doctor.frameworks.setup import Constructions
from gpufeed.doctor.notes import Note
from gpufeed.doctor.observe import probe
from gpufeed.doctor.observe.flops import transformer_size
from gpufeed.doctor.observe.parts import StepParts
from gpufeed.doctor.observe.tokens import pad_token_id_of
from gpufeed.doctor.patching import Patch, call_site, first_tensor

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text in sync debug mode "warn"


class DoctorStop(BaseException):
    """Raised into the script to stop it: the watch is complete, or the watchdog stopped waiting."""


class Instrumentation:
    """The hooks and patches that feed a `Watcher` (see the module's docstring). `stop_when_done`: raise
    `DoctorStop` into the loop once the watcher is done or `stop_requested` is set (the doctor, not `watch()`)."""

    def __init__(self, watcher, *, patch_loader: bool = True, stop_when_done: bool = False):
        self.watcher, self.patch_loader, self.stop_when_done = watcher, patch_loader, stop_when_done
        self.stop_requested = False
        self._pid = os.getpid()  # DataLoader workers fork with the hooks installed: they must not count
        self._patches: list[Patch] = []
        self._handles: list = []
        self._forward_handles: list = []
        self._depth = 0  # forwards active now
        self._backward_since_boundary = False
        self._model_read = False  # the first training forward's model was read (its padding id and size)
        self._clock_optimizer = None
        self._optimizers: set[int] = set()  # ids of the optimizers that stepped
        self.parts = StepParts(watcher)  # the model's forward and the optimizer steps, timed (parts.py)
        self._inside = 0  # inside an instrumented copy or wait: torch's sync warnings there are already counted
        self._nested = threading.local()  # this thread is inside one already: a subclass's __torch_function__
        self._sync_debug_previous: int | None = None
        self._warnings_saved: tuple | None = None
        self.built = Constructions()  # where each DataLoader was built (frameworks/setup.py)
        self._origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # iterator -> its loader's origin

    def install(self) -> None:
        self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        self.parts.install()
        self._forward_handles = [register_module_forward_pre_hook(self._on_forward_pre),
                                 register_module_forward_hook(self._on_forward_post, with_kwargs=True,
                                                              always_call=True)]
        if self.patch_loader:
            self._patch_loader()
        self.watcher.tokenizer_calls.install(self._patches)  # where the script asked for padding (padding.py)
        if torch.cuda.is_available():
            self._patch_cuda()

    def remove(self) -> None:
        for handle in self._handles + self._forward_handles:
            handle.remove()
        self._handles, self._forward_handles = [], []
        self.parts.remove()
        for patch in reversed(self._patches):
            patch.restore()
        self._patches = []
        self.built.remove()
        self.watcher.tokenizer_calls.remove()
        self.watcher.notes += [Note("unmeasured", f"loader site: {problem}") for problem in self.built.problems]
        self.watcher.notes += [Note("unmeasured", problem) for problem in self.watcher.tokenizer_calls.problems]
        self.built.problems = []
        self.watcher.tokenizer_calls.problems = []
        self._clock_optimizer = None
        self._end_sync_debug()

    def _maybe_stop(self) -> None:
        if self.watcher.done and self._depth == 0 and os.getpid() == self._pid:
            self.watcher.after_watch()  # once, between steps, in the script's own settings (threads, device)
        if self.stop_when_done and (self.watcher.done or self.stop_requested) and os.getpid() == self._pid:
            raise DoctorStop

    # --- step clocks --------------------------------------------------------------------------------------
    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if os.getpid() != self._pid or not self.parts.optimizer_ended(optimizer):  # its time into the step it ends
            return
        self.watcher.seen["optimizer steps"] += 1
        if id(optimizer) not in self._optimizers:
            self._optimizers.add(id(optimizer))
            self.watcher.seen["optimizers"] = len(self._optimizers)
        if self._clock_optimizer is None:
            self._clock_optimizer = optimizer
        if optimizer is self._clock_optimizer:
            self.watcher.step_boundary("optimizer")
        self._maybe_stop()

    def _on_forward_pre(self, module, inputs) -> None:
        self._depth += 1
        if self._depth != 1 or os.getpid() != self._pid or self.watcher.probing:
            return
        watcher = self.watcher
        watcher.seen["forward calls"] += 1
        if watcher.source is None or (watcher.source == "forward" and self._backward_since_boundary
                                      and torch.is_grad_enabled()):
            self._backward_since_boundary = False
            watcher.step_boundary("forward")
        if self.parts.model is None and torch.is_grad_enabled():  # the step's model: time its forwards
            self.parts.time_model(module, inputs)
        self._maybe_stop()

    def _on_forward_post(self, module, inputs, *rest) -> None:
        """(module, args, kwargs, output); torch calls it (module, args, output) when the forward raised."""
        self._depth = max(0, self._depth - 1)
        if self._depth != 0 or os.getpid() != self._pid or self.watcher.probing:
            return
        kwargs, output = rest if len(rest) == 2 else ({}, rest[0])
        watcher = self.watcher
        self._inspect(module, (inputs, kwargs))
        if watcher.source in (None, "forward") and torch.is_grad_enabled():
            tensor = first_tensor(output, requires_grad=True)
            if tensor is not None:
                tensor.register_hook(self._on_backward)
        # a better clock with the step's model known (parts.py times it), or no more steps: stop paying for these
        if not watcher.forwards_wanted and (self.parts.model is not None or watcher.done):
            for handle in self._forward_handles:
                handle.remove()
            self._forward_handles, self._depth = [], 0
            watcher.seen["forward hooks dropped"] = 1

    def _on_backward(self, grad) -> None:  # may run on an autograd worker thread: only set a flag
        if not self._backward_since_boundary:
            self.watcher.seen["backward passes"] += 1
            self._backward_since_boundary = True

    def _inspect(self, module, inputs) -> None:
        tensor = first_tensor(inputs)
        for value in (tensor, next(module.parameters(), None)):
            if value is not None:
                if value.dtype == torch.float64:
                    self.watcher.on_float64()
                if value.is_cuda:
                    self._using_cuda()
        if not self._model_read and torch.is_grad_enabled():  # the first training forward's model
            self._model_read = True
            self.watcher.pad_token_id = pad_token_id_of(module)
            self.watcher.model_size = transformer_size(module)
        if tensor is not None and tensor.dim() > 0:
            self.watcher.on_forward_input(int(tensor.shape[0]), id(module), torch.is_grad_enabled())
            if self.watcher.capture is None and torch.is_grad_enabled():  # the first training forward
                self.watcher.capture = probe.capture(module, *inputs, int(tensor.shape[0])) or False
        autocast = torch.is_autocast_enabled("cuda" if self.watcher.device == "cuda" else "cpu")
        self.watcher.autocast_seen = bool(self.watcher.autocast_seen) or autocast

    # --- the loader ---------------------------------------------------------------------------------------
    def _patch_loader(self) -> None:
        from torch.utils.data import dataloader
        from torch.utils.data._utils import fetch

        from gpufeed.doctor.observe import loader_split

        instrumentation, watcher = self, self.watcher

        def make_next(original):
            def __next__(iterator):
                watcher.on_wait_start()
                start = time.perf_counter()
                loader = call_site()
                try:
                    batch = original(iterator)
                except StopIteration:  # the epoch's end (workers shut down): time in the loader all the same
                    watcher.on_loader_wait(time.perf_counter() - start, loader)
                    raise
                split, parts = loader_split.taken(iterator)
                watcher.on_batch_wait(time.perf_counter() - start, batch, loader=loader,
                                      workers=getattr(iterator, "_num_workers", None),
                                      pin_memory=getattr(iterator, "_pin_memory", None), split=split, parts=parts,
                                      origin=instrumentation._origins.get(iterator), iterator=iterator)
                instrumentation._maybe_stop()
                return batch
            return __next__

        def make_iter(original):
            def __iter__(loader):
                start = time.perf_counter()
                iterator = original(loader)
                watcher.on_loader_wait(time.perf_counter() - start, call_site())  # workers starting
                instrumentation._origins[iterator] = instrumentation.built.origin(loader)
                watcher.seen["DataLoader iterations"] += 1
                return iterator
            return __iter__

        def make_init(original):
            def __init__(iterator, *args, **kwargs):
                original(iterator, *args, **kwargs)
                loader_split.instrument(iterator)
            return __init__

        self._patches += [Patch(dataloader._BaseDataLoaderIter, "__next__", make_next),
                          Patch(dataloader.DataLoader, "__iter__", make_iter),
                          Patch(dataloader._BaseDataLoaderIter, "__init__", make_init),
                          Patch(fetch._MapDatasetFetcher, "fetch", loader_split.timed_fetch)]
        self.built.install(self._patches)

    # --- CUDA copies and waits ----------------------------------------------------------------------------
    def _patch_cuda(self) -> None:
        instrumentation, watcher = self, self.watcher

        nested = instrumentation._nested

        def timed(original, tensor, args, kwargs):
            """The call and its seconds; None for the seconds of a call made from inside another on this thread
            (a tensor subclass's __torch_function__ calls the patched method again: the same copy, counted once)."""
            if getattr(nested, "depth", 0):
                return original(tensor, *args, **kwargs), None
            instrumentation._inside += 1
            nested.depth = 1
            start = time.perf_counter()
            try:
                return original(tensor, *args, **kwargs), time.perf_counter() - start
            finally:
                nested.depth = 0
                instrumentation._inside -= 1

        def make_move(original):  # .to, .cuda, .cpu: a copy when the result is on the other side
            def move(tensor, *args, **kwargs):
                result, seconds = timed(original, tensor, args, kwargs)
                if (seconds is not None and result is not tensor and isinstance(result, torch.Tensor)
                        and result.is_cuda != tensor.is_cuda):
                    instrumentation._moved(tensor, result.is_cuda, seconds)
                return result
            return move

        def make_copy(original):
            def copy_(destination, source, *args, **kwargs):
                result, seconds = timed(original, destination, (source, *args), kwargs)
                if seconds is not None and isinstance(source, torch.Tensor) and destination.is_cuda != source.is_cuda:
                    instrumentation._moved(source, destination.is_cuda, seconds)
                return result
            return copy_

        def make_wait(original):  # .item, .tolist: the host waits for the device
            def wait(tensor, *args, **kwargs):
                if not tensor.is_cuda:
                    return original(tensor, *args, **kwargs)
                result, seconds = timed(original, tensor, args, kwargs)
                if seconds is not None:
                    watcher.on_sync(seconds)
                return result
            return wait

        def make_synchronize(original):
            def synchronize(*args, **kwargs):
                result, seconds = timed(lambda _, *a, **k: original(*a, **k), None, args, kwargs)
                if seconds is not None:
                    watcher.on_sync(seconds)
                return result
            return synchronize

        self._patches += [Patch(torch.Tensor, name, make_move) for name in ("to", "cuda", "cpu")]
        self._patches += [Patch(torch.Tensor, "copy_", make_copy), Patch(torch.cuda, "synchronize",
                                                                           make_synchronize)]
        self._patches += [Patch(torch.Tensor, name, make_wait) for name in ("item", "tolist")]

    def _moved(self, source: torch.Tensor, to_device: bool, seconds: float) -> None:
        if to_device:
            self._using_cuda()
            self.watcher.on_copy(seconds, source.nelement() * source.element_size(), source.is_pinned())
        else:
            self.watcher.on_sync(seconds)

    def _using_cuda(self) -> None:
        self.watcher.note_device(torch.device("cuda"))
        if self._sync_debug_previous is not None or not torch.cuda.is_initialized():
            return
        try:
            self._sync_debug_previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        except Exception as error:  # an old or odd build: explicit waits are still counted
            self._sync_debug_previous = -1
            self.watcher.notes.append(Note("unmeasured", f"implicit synchronisations: set_sync_debug_mode failed "
                                                         f"({error})"))
            return
        self.watcher.notes.append(Note("unmeasured", "implicit synchronisations (torch sync debug mode): counted, "
                                                     "time not measured"))
        self._warnings_saved = (warnings.filters[:], warnings.showwarning)
        warnings.filterwarnings("always", message=SYNC_WARNING)
        warnings.showwarning = self._show_warning

    def _show_warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        if SYNC_WARNING not in str(message):
            self._warnings_saved[1](message, category, filename, lineno, file, line)
        elif not self._inside:
            self.watcher.on_sync(0.0)

    def _end_sync_debug(self) -> None:
        if self._sync_debug_previous is not None and self._sync_debug_previous >= 0:
            torch.cuda.set_sync_debug_mode(self._sync_debug_previous)
        if self._warnings_saved is not None:
            warnings.filters[:], warnings.showwarning = self._warnings_saved
            getattr(warnings, "_filters_mutated", lambda: None)()  # what filterwarnings() does after a change
        self._sync_debug_previous = self._warnings_saved = None
