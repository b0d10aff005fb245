"""straggler: one rank is slower than the rest, and every rank waits for it at each all-reduce.

Found when the slowest rank's mean step (`Ranks.step_times_s`) is STRAGGLER_EXCESS or more above the median
rank's; the share is what the median rank waits of each synchronized step. Judged only with per-rank step times;
with ranks but none gathered it says so in a note. No --try experiment.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.grading import confidence, new_finding, no_experiment, severity
from gpufeed.doctor.report import Finding, Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

KIND = "straggler"
MEANING = "one rank is slower than the rest"
# gpufeed's choice: a rank 10% slower than the median holds every other rank at each all-reduce.
STRAGGLER_EXCESS = 0.10


def detect(seen: Observation, notes: Notes) -> Finding | None:
    times = seen.ranks.step_times_s
    if not times or len(times) < 2:
        if seen.ranks.world_size > 1:
            notes.unmeasured("per-rank step times: not gathered, so stragglers are unchecked")
        return None
    median = statistics.median(times)
    slowest = max(times)
    if slowest < median * (1.0 + STRAGGLER_EXCESS):
        return None
    rank = times.index(slowest)
    share = (slowest - median) / slowest  # the median rank waits this share of each synchronized step
    evidence = {"slowest_rank": rank, "slowest_step_ms": 1000.0 * slowest, "median_step_ms": 1000.0 * median,
                "slowdown": slowest / median}
    return new_finding(KIND, severity(share), share, evidence, fix(rank), confidence(seen.totals.steps))


def fix(rank: int) -> tuple[str, str]:
    fix = (f"Rank {rank} is slower than the others and every rank waits for it at each all-reduce. Check that "
           f"rank's GPU clocks and temperature (throttling), its share of the data, its NUMA placement and other "
           f"processes on its host.")
    snippet = (f"# on the host of rank {rank}:\n"
               f"nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE\n"
               f"nvidia-smi topo -m")
    return fix, snippet


experiments = no_experiment
