"""Whether a difference between two runs is real: the one engine that `gpufeed compare` (two saved runs), the
doctor's A/B mode (pairs of runs in their own processes) and `--try` (pairs of runs of the script, on one rank or a
torchrun job) all judge by. Pure statistics on numbers: no torch, no documents.

Two estimators of the interval of NEW - BASE (and of NEW / BASE - 1), and one rule on it:
- **Pairs** (`pairs_interval`, `PairedRatios`): runs made alternately in ABBA order (`abba_order`: BASE NEW, NEW
  BASE, ...; a machine that slows steadily favours neither side). With few pairs there is no distribution to fit:
  the interval is the range of the pairs' differences and ratios. One pair has no spread, so it is not judged.
- **Steps of two saved runs** (`bootstrap_interval`): steps are autocorrelated (a stall every 7 steps, a slow stretch
  while the page cache warms, a neighbour's job for a minute), so resampling single steps would understate the
  noise. The moving-block bootstrap (Künsch 1989) resamples runs of `block_steps(n)` consecutive steps with
  replacement, independently for each run, until each resample is as long as its run; the statistic is recomputed on
  every resample, and the 95% interval is its 2.5th and 97.5th percentiles. A figure is a ratio of sums over steps
  (seconds of a part over steps, samples over seconds, seconds over samples), or a median (bench's repeats, which are
  independent: blocks of one). The generator is seeded, so the same two documents always give the same interval.

The rule (`is_real`): a change is real when its whole interval lies beyond MIN_CHANGE on one side. For a figure of
its own (a rate, a time per sample, a kernel's time) the band is the ratio's, symmetric in log (NEW / BASE at least
1 + MIN_CHANGE, or at most 1 / (1 + MIN_CHANGE)), so a rate and the time per sample it inverts are judged alike; for
a part of the step the band is MIN_CHANGE of BASE's step time. The words for the three outcomes are `WORDS`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

# gpufeed's choice: a change smaller than 1% of BASE (its step, for a part of the step; else the figure itself) is
# "no change" even when the runs tell it apart: a headline should not name a part that moved by a rounding error,
# nor --try credit a fix with a gain that small.
MIN_CHANGE = 0.01

RESAMPLES = 2000  # gpufeed's choice: the 2.5% tails rest on 50 resamples each; 2000 x 500 steps is a few ms
SEED = 0
LEVEL = 0.95


def block_steps(steps: int) -> int:
    """Block length for a run of `steps` steps: the cube root rounded up (the order Politis and White 2004 find
    optimal for the mean), so 50 steps resample in blocks of 4 and 1,000 in blocks of 10."""
    return max(1, math.ceil(steps ** (1.0 / 3.0)))


@dataclass(frozen=True)
class Samples:
    """One figure's samples in one run. With `median`, the figure is the median of `numerator` (independent
    repeats); otherwise sum(numerator) / sum(denominator) over the steps (NaN steps left out: not measured)."""

    numerator: np.ndarray
    denominator: np.ndarray | None = None
    median: bool = False

    def value(self) -> float | None:
        """The figure over all the samples (None: none, or none measured)."""
        if not len(self.numerator):
            return None
        value = float(_statistic(self, np.arange(len(self.numerator))[None, :])[0])
        return value if np.isfinite(value) else None


def _statistic(samples: Samples, indices: np.ndarray) -> np.ndarray:
    """The figure over each row of step indices (R x n): R values."""
    top = samples.numerator[indices]
    if samples.median:
        return np.nanmedian(top, axis=1)
    bottom = np.ones_like(top) if samples.denominator is None else samples.denominator[indices]
    mask = np.isfinite(top) & np.isfinite(bottom)
    summed = np.where(mask, bottom, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(summed > 0, np.where(mask, top, 0.0).sum(axis=1) / np.where(summed > 0, summed, 1.0),
                        np.nan)


def resample_indices(steps: int, block: int, rng: np.random.Generator, resamples: int = RESAMPLES) -> np.ndarray:
    """R x steps indices: each row whole blocks of `block` consecutive steps from random starts, cut to length."""
    block = min(block, steps)
    blocks = math.ceil(steps / block)
    starts = rng.integers(0, steps - block + 1, size=(resamples, blocks))
    return (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, blocks * block)[:, :steps]


@dataclass(frozen=True)
class Interval:
    """The 95% interval of NEW - BASE (and of NEW / BASE - 1), and how it was found."""

    low: float
    high: float
    ratio_low: float | None
    ratio_high: float | None

    @property
    def excludes_zero(self) -> bool:
        return bool(self.low > 0.0 or self.high < 0.0)


def bootstrap_interval(base: Samples, new: Samples, resamples: int = RESAMPLES, seed: int = SEED) -> Interval | None:
    """The interval of the difference of one figure between two runs (None: a run has fewer than 2 samples)."""
    if len(base.numerator) < 2 or len(new.numerator) < 2:
        return None
    rng = np.random.default_rng(seed)
    draws = []
    for samples in (base, new):
        steps = len(samples.numerator)
        block = 1 if samples.median else block_steps(steps)
        draws.append(_statistic(samples, resample_indices(steps, block, rng, resamples)))
    first, second = draws
    keep = np.isfinite(first) & np.isfinite(second)
    if keep.sum() < resamples // 2:
        return None
    first, second = first[keep], second[keep]
    tail = 100.0 * (1.0 - LEVEL) / 2.0
    low, high = np.percentile(second - first, [tail, 100.0 - tail])
    ratio_low = ratio_high = None
    if np.all(first > 0):
        ratio_low, ratio_high = np.percentile(second / first - 1.0, [tail, 100.0 - tail])
    return Interval(float(low), float(high), None if ratio_low is None else float(ratio_low),
                    None if ratio_high is None else float(ratio_high))


def pairs_interval(differences: list[float], ratios: list[float]) -> Interval | None:
    """For runs made in alternating pairs: the range of the pairs' differences (NEW - BASE) and ratios
    (NEW / BASE - 1), as `--try` reports its pairs; None for a single pair (no spread to judge by)."""
    if len(differences) < 2:
        return None
    return Interval(min(differences), max(differences), min(ratios) if ratios else None,
                    max(ratios) if ratios else None)


def is_real(interval: Interval | None, reference: float | None = None) -> bool | None:
    """Whether the change whose interval this is is real (the module's rule): None when not computed. With
    `reference` (BASE's step time, for a part of the step) the differences must clear MIN_CHANGE of it; without,
    the ratios must clear the log-symmetric band about 1 (the differences against 0, when BASE is not positive)."""
    if interval is None:
        return None
    if reference is None:
        if interval.ratio_low is None or interval.ratio_high is None:
            return interval.excludes_zero
        return bool(interval.ratio_low >= MIN_CHANGE or interval.ratio_high <= 1.0 / (1.0 + MIN_CHANGE) - 1.0)
    band = MIN_CHANGE * abs(reference)
    if band == 0.0:
        return interval.excludes_zero
    return bool(interval.low >= band or interval.high <= -band)


def clear_of(interval: Interval | None, ratio: float) -> int | None:
    """Which side of NEW / BASE = `ratio` the whole ratio interval lies on: -1 below it, +1 above it, None when it
    straddles it or is not computed. A choice made against a margin (train's automatic precision: bf16 at least
    10% faster) is made only once the interval is clear of it."""
    if interval is None or interval.ratio_low is None or interval.ratio_high is None:
        return None
    if interval.ratio_high < ratio - 1.0:
        return -1
    if interval.ratio_low > ratio - 1.0:
        return 1
    return None


# The one wording of the outcomes, for rates (higher is better) as --try reports its gains.
WORDS = {True: "", False: "not told apart from no change", None: "one pair: not judged"}


@dataclass(frozen=True)
class PairedRatios:
    """NEW / BASE of a rate in each pair of runs made in ABBA order: the median, the range, and the judgement."""

    ratios: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def low(self) -> float:
        return min(self.ratios)

    @property
    def high(self) -> float:
        return max(self.ratios)

    @property
    def interval(self) -> Interval | None:
        return pairs_interval([ratio - 1.0 for ratio in self.ratios], [ratio - 1.0 for ratio in self.ratios])

    @property
    def real(self) -> bool | None:
        """True: a real change (faster or slower, by the median's side); False: within MIN_CHANGE or the noise;
        None: one pair, no spread to judge by."""
        return is_real(self.interval)

    def words(self) -> str:
        """"" for a real gain, "slower" for a real loss, else WORDS' line."""
        real = self.real
        if real:
            return "" if self.median > 1.0 else "slower"
        return WORDS[real]


def judged_ratios(low: float | None, high: float | None, pairs: int) -> bool | None:
    """`is_real` for a saved gain (its range of NEW / BASE over `pairs` pairs): None for fewer than 2 pairs."""
    if low is None or high is None or pairs < 2:
        return None
    return is_real(Interval(low - 1.0, high - 1.0, low - 1.0, high - 1.0))


def abba_order(pairs: int) -> list[tuple[int, str]]:
    """(pair, side) in the order run: BASE NEW, NEW BASE, BASE NEW, ... (side "base" or "new")."""
    runs = []
    for pair in range(pairs):
        runs += [(pair, "base"), (pair, "new")] if pair % 2 == 0 else [(pair, "new"), (pair, "base")]
    return runs
