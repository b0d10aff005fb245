"""`Comparable`, what `gpufeed compare` needs of a kind of document: its figures with their samples, the step they
are parts of, the settings that make two runs comparable, and how its headline is worded. Each kind a comparison
can be of (report/kinds/compare.py: COMPARED) has one, in its own module (doctor.py, train.py, bench.py);
compare/kinds.py is the list, and documents.py compares two results through it without testing a kind's name.

The defaults are those of a kind whose runs have per-step records (doctor, train): a block bootstrap over the
steps, the time per sample (or per step) as the headline's figure, the parts of the step that moved as its body.
"""

from __future__ import annotations

from gpufeed.compare.figures import Series
from gpufeed.compare.headline import parts_phrase
from gpufeed.compare.model import Figure, FindingChange
from gpufeed.measure.difference import RESAMPLES, block_steps
from gpufeed.report.kinds.kind import DocumentKind


def as_text(value) -> str:
    """A setting or a machine's reading in words: null and an NA ({"reason": ...}) read "none"."""
    if isinstance(value, dict):
        return "none" if "reason" in value else str(value)
    return "none" if value is None else str(value)


class Comparable:
    """One kind's side of a comparison. `kind` is its DocumentKind (report/kinds/), the same object compare's
    document kind lists in COMPARED."""

    kind: DocumentKind

    def series(self, document: dict, parts: bool | None = None) -> list[Series]:
        """The figures of one result with their samples (`parts`: split the step as both runs can; doctor)."""
        raise NotImplementedError

    def settings(self, document: dict) -> dict[str, str]:
        """What the run was asked to do, in words, that a comparison lists when it differs."""
        raise NotImplementedError

    def sampled(self, document: dict) -> int:
        """Per-step (or per-repeat) records the result holds for the bootstrap: 0 when it has none."""
        raise NotImplementedError

    def step_ms(self, document: dict) -> float | None:
        """Mean step time, ms: what MIN_CHANGE of a part of the step is taken of (None: no part of a step)."""
        return None

    def step_times(self, document: dict) -> list[float]:
        """Each step's time, ms, for the page's distributions (empty: the result has none)."""
        return []

    def split(self, base: dict, new: dict) -> bool | None:
        """Whether both runs' steps are split into the same parts (None: the kind's series decide alone)."""
        return None

    def method(self, counts: tuple[int, int]) -> str:
        """How the differences are judged when both results have samples (`counts`: each one's records)."""
        blocks = f"{block_steps(counts[0])} and {block_steps(counts[1])}"
        return (f"block bootstrap over the per-step records ({counts[0]} and {counts[1]} steps, {RESAMPLES} "
                f"resamples in blocks of {blocks} consecutive steps), 95% intervals")

    def slower(self, figures: list[Figure]) -> tuple[float | None, tuple[float, float] | None, bool | None]:
        """NEW's time per sample over BASE's, minus 1, its interval as ratios, and whether it is real: from the
        time per sample, else the step."""
        figure = next((f for f in figures if f.key == "ms_per_sample"), None) or \
            next((f for f in figures if f.key == "step"), None)
        if figure is None or figure.ratio is None:
            return None, None, None
        interval = figure.interval
        ratios = (interval.ratio_low, interval.ratio_high) if interval and interval.ratio_low is not None else None
        return figure.ratio - 1.0, ratios, figure.real

    def headline_parts(self, lead: str, figures: list[Figure]) -> tuple[str, str, str | None]:
        """The headline's change per sample (`lead`, as worded for every kind), what moved, and what else it says."""
        return lead, parts_phrase(figures), None

    def verdicts(self, base: dict, new: dict) -> tuple[list[FindingChange], tuple, list[str]]:
        """Both runs' findings side by side, their verdicts, and notes on what could not be compared alike."""
        return [], (None, None), []
