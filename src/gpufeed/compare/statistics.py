"""Whether a difference between two runs is real: a moving-block bootstrap over per-step records, and the
pairs' spread for runs made alternately (the A/B mode).

Steps are autocorrelated (a stall every 7 steps, a slow stretch while the page cache warms, a neighbour's job
for a minute), so resampling single steps would understate the noise. The moving-block bootstrap (Künsch 1989)
resamples runs of `block_steps(n)` consecutive steps with replacement, independently for each run, until each
resample is as long as its run; the statistic is recomputed on every resample, and the 95% interval of the
difference NEW - BASE is its 2.5th and 97.5th percentiles. A figure is a ratio of sums over steps (seconds of a
part over steps, samples over seconds, seconds over samples), or a median (bench's repeats, which are
independent: blocks of one).

The generator is seeded, so the same two documents always give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
