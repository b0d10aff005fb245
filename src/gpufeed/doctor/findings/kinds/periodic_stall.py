"""periodic_stall: every N steps one step is much slower (logging, evaluation, a checkpoint on the training
thread).

Each step's time is judged less its wait for a core (`StepRecord.run_delay_s`, Linux's schedstat: observe/
scheduler.py): on a busy host the scheduler's slices come at a beat of their own, which is not the script's. The
slow steps are those beyond the typical step (stalls.py: `slow_outliers`), less those under STALL_SIZE_RATIO of
the largest excess; the beat they fall on is `stall_period`'s. The share is the stalls' time beyond the typical
step. A window too short to hold a beat is a note about the run, and so is the wait left out, when it is over
NOTED_DELAY of the watched time. No --try experiment.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import OWN_LEVEL, OWN_LEVEL_SOURCE, confidence, new_finding, severity
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.findings.stalls import longest_beat, slow_outliers, stall_period
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# gpufeed's choice: one periodic cause (logging, a checkpoint) stalls by about the same time on each beat; slow steps
# under a quarter of the largest excess are jitter (a loaded host, a cold cache after a stall), not stalls. Set
# with stall_period's conditions on simulated windows (stalls.py).
STALL_SIZE_RATIO = 0.25
# gpufeed's choice: the wait for a core left out of the steps' times is said when it is over 1% of the watched time.
NOTED_DELAY = 0.01
# gpufeed's choice: confidence from the number of stalls on the beat.
CONFIDENT_STALLS, SOME_STALLS = 5, 3


class PeriodicStall(Kind):
    NAME = "periodic_stall"
    MEANING = "every N steps a step is much slower"
    PART = "step"  # shares.py: a stall can be anywhere in the step (logging, evaluation, a checkpoint)
    RECOMMEND_AT, RECOMMEND_SOURCE = OWN_LEVEL, OWN_LEVEL_SOURCE
    FIGURES = ("period_steps", "extra_ms_per_stall")  # not stall_share: before shares.py divides the step, it can
    # read above the share column beside it (a stall inside a step another finding claims)

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        walls = [r.wall_s - (r.run_delay_s or 0.0) for r in seen.steps]
        delay = sum(r.run_delay_s or 0.0 for r in seen.steps)
        if delay > NOTED_DELAY * sum(r.wall_s for r in seen.steps):
            notes.run(f"periodic stalls: judged on each step's time less its wait for a core, "
                      f"{seen.totals.share(delay):.0%} of the watched time (other threads or processes held the "
                      f"cores: the scheduler's slices are not the script's stalls)")
        flagged, typical = slow_outliers(walls)
        largest = max((walls[position] - typical for position in flagged), default=0.0)
        flagged = {position for position in flagged if walls[position] - typical >= STALL_SIZE_RATIO * largest}
        indices = [r.index for r in seen.steps]
        found = stall_period(sorted(indices[position] for position in flagged), indices)
        if found is None:
            longest = longest_beat(len(indices))
            notes.run(f"periodic stalls: a beat longer than {longest} steps (a checkpoint or evaluation every "
                      f"{longest + 1} or more) cannot show in {len(indices)} watched steps; watch more steps to see "
                      f"one")
            return None
        period, hits = found
        wall_of = {r.index: wall for r, wall in zip(seen.steps, walls, strict=True)}
        extra_s = [wall_of[index] - typical for index in hits]
        share = seen.totals.share(sum(extra_s))
        evidence = {"period_steps": period, "stalls": len(hits),
                    "extra_ms_per_stall": 1000.0 * statistics.fmean(extra_s), "typical_step_ms": 1000.0 * typical,
                    "stall_share": share}
        return new_finding(self.NAME, severity(share), share, evidence, fix(period),
                           confidence(len(hits), CONFIDENT_STALLS, SOME_STALLS))


def fix(period: int) -> tuple[str, str]:
    fix = (f"Every {period} steps one step is much slower: logging, evaluation or a checkpoint on the training "
           f"thread. Do it less often, or in the background (copy the state, write it on a thread).")
    snippet = (f"import threading\n"
               f"if (step + 1) % {period} == 0:\n"
               f"    state = {{name: value.detach().to(\"cpu\", copy=True) "
               f"for name, value in model.state_dict().items()}}\n"
               f"    threading.Thread(target=torch.save, args=(state, \"checkpoint.pt\")).start()")
    return fix, snippet

