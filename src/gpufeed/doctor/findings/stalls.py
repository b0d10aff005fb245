"""Slow steps: those beyond the typical time (`slow_outliers`), and the beat they fall on (`stall_period`). The
periodic_stall finding (findings/kinds/periodic_stall.py) is built on them.
"""

from __future__ import annotations

import statistics
from collections import Counter

# SageMaker Debugger StepOutlier rule default: a step beyond mean + 3 standard deviations.
OUTLIER_SIGMAS = 3.0
# gpufeed's choice: an outlier must also be 10% above the typical step, so near-constant steps (sigma ~ 0) do not
# turn jitter into stalls; clipping repeats so that frequent stalls do not hide each other in the sigma.
STALL_MIN_EXCESS = 0.10
STALL_CLIP_ROUNDS = 10
# gpufeed's choice: logging, evaluation and checkpoints come every few steps at least; slow neighbours (gap 1) are
# a slow phase, and every other step slow (gap 2) is the workload's rhythm (two batch shapes), not a stall. The
# other conditions of a beat (stall_period) and periodic_stall's STALL_SIZE_RATIO were set on simulated 10- to
# 50-step windows with random slow steps (5-15% of steps 1.2-3x slower: a loaded host). Against the former rules
# (the most common gap between stalls, a tenth of the largest excess) they find a beat of 6 or 7 steps under 15%
# noise in 89-93% of windows (against 17-21%), and in noise alone call a beat in 1-19% of windows (against 1-26%).
MIN_STALL_PERIOD = 3
# gpufeed's choice: a beat is three stalls on it at least. Two slow steps always have a period (their gap), and a
# loaded host makes two in a 20-step window often; on simulated windows of noise alone (5-15% of steps 1.2-3x slower,
# 3,000 windows each, seed 1) a beat was called in 7-19% of 20-step windows with two stalls allowed, and in 0.4-9%
# with three, which find a beat of 5-7 steps about as often (73-100%); in 50-step windows, 11% against 2-10%. Two
# stalls made a false periodic_stall the verdict over padding_waste in CI. A window shows a beat of at most
# `longest_beat` steps.
MIN_STALLS_ON_BEAT = 3


def slow_outliers(walls: list[float]) -> tuple[set[int], float]:
    """Positions of the steps beyond mean + OUTLIER_SIGMAS * stdev of the rest (the steps not flagged), and the
    mean of the rest. Clipping starts from the faster half, so that frequent stalls cannot hide in their own
    sigma, and repeats until the flagged set stops changing."""
    median = statistics.median(walls)
    flagged = {position for position, wall in enumerate(walls) if wall > median}
    for _ in range(STALL_CLIP_ROUNDS):
        rest = [wall for position, wall in enumerate(walls) if position not in flagged]
        typical = statistics.fmean(rest)
        spread = statistics.stdev(rest) if len(rest) >= 2 else 0.0
        limit = max(typical + OUTLIER_SIGMAS * spread, typical * (1.0 + STALL_MIN_EXCESS))
        found = {position for position, wall in enumerate(walls) if wall > limit}
        if found == flagged:
            break
        flagged = found
    return flagged, statistics.fmean(wall for position, wall in enumerate(walls) if position not in flagged)


def longest_beat(steps: int) -> int:
    """The longest period a window of `steps` steps can show MIN_STALLS_ON_BEAT beats of (from its first step)."""
    return (steps - 1) // (MIN_STALLS_ON_BEAT - 1)


def stall_period(stalls: list[int], indices: list[int]) -> tuple[int, list[int]] | None:
    """The beat (a period and a phase) that holds the most stalls, and the stalls on it. Every period up to
    `longest_beat` is tried, so that a stray slow step between two beats (noise on a loaded host) cannot hide the
    beat. A beat counts when at least MIN_STALLS_ON_BEAT stalls fall on it, they fill at least two thirds of its
    positions in the window and make at least half of all stalls. The best beat is the one
    they fill most fully (a stray slow step on a shorter beat does not make it better), then the one with more
    stalls, then the shorter period. None when no beat counts or the best one is shorter than MIN_STALL_PERIOD
    (every other step slow is a rhythm, not a stall, even where a longer period also fits)."""
    if len(stalls) < MIN_STALLS_ON_BEAT:
        return None
    best, best_key = None, None
    for period in range(1, longest_beat(len(indices)) + 1):
        beats = Counter(index % period for index in indices)
        on_phase = Counter(index % period for index in stalls)
        for phase, count in on_phase.items():
            if count < MIN_STALLS_ON_BEAT or 3 * count < 2 * beats[phase] or 2 * count < len(stalls):
                continue
            key = (count / beats[phase], count, -period)
            if best_key is None or key > best_key:
                best, best_key = (period, phase), key
    if best is None or best[0] < MIN_STALL_PERIOD:
        return None
    period, phase = best
    return period, [index for index in stalls if index % period == phase]
