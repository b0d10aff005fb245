"""Run someone else's training script, unmodified, with the doctor's instrumentation installed.

`run_script` runs it in this process as `python SCRIPT ARGS` (or `python -m MODULE ARGS`) would: `sys.argv`,
`sys.path[0]` (the script's folder, or the working directory for -m), `__name__ == "__main__"`, the user's working
directory. `Instrumentation` patches, all restored by `remove()` (and by `run_script` whatever happens):
- `_BaseDataLoaderIter.__next__` (the single- and multi-process iterators both inherit it): time blocked there is
  the data wait; `DataLoader.__iter__` (worker start-up counts as waiting); the loader's workers and pin_memory.
- a global optimizer step post-hook: the step clock once any optimizer steps (the first optimizer to step, when
  there are several).
- global module forward pre/post hooks: the outermost forward (no other active) after a backward pass (a hook on
  its output) marks a step; its input and first parameter tell float64 and CUDA. Dropped at the first forward
  once a loader or an optimizer is the step clock, so that their cost (a call per module) stops there.
- with CUDA only: `Tensor.to/.cuda/.cpu/.copy_` (host-to-device copies: host time, bytes, pinned or not; device to
  host counts as a wait), `Tensor.item/.tolist` and `torch.cuda.synchronize` (host waits: counted and timed), and,
  once the script uses CUDA, `torch.cuda.set_sync_debug_mode("warn")` with a warnings filter that counts implicit
  synchronisations (their time is unknown). On a machine without CUDA nothing of this is patched.

Stopping: once the watch is complete (or the watchdog gives up), the next hook raises `_DoctorStop`, a
BaseException that `except Exception` in the script does not swallow. The watchdog thread, after `timeout_s` with
no step, also sends SIGUSR1 to the main thread, whose handler raises it: that interrupts `time.sleep` and blocking
reads. Off the main thread it falls back to `PyThreadState_SetAsyncExc`, which waits for the next Python bytecode.
Either way a long call into C (one huge kernel, a C library's own wait) is interrupted only when it returns.

Cost and limits: a step costs the clock's hook (about 10 µs for the optimizer's on a 2-core CPU) plus, on CUDA,
two events and a few µs per patched call; loops timed by the forward clock pay a hook call per module call. The
script shares this process: its seeds, threads (restored after) and imports stay. Patched Tensor methods are a
graph break under torch.compile. DataLoader workers started by spawn rather than fork are not tested.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from gpufeed.errors import GpufeedError

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text in sync debug mode "warn"
STOP_SIGNAL = getattr(signal, "SIGUSR1", None)
_MISSING = object()


class _DoctorStop(BaseException):
    """Raised into the script to stop it: the watch is complete, or the watchdog stopped waiting."""


class _Patch:
    """`owner.name` replaced by `make(original)`; `restore()` puts back exactly what was there (or nothing)."""

    def __init__(self, owner: Any, name: str, make):
        self.owner, self.name = owner, name
        self.saved = owner.__dict__.get(name, _MISSING)
        setattr(owner, name, make(getattr(owner, name)))

    def restore(self) -> None:
        if self.saved is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.saved)


def first_tensor(value: Any, requires_grad: bool = False) -> torch.Tensor | None:
    """The first tensor in a (nested) tuple, list or dict, depth first; with `requires_grad`, the first that
    requires grad."""
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad or not requires_grad else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = first_tensor(item, requires_grad)
        if found is not None:
            return found
    return None


class Instrumentation:
    """The hooks and patches that feed a `Watcher` (see the module's docstring). `stop_when_done`: raise
    `_DoctorStop` into the loop once the watcher is done or `stop_requested` is set (the doctor, not `watch()`)."""

    def __init__(self, watcher, *, patch_loader: bool = True, stop_when_done: bool = False):
        self.watcher, self.patch_loader, self.stop_when_done = watcher, patch_loader, stop_when_done
        self.stop_requested = False
        self._pid = os.getpid()  # DataLoader workers fork with the hooks installed: they must not count
        self._patches: list[_Patch] = []
        self._handles: list = []
        self._forward_handles: list = []
        self._depth = 0  # forwards active now
        self._backward_since_boundary = False
        self._clock_optimizer = None
        self._inside = 0  # inside an instrumented copy or wait: torch's sync warnings there are already counted
        self._pending_wait_s = 0.0  # DataLoader.__iter__ and the final StopIteration: counted with the next batch
        self._sync_debug_previous: int | None = None
        self._warnings_saved: tuple | None = None

    def install(self) -> None:
        self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        self._forward_handles = [register_module_forward_pre_hook(self._on_forward_pre),
                                 register_module_forward_hook(self._on_forward_post, always_call=True)]
        if self.patch_loader:
            self._patch_loader()
        if torch.cuda.is_available():
            self._patch_cuda()

    def remove(self) -> None:
        for handle in self._handles + self._forward_handles:
            handle.remove()
        self._handles, self._forward_handles = [], []
        for patch in reversed(self._patches):
            patch.restore()
        self._patches = []
        self._clock_optimizer = None
        self._end_sync_debug()

    def _maybe_stop(self) -> None:
        if self.stop_when_done and (self.watcher.done or self.stop_requested) and os.getpid() == self._pid:
            raise _DoctorStop

    # --- step clocks --------------------------------------------------------------------------------------
    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if os.getpid() != self._pid:
            return
        self.watcher.seen["optimizer steps"] += 1
        if self._clock_optimizer is None:
            self._clock_optimizer = optimizer
        if optimizer is self._clock_optimizer:
            self.watcher.step_boundary("optimizer")
        self._maybe_stop()

    def _on_forward_pre(self, module, inputs) -> None:
        self._depth += 1
        if self._depth != 1 or os.getpid() != self._pid:
            return
        watcher = self.watcher
        watcher.seen["forward calls"] += 1
        if watcher.source is None or (watcher.source == "forward" and self._backward_since_boundary):
            self._backward_since_boundary = False
            watcher.step_boundary("forward")
        self._inspect(module, inputs)
        if watcher.source != "forward" or watcher.done:  # a better clock, or no more steps: stop paying for these
            for handle in self._forward_handles:
                handle.remove()
            self._forward_handles, self._depth = [], 0
        self._maybe_stop()

    def _on_forward_post(self, module, inputs, output) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self.watcher.source in (None, "forward") and torch.is_grad_enabled():
            tensor = first_tensor(output, requires_grad=True)
            if tensor is not None:
                tensor.register_hook(self._on_backward)

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
        if tensor is not None and tensor.dim() > 0:
            self.watcher.on_forward_input(int(tensor.shape[0]))
        autocast = torch.is_autocast_enabled("cuda" if self.watcher.device == "cuda" else "cpu")
        self.watcher.autocast_seen = bool(self.watcher.autocast_seen) or autocast

    # --- the loader ---------------------------------------------------------------------------------------
    def _patch_loader(self) -> None:
        from torch.utils.data import dataloader

        instrumentation, watcher = self, self.watcher

        def make_next(original):
            def __next__(iterator):
                watcher.on_wait_start()
                start = time.perf_counter()
                try:
                    batch = original(iterator)
                except StopIteration:
                    instrumentation._pending_wait_s += time.perf_counter() - start
                    raise
                waited = time.perf_counter() - start + instrumentation._pending_wait_s
                instrumentation._pending_wait_s = 0.0
                watcher.loader_workers = getattr(iterator, "_num_workers", None)
                watcher.loader_pin_memory = getattr(iterator, "_pin_memory", None)
                watcher.on_batch_wait(waited, batch)
                instrumentation._maybe_stop()
                return batch
            return __next__

        def make_iter(original):
            def __iter__(loader):
                start = time.perf_counter()
                iterator = original(loader)
                instrumentation._pending_wait_s += time.perf_counter() - start
                watcher.seen["DataLoader iterations"] += 1
                return iterator
            return __iter__

        self._patches += [_Patch(dataloader._BaseDataLoaderIter, "__next__", make_next),
                          _Patch(dataloader.DataLoader, "__iter__", make_iter)]

    # --- CUDA copies and waits ----------------------------------------------------------------------------
    def _patch_cuda(self) -> None:
        instrumentation, watcher = self, self.watcher

        def timed(original, tensor, args, kwargs):
            instrumentation._inside += 1
            start = time.perf_counter()
            try:
                return original(tensor, *args, **kwargs), time.perf_counter() - start
            finally:
                instrumentation._inside -= 1

        def make_move(original):  # .to, .cuda, .cpu: a copy when the result is on the other side
            def move(tensor, *args, **kwargs):
                result, seconds = timed(original, tensor, args, kwargs)
                if result is not tensor and isinstance(result, torch.Tensor) and result.is_cuda != tensor.is_cuda:
                    instrumentation._moved(tensor, result.is_cuda, seconds)
                return result
            return move

        def make_copy(original):
            def copy_(destination, source, *args, **kwargs):
                result, seconds = timed(original, destination, (source, *args), kwargs)
                if isinstance(source, torch.Tensor) and destination.is_cuda != source.is_cuda:
                    instrumentation._moved(source, destination.is_cuda, seconds)
                return result
            return copy_

        def make_wait(original):  # .item, .tolist: the host waits for the device
            def wait(tensor, *args, **kwargs):
                if not tensor.is_cuda:
                    return original(tensor, *args, **kwargs)
                result, seconds = timed(original, tensor, args, kwargs)
                watcher.on_sync(seconds)
                return result
            return wait

        def make_synchronize(original):
            def synchronize(*args, **kwargs):
                result, seconds = timed(lambda _, *a, **k: original(*a, **k), None, args, kwargs)
                watcher.on_sync(seconds)
                return result
            return synchronize

        self._patches += [_Patch(torch.Tensor, name, make_move) for name in ("to", "cuda", "cpu")]
        self._patches += [_Patch(torch.Tensor, "copy_", make_copy), _Patch(torch.cuda, "synchronize",
                                                                           make_synchronize)]
        self._patches += [_Patch(torch.Tensor, name, make_wait) for name in ("item", "tolist")]

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
            self.watcher.notes.append(f"implicit synchronisations: set_sync_debug_mode failed ({error})")
            return
        self.watcher.notes.append("implicit synchronisations (torch sync debug mode): counted, time not measured")
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


def device_memory(cuda: bool, unmeasured: list[str]) -> dict:
    """Peak allocated and total device memory and the caching allocator's retries (since the process began);
    Nones, with the reason appended to `unmeasured`, off CUDA or when unreadable."""
    empty = {"memory_peak_bytes": None, "memory_capacity_bytes": None, "allocator_retries": None}
    if not cuda or not torch.cuda.is_initialized():
        unmeasured.append("device memory: the device is the CPU" if not cuda else "device memory: CUDA never used")
        return empty
    try:
        device = torch.cuda.current_device()
        return {"memory_peak_bytes": int(torch.cuda.max_memory_allocated(device)),
                "memory_capacity_bytes": int(torch.cuda.get_device_properties(device).total_memory),
                "allocator_retries": int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))}
    except Exception as error:  # a build or device that cannot say: NA, not a crash
        unmeasured.append(f"device memory: unreadable ({type(error).__name__}: {error})")
        return empty


# --- running a script ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunOutcome:
    steps_seen: int  # steps the step clock ended, warm-up included
    error: str | None  # the script's exception in one line: "ValueError: message (train.py:12)"
    exited_early: bool  # the script returned or called sys.exit before the watch was complete
    seconds: float  # wall time of the run
    what_was_seen: str  # "3 forward calls, no backward pass, no optimizer step, no DataLoader batch"
    timed_out: bool = False  # the watchdog stopped it: no step ended for timeout_s
    timeout_s: float = 0.0
    exit_status: int | str | None = None  # the script's sys.exit argument, when it called sys.exit

    @property
    def problem(self) -> str | None:
        """Why the watch is incomplete, in one line; None when it completed."""
        steps = f"{self.steps_seen} step" + ("" if self.steps_seen == 1 else "s")
        if self.error is not None:
            return f"the script raised {self.error} after {steps}"
        if self.timed_out and self.steps_seen == 0:
            return f"no training step seen in {self.timeout_s:g} s ({self.what_was_seen})"
        if self.timed_out:
            return f"no step ended for {self.timeout_s:g} s after {steps} ({self.what_was_seen})"
        if self.exited_early:
            status = "" if self.exit_status in (None, 0) else f", exit status {self.exit_status}"
            seen = "without a training step" if self.steps_seen == 0 else f"after {steps}"
            return f"the script ended {seen}, before the watch was complete{status} ({self.what_was_seen})"
        return None


def what_was_seen(seen) -> str:
    """The counts a watcher kept, as words: what the script did, for a report that saw no (or few) steps."""
    parts = []
    for key, one, none in (("forward calls", "forward call", "no nn.Module forward"),
                           ("backward passes", "backward pass", "no backward pass"),
                           ("optimizer steps", "optimizer step", "no optimizer step"),
                           ("batches", "batch", "no DataLoader batch")):
        count = seen.get(key, 0)
        parts.append(none if count == 0 else f"{count} {one if count == 1 else key}")
    return ", ".join(parts)


def describe_exception(error: BaseException) -> str:
    """`Type: first line of the message (file:line)`, at the deepest frame outside torch, the standard library
    and gpufeed (the user's code), else the deepest frame."""
    frames = traceback.extract_tb(error.__traceback__)
    library = (os.path.dirname(os.__file__), os.path.dirname(torch.__file__),
               os.path.dirname(os.path.dirname(__file__)),
               "site-packages", "<frozen")
    own = [frame for frame in frames if not any(part in frame.filename for part in library)]
    frame = (own or frames or [None])[-1]
    message = (str(error).strip().splitlines() or [""])[0][:200]
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    if frame is None:
        return text
    name = os.path.relpath(frame.filename) if not os.path.relpath(frame.filename).startswith("..") else frame.filename
    return f"{text} ({name}:{frame.lineno})"


class _Watchdog:
    """A thread that stops the script when no step has ended for `timeout_s` (from the start, for the first):
    it sets `stop_requested` (the next hook raises) and interrupts the main thread (see the module docstring),
    again every `retry_s` while the script keeps running (a script that swallowed the first)."""

    def __init__(self, watcher, instrumentation: Instrumentation, timeout_s: float, retry_s: float = 2.0):
        self.watcher, self.instrumentation, self.timeout_s, self.retry_s = watcher, instrumentation, timeout_s, retry_s
        self.timed_out = False
        self._lock, self._finished, self._armed = threading.Lock(), threading.Event(), False
        self._target = threading.get_ident()
        self._use_signal = STOP_SIGNAL is not None and threading.current_thread() is threading.main_thread()
        self._previous_handler = None
        self._thread = threading.Thread(target=self._run, name="gpufeed-doctor-watchdog", daemon=True)

    def start(self) -> None:
        if self._use_signal:
            self._previous_handler = signal.signal(STOP_SIGNAL, self._on_signal)
        self._thread.start()

    def _run(self) -> None:
        progress, last_progress_s, next_try_s = -1, time.monotonic(), 0.0
        while not self._finished.wait(0.1):
            now = time.monotonic()
            if self.watcher.boundaries != progress:
                progress, last_progress_s = self.watcher.boundaries, now
            elif now - last_progress_s >= self.timeout_s and now >= next_try_s:
                self.timed_out = True
                self._interrupt()
                next_try_s = now + self.retry_s

    def _interrupt(self) -> None:
        with self._lock:
            if self._finished.is_set():
                return
            self.instrumentation.stop_requested = True
            self._armed = True
            if self._use_signal:
                signal.pthread_kill(self._target, STOP_SIGNAL)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._target),
                                                           ctypes.py_object(_DoctorStop))

    def _on_signal(self, signum, frame) -> None:
        if self._armed and not self._finished.is_set():
            self._armed = False
            raise _DoctorStop

    def finish(self) -> None:
        with self._lock:
            self._finished.set()
            if not self._use_signal and self._armed:  # withdraw an exception not yet delivered
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._target), None)
        if self._thread.ident is not None:
            self._thread.join(timeout=1.0)
        if self._previous_handler is not None:
            signal.signal(STOP_SIGNAL, self._previous_handler)
            self._previous_handler = None


def check_target(target: str, is_module: bool) -> None:
    """GpufeedError (wrong input) unless `target` is a script file, or with `is_module` a module importable from
    the working directory, as `python -m` would find it."""
    if not is_module:
        if not Path(target).is_file():
            raise GpufeedError(f"{target} does not exist or is not a file; give the path of a Python script "
                               f"(or -m MODULE)")
        return
    import importlib.util

    saved = sys.path[:]
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise GpufeedError(f"no module named {target!r} (searched from {os.getcwd()}); check the name, or give a "
                           f"script path without -m")


def _prepare(target: str, args: list[str], is_module: bool) -> None:
    """`sys.argv` and `sys.path[0]` as `python SCRIPT ARGS` / `python -m MODULE ARGS` set them."""
    check_target(target, is_module)
    sys.path[0] = os.getcwd() if is_module else os.path.dirname(os.path.realpath(target))
    sys.argv = [target, *args]


def run_script(target: str, args: list[str], is_module: bool, watcher, timeout_s: float = 60.0) -> RunOutcome:
    """Run a script (or module) in this process with `watcher` fed by the instrumentation, until the watch is
    complete, the script ends or raises, or no step ends for `timeout_s`. Everything patched is restored, and
    `sys.argv`, `sys.path`, the working directory and torch's thread count are put back. Raises GpufeedError when
    the script is not there; a KeyboardInterrupt passes through (after the cleanup)."""
    saved_argv, path_list, saved_path, saved_cwd = sys.argv, sys.path, sys.path[:], os.getcwd()
    saved_threads = torch.get_num_threads()
    instrumentation = Instrumentation(watcher, stop_when_done=True)
    watchdog = _Watchdog(watcher, instrumentation, timeout_s)
    error, exited, status = None, False, None
    start = time.perf_counter()
    try:
        _prepare(target, args, is_module)
        watcher.start()
        instrumentation.install()
        watchdog.start()
        try:
            if is_module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
            exited = True
        except _DoctorStop:
            pass
        except SystemExit as exit_request:
            exited, status = True, exit_request.code
        except Exception as raised:
            error = describe_exception(raised)
    finally:
        watchdog.finish()
        instrumentation.remove()
        watcher.threads = torch.get_num_threads()
        torch.set_num_threads(saved_threads)
        watcher.close()
        path_list[:] = saved_path
        sys.argv, sys.path = saved_argv, path_list
        os.chdir(saved_cwd)
    return RunOutcome(steps_seen=watcher.steps_closed, error=error, exited_early=exited and not watcher.done,
                      seconds=time.perf_counter() - start, what_was_seen=what_was_seen(watcher.seen),
                      timed_out=watchdog.timed_out and not watcher.done, timeout_s=timeout_s, exit_status=status)
