"""communication: the gradient all-reduce is not hidden behind compute (distributed runs).

Found when the watched steps waited on collectives (`Ranks.communication_wait_s`) at least
COMMUNICATION_SHARE_MEDIUM of the step. Judged only with more than one rank; the doctor watches one process
today, so with ranks but no wait measured it says so in a note. No --try experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.grading import confidence, new_finding, no_experiment, severity
from gpufeed.doctor.report import Finding, Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

KIND = "communication"
MEANING = "gradient all-reduce is not hidden behind compute"
# TensorFlow profiler (the file cited for INPUT_SHARE_* in grading.py): device collectives share, moderate >= 3%,
# high >= 15% (the same grades as kernel launches: launch_overhead.py).
COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH = 0.03, 0.15


def detect(seen: Observation, notes: Notes) -> Finding | None:
    world = seen.ranks.world_size
    if world <= 1:
        return None
    waited = seen.ranks.communication_wait_s
    if waited is None:
        notes.unmeasured("communication: the time steps waited on gradient all-reduce was not measured")
        return None
    share = seen.totals.share(waited)
    if share < COMMUNICATION_SHARE_MEDIUM:
        return None
    evidence = {"world_size": world, "communication_share": share,
                "mean_communication_ms": 1000.0 * waited / seen.totals.steps}
    return new_finding(KIND, severity(share, COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH), share, evidence,
                       fix(), confidence(seen.totals.steps))


def fix() -> tuple[str, str]:
    fix = ("The gradient all-reduce is not hidden behind the backward pass. Let DDP overlap it (buckets, "
           "gradient_as_bucket_view=True), skip it on accumulation micro-batches with no_sync(), and communicate "
           "in bf16 if the link is slow.")
    snippet = ("model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank],\n"
               "                                                  gradient_as_bucket_view=True, bucket_cap_mb=25)\n"
               "with model.no_sync():  # all micro-batches but the last\n"
               "    loss.backward()")
    return fix, snippet


experiments = no_experiment
