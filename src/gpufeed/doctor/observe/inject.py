"""Run someone else's training script, unmodified, with the doctor's instrumentation installed.

`run_script` runs it in this process as `python SCRIPT ARGS` (or `python -m MODULE ARGS`) would: `sys.argv`,
`sys.path[0]` (the script's folder, or the working directory for -m), `__name__ == "__main__"`, an absolute
`__file__`, the user's working directory. The instrumentation (hooks.py: the DataLoader, optimizer, module and
CUDA copy/sync patches) is installed for the run and restored by `run_script` whatever happens.

Stopping: once the watch is complete (or the watchdog gives up), the next hook raises `DoctorStop`, a
BaseException that `except Exception` in the script does not swallow. The watchdog thread, after `timeout_s` with
no step, also sends SIGUSR1 to the main thread, whose handler raises it: that interrupts `time.sleep` and blocking
reads. Off the main thread it falls back to `PyThreadState_SetAsyncExc`, which waits for the next Python bytecode.
Either way a long call into C (one huge kernel, a C library's own wait) is interrupted only when it returns.

Limits: the script shares this process: its seeds, threads (restored after) and imports stay. DataLoader workers
started by spawn re-run the script as `__mp_main__` (tests/doctor/test_real_scripts.py), without the hooks. The
costs of the hooks are in hooks.py.
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
from dataclasses import dataclass
from pathlib import Path

import torch

from gpufeed.doctor.observe.hooks import DoctorStop, Instrumentation
from gpufeed.doctor.patching import shown_path
from gpufeed.errors import GpufeedError

STOP_SIGNAL = getattr(signal, "SIGUSR1", None)


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
        """Why the watch is incomplete, in one line; None when it completed. Steps are timed from one tick of the
        step clock to the next, so N optimizer steps make N - 1 timed steps."""
        steps = f"{self.steps_seen} timed step" + ("" if self.steps_seen == 1 else "s")
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
    """The counts a watcher kept, as words: what the script did, for a report that saw no (or few) steps.
    Forwards and backward passes are left out once the forward hooks were dropped (hooks.py): their counts stop
    there."""
    parts = []
    counted = (("forward calls", "forward call", "no nn.Module forward"),
               ("backward passes", "backward pass", "no backward pass"),
               ("optimizer steps", "optimizer step", "no optimizer step"),
               ("batches", "batch", "no DataLoader batch"))
    for key, one, none in counted[2:] if seen.get("forward hooks dropped") else counted:
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
    return f"{text} ({shown_path(frame.filename)}:{frame.lineno})"


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
                                                           ctypes.py_object(DoctorStop))

    def _on_signal(self, signum, frame) -> None:
        if self._armed and not self._finished.is_set():
            self._armed = False
            raise DoctorStop

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
                # __file__ absolute, as python 3.9+ sets it: spawned DataLoader workers re-run the script from
                # __main__.__file__, joined to the directory Python started in when it is relative
                runpy.run_path(os.path.abspath(target), run_name="__main__")
            exited = True
        except DoctorStop:
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
    return RunOutcome(steps_seen=watcher.steps_closed, error=error, exited_early=exited and not watcher.watched,
                      seconds=time.perf_counter() - start, what_was_seen=what_was_seen(watcher.seen),
                      timed_out=watchdog.timed_out and not watcher.watched, timeout_s=timeout_s, exit_status=status)
