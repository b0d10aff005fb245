"""Slow steps and slow ranks: steps beyond the typical time (`slow_outliers`), the beat they fall on
(`stall_period`), and the two rules built on them, `periodic_stall` and `straggler`.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

from gpufeed.doctor import fixes
from gpufeed.doctor.evidence import Watch, confidence, finding, severity
from gpufeed.doctor.report import Finding

# SageMaker Debugger StepOutlier rule default: a step beyond mean + 3 standard deviations.
OUTLIER_SIGMAS = 3.0
# gpufeed's choice: an outlier must also be 10% above the typical step, so near-constant steps (sigma ~ 0) do not
# turn jitter into stalls; clipping repeats so that frequent stalls do not hide each other in the sigma.
STALL_MIN_EXCESS = 0.10
STALL_CLIP_ROUNDS = 10
# gpufeed's choice: logging, evaluation and checkpoints come every few steps at least; slow neighbours (gap 1) are
# a slow phase, and every other step slow (gap 2) is the workload's rhythm (two batch shapes), not a stall.
MIN_STALL_PERIOD = 3
# gpufeed's choice: a rank 10% slower than the median holds every other rank at each all-reduce.
STRAGGLER_EXCESS = 0.10
# gpufeed's choice: one periodic cause (logging, a checkpoint) stalls by about the same time on each beat; slow steps
# under a tenth of the largest excess are jitter (a cold cache after a stall, on sub-millisecond steps), not stalls.
STALL_SIZE_RATIO = 0.10
# gpufeed's choice: confidence from the number of stalls on the beat.
CONFIDENT_STALLS, SOME_STALLS = 5, 3


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


def stall_period(stalls: list[int], indices: list[int]) -> tuple[int, list[int]] | None:
    """The most common gap between slow step indices, and the stalls on that beat; None unless at least two stalls
    fall on it and they fill at least half of the beat's positions in the window."""
    if len(stalls) < 2:
        return None
    gaps = Counter(later - earlier for earlier, later in itertools.pairwise(stalls))
    period = min(gaps, key=lambda gap: (-gaps[gap], gap))
    if period < MIN_STALL_PERIOD:
        return None
    phase = Counter(index % period for index in stalls).most_common(1)[0][0]
    beats = [index for index in indices if index % period == phase]
    hits = [index for index in stalls if index % period == phase]
    if len(hits) < 2 or 2 * len(hits) < len(beats):
        return None
    return period, hits


def periodic_stall(watch: Watch) -> Finding | None:
    walls = [r.wall_s for r in watch.records]
    flagged, typical = slow_outliers(walls)
    largest = max((walls[position] - typical for position in flagged), default=0.0)
    flagged = {position for position in flagged if walls[position] - typical >= STALL_SIZE_RATIO * largest}
    indices = [r.index for r in watch.records]
    found = stall_period(sorted(indices[position] for position in flagged), indices)
    if found is None:
        return None
    period, hits = found
    wall_of = {r.index: r.wall_s for r in watch.records}
    extra_s = [wall_of[index] - typical for index in hits]
    share = watch.totals.share(sum(extra_s))
    evidence = {"period_steps": period, "stalls": len(hits), "extra_ms_per_stall": 1000.0 * statistics.fmean(extra_s),
                "typical_step_ms": 1000.0 * typical, "stall_share": share}
    return finding("periodic_stall", severity(share), share, evidence, fixes.periodic_stall(period),
                   confidence(len(hits), CONFIDENT_STALLS, SOME_STALLS))


def straggler(watch: Watch) -> Finding | None:
    times = watch.get("rank_step_times")
    world = watch.get("world_size")
    if not times or len(times) < 2:
        if world and world > 1:
            watch.note("per-rank step times: not gathered, so stragglers are unchecked")
        return None
    median = statistics.median(times)
    slowest = max(times)
    if slowest < median * (1.0 + STRAGGLER_EXCESS):
        return None
    rank = times.index(slowest)
    share = (slowest - median) / slowest  # the median rank waits this share of each synchronized step
    evidence = {"slowest_rank": rank, "slowest_step_ms": 1000.0 * slowest, "median_step_ms": 1000.0 * median,
                "slowdown": slowest / median}
    return finding("straggler", severity(share), share, evidence, fixes.straggler(rank),
                   confidence(watch.totals.steps))

