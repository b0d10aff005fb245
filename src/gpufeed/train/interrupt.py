"""Stopping a run cleanly: SIGINT (Ctrl-C) or SIGTERM (what schedulers send before they kill) ends the current step,
a checkpoint is written, and the run ends with `Interrupted`, which says where it stopped and what was saved.

A second signal stops at once (KeyboardInterrupt, as Python's default). Several ranks agree on the step to stop
at: each step's "asked to stop" flag is summed over the ranks (`distributed.StopVote`), started after the step
and read after the next one, so the vote overlaps the work and every rank stops after the same step, none left
waiting in a collective. The handlers are installed only in the main thread (Python delivers signals there) and
put back on the way out.
"""

from __future__ import annotations

import signal
import threading

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))


class StopSignals:
    """A context manager: while inside, the first SIGINT/SIGTERM sets `received` (its name); a second raises
    KeyboardInterrupt in the main thread."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in SIGNALS:
                self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _on_signal(self, number: int, frame) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(number).name
