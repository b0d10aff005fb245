"""straggler: one rank is slower than the rest, and every other rank waits for it at each all-reduce.

Judged from the gathered ranks (`Ranks.per_rank`, ranks/context.py). A rank's own work per step is its step time
less the all-reduce it waited for after backward (`exposed_ms`: on the ranks that wait for another, that wait is
there), that is its data wait plus its compute. The straggler is the rank with the most own work, found when that
is STRAGGLER_EXCESS or more above the median rank's, at least MIN_EXCESS_MS more, and it is the slowest in
STRAGGLER_CONSISTENCY of the steps all ranks watched (`slowest_share`; ranks sharing busy cores take turns). Its
cost to the others is the median of their exposed waits less its own, per step; the share is that cost over the
median rank's step. `evidence.cause` says where its extra time is: "input" when its data wait exceeds the others'
(median) by more than its compute does, else "compute" (a slower backward shows here too: the others wait for its
gradients), and then `compute_part` which of forward, backward (with the loss and zero_grad) and optimizer holds
most of it. A balanced run gets no finding and a note with the ranks' spread. No --try experiment.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import confidence, new_finding, severity
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation, RankSummary

# gpufeed's choice: a rank 10% slower than the median holds every other rank at each all-reduce.
STRAGGLER_EXCESS = 0.10
# gpufeed's choice: below a millisecond a step the difference is the timer's and the scheduler's, not a rank's.
MIN_EXCESS_MS = 1.0
# gpufeed's choice: a straggler is the slowest rank in at least 80% of the watched steps. Ranks that share busy
# cores take turns being slowest (in 2-rank gloo runs on 2 busy cores: 30-70% of the steps, with a mean excess up
# to 40%); a rank with slower data or compute is slowest in every step. 8 of 10 steps by chance: p = 0.055.
STRAGGLER_CONSISTENCY = 0.80


def own_ms(summary: RankSummary) -> float:
    return summary.data_wait_ms + summary.compute_ms


class Straggler(Kind):
    NAME = "straggler"
    MEANING = "one rank is slower than the rest"
    PART = "collective"  # shares.py: the others' wait at the all-reduce
    RECOMMEND_AT = 0.10
    RECOMMEND_SOURCE = ("gpufeed's choice: communication's level (torch-tb-profiler, 10%), as the time is spent at "
                        "the same all-reduce")
    FIGURES = ("rank", "cause", "cost_to_others_ms")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        ranks = seen.ranks.per_rank
        if seen.ranks.world_size <= 1:
            return None
        if len(ranks) < 2:
            notes.unmeasured("per-rank steps: fewer than two ranks were gathered, so stragglers are unchecked")
            return None
        median = statistics.median(own_ms(r) for r in ranks)
        slowest = max(ranks, key=own_ms)
        others = [r for r in ranks if r.rank != slowest.rank]
        excess = own_ms(slowest) - median
        erratic = slowest.slowest_share is not None and slowest.slowest_share < STRAGGLER_CONSISTENCY
        if own_ms(slowest) < median * (1.0 + STRAGGLER_EXCESS) or excess < MIN_EXCESS_MS or erratic:
            steps = [r.step_ms for r in ranks]
            turns = (f"; the slowest rank changes from step to step (rank {slowest.rank} in "
                     f"{slowest.slowest_share:.0%} of them)" if erratic else "")
            notes.run(f"ranks: {len(ranks)} ranks balanced: steps {min(steps):.1f}-{max(steps):.1f} ms, own work "
                      f"(data wait + compute) {min(map(own_ms, ranks)):.1f}-{max(map(own_ms, ranks)):.1f} ms{turns}")
            return None
        data_excess = slowest.data_wait_ms - statistics.median(r.data_wait_ms for r in others)
        compute_excess = slowest.compute_ms - statistics.median(r.compute_ms for r in others)
        cause = "input" if data_excess > compute_excess else "compute"
        parts = {part: getattr(slowest, f"{part}_ms") - statistics.median(getattr(r, f"{part}_ms") for r in others)
                 for part in ("forward", "backward", "optimizer")}
        part = max(parts, key=parts.get) if cause == "compute" and any(parts.values()) else None
        cost = max(0.0, statistics.median(r.exposed_ms for r in others) - slowest.exposed_ms)
        share = min(1.0, cost / statistics.median(r.step_ms for r in ranks))
        evidence = {"rank": slowest.rank, "cause": cause, "own_step_ms": own_ms(slowest), "median_own_step_ms": median,
                    "slowest_in_share_of_steps": slowest.slowest_share,
                    "data_wait_excess_ms": data_excess, "compute_excess_ms": compute_excess,
                    "cost_to_others_ms": cost, "compute_part": part,
                    **{f"{name}_excess_ms": value for name, value in parts.items()},
                    "world_size": seen.ranks.world_size}
        return new_finding(self.NAME, severity(share), share, evidence,
                           fix(slowest.rank, cause, data_excess, compute_excess, part, parts.get(part or "", 0.0)),
                           confidence(min(r.steps for r in ranks)))


def fix(rank: int, cause: str, data_excess_ms: float, compute_excess_ms: float, part: str | None = None,
        part_excess_ms: float = 0.0) -> tuple[str, str]:
    if cause == "input":
        fix = (f"Rank {rank} waits {data_excess_ms:.1f} ms more per step for its data than the other ranks, and "
               f"they wait for it at each all-reduce. Give every rank the same amount and cost of data (a "
               f"DistributedSampler over one dataset, not per-rank file lists of different sizes), and check that "
               f"rank's node: a slower disk, fewer loader workers, or other processes on its cores.")
        snippet = ("sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True, drop_last=True)\n"
                   "loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler,\n"
                   "                                     num_workers=workers, persistent_workers=True)\n"
                   "for epoch in range(epochs):\n"
                   "    sampler.set_epoch(epoch)")
        return fix, snippet
    where = {"forward": "in its forward", "backward": "in its loss and backward pass",
             "optimizer": "in its optimizer step"}.get(part or "")
    most = f" ({part_excess_ms:.1f} ms of it {where})" if where else ""
    fix = (f"Rank {rank} computes {compute_excess_ms:.1f} ms more per step than the other ranks{most}, and they "
           f"wait for its gradients at each all-reduce. Look for unequal work per sample (variable-length inputs: "
           f"batch by length so every rank gets the same), extra work on that rank only (logging, evaluation or "
           f"hooks under `if rank == ...`), or a busy or throttled device on its host.")
    snippet = (f"# on the host of rank {rank}:\n"
               f"nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE   # throttling\n"
               f"top -H   # other processes on its cores")
    return fix, snippet

