"""One run of the script for a paired judgement, and the protocol every way of running it keeps.

A Runner runs the script once, with an experiment's change installed or none (a baseline), and gives back a Run:
the watched steps, or why they cannot be compared. Three implementations: this process (trials/runs.py's
`run_once`: the same interpreter, every patch restored after), a subprocess (process.py: `gpufeed doctor --json` in
a fresh process, the A/B mode's) and a torchrun job (ranks/job.py's `JobRunner`: rank 0's watched steps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpufeed.doctor.runs.script import Script, WatchSettings
    from gpufeed.measure.steps import StepRecord


@dataclass
class Run:
    """One run of the script: its watched steps and why they cannot be compared (None: they can). In this process,
    also the run's watcher and changes (what an experiment's check reads); from a subprocess, its saved document."""

    records: list[StepRecord]
    problem: str | None = None
    watcher: Any = None
    changes: Any = None
    document: dict | None = None


class Runner(Protocol):
    def __call__(self, script: Script, settings: WatchSettings, experiment: Any = None) -> Run:
        """Run `script` once, watched as `settings` says, with `experiment`'s change installed (None: none)."""
        ...
