"""What `gpufeed compare` and the doctor's A/B mode return: typed and frozen, for the command line and the pages
to show. `to_json` gives the documented JSON (docs/design.md, "compare")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from gpufeed.measure.difference import Interval


@dataclass(frozen=True)
class Figure:
    """One figure of both runs. `level` 0 is a figure of the whole step (or run), 1 a part inside the level-0
    figure above it (getitem inside data wait). `interval` is the 95% interval of NEW - BASE (None: not
    computed, `real` is then None too); `real`: measure/difference.py's rule (the interval clear of MIN_CHANGE
    on one side)."""

    key: str  # "data_wait", "getitem", "samples_per_s", "kernel matmul cpu fp32 512 x 512 x 512"
    name: str  # in words: "data wait"
    unit: str  # "ms a step", "ms a batch", "samples/s", "ms a call"
    level: int
    lower_is_better: bool
    base: float | None
    new: float | None
    interval: Interval | None = None
    real: bool | None = None

    @property
    def difference(self) -> float | None:
        return None if self.base is None or self.new is None else self.new - self.base

    @property
    def ratio(self) -> float | None:
        return None if self.difference is None or not self.base else self.new / self.base

    @property
    def worse(self) -> bool | None:
        """NEW is worse than BASE on this figure (None: a run lacks it)."""
        if self.difference is None:
            return None
        return self.difference > 0 if self.lower_is_better else self.difference < 0

    def to_json(self) -> dict:
        interval = self.interval
        return {"key": self.key, "name": self.name, "unit": self.unit, "level": self.level,
                "lower_is_better": self.lower_is_better, "base": self.base, "new": self.new,
                "difference": self.difference, "ratio": self.ratio,
                "interval": None if interval is None else [interval.low, interval.high], "real": self.real}


@dataclass(frozen=True)
class FindingChange:
    """A doctor finding in either run: its grade (severity) in each, None where the run has no such finding."""

    kind: str
    base: str | None
    new: str | None

    @property
    def status(self) -> str:
        if self.base is None:
            return "appeared"
        if self.new is None:
            return "disappeared"
        return "same" if self.base == self.new else "changed grade"


@dataclass(frozen=True)
class Comparison:
    """Two runs of one command side by side. `slower` is NEW's time per sample over BASE's, minus 1 (0.23: 23%
    slower; negative: faster; None: not computed), with its interval and whether it is real (None: not computed,
    `method` says why)."""

    command: str  # "doctor", "train" or "bench"
    mode: str  # "documents": two saved results; "pairs": runs made alternately (doctor's A/B)
    base: str  # what BASE is: a file, or the baseline's command line
    new: str
    headline: str
    method: str  # how the differences were judged, in words
    slower: float | None
    slower_interval: tuple[float, float] | None
    slower_real: bool | None
    conditions: list[str]  # what differs between the runs besides the change: "machine: CPU A vs CPU B"
    across_machines: bool
    figures: list[Figure]
    findings: list[FindingChange] = field(default_factory=list)
    verdicts: tuple[str | None, str | None] = (None, None)  # doctor: each run's verdict kind
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why
    distributions: dict = field(default_factory=dict)  # {"base": [...], "new": [...], "unit": "ms a step"}
    pairs: list[dict] = field(default_factory=list)  # pairs mode: each pair's figures

    def to_json(self) -> dict:
        return {"command": self.command, "mode": self.mode, "base": self.base, "new": self.new,
                "headline": self.headline, "method": self.method, "slower": self.slower,
                "slower_interval": None if self.slower_interval is None else list(self.slower_interval),
                "slower_real": self.slower_real, "conditions": list(self.conditions),
                "across_machines": self.across_machines, "figures": [f.to_json() for f in self.figures],
                "findings": [dict(dataclasses.asdict(f), status=f.status) for f in self.findings],
                "verdicts": {"base": self.verdicts[0], "new": self.verdicts[1]}, "notes": list(self.notes),
                "distributions": dict(self.distributions), "pairs": list(self.pairs)}


@dataclass(frozen=True)
class GateOutcome:
    """`--fail-if-slower PCT`: whether the job fails (exit status 3) and the sentence that says why or why not."""

    failed: bool
    percent: float
    sentence: str


def per_sample_words(slower: float) -> str:
    """NEW's change per sample in words, slower in time and faster in rate, as people say them: "NEW is 23%
    slower per sample" (23% more time), "NEW takes 8.9x BASE's time per sample" (from twice the time), "NEW is
    12% faster per sample" (12% more samples a second), "NEW is 2.08x as fast per sample" (from 1.5x)."""
    if slower >= 1.0:
        return f"NEW takes {1.0 + slower:.1f}x BASE's time per sample"
    if slower >= 0.0:
        return f"NEW is {slower:.{0 if slower >= 0.01 else 1}%} slower per sample"
    speedup = 1.0 / (1.0 + slower)
    if speedup >= 1.5:
        return f"NEW is {speedup:.2f}x as fast per sample"
    return f"NEW is {speedup - 1.0:.{0 if speedup >= 1.01 else 1}%} faster per sample"


def gate(comparison: Comparison, percent: float) -> GateOutcome:
    """Fail when NEW is slower per sample by more than `percent` and the difference is real; pass otherwise,
    saying so when it is slower but within the noise, or when the significance could not be computed."""
    slower = comparison.slower
    if slower is None:
        return GateOutcome(False, percent, f"gate ({percent:g}%): passed, the time per sample was not compared "
                                           f"({comparison.method})")
    words = per_sample_words(slower)
    if slower * 100.0 <= percent:
        return GateOutcome(False, percent, f"gate ({percent:g}%): passed, {words}")
    if comparison.slower_real is None:
        return GateOutcome(False, percent, f"gate ({percent:g}%): passed, {words} but whether that is real "
                                           f"could not be computed ({comparison.method})")
    if not comparison.slower_real:
        low, high = comparison.slower_interval or (None, None)
        within = f" (time per sample {low:+.1%} to {high:+.1%})" if low is not None else ""
        return GateOutcome(False, percent, f"gate ({percent:g}%): passed, {words} but within the "
                                           f"noise{within}")
    return GateOutcome(True, percent, f"gate ({percent:g}%): failed, {words}, beyond the noise "
                                      f"and over {percent:g}%")
