"""compute_bound: healthy, the device is busy; the next gain is in the model or the kernels.

Judged last, over the other findings (`detect`'s `others`): none may claim INPUT_SHARE_MEDIUM of the step. On a
GPU the device must be busy at least DEVICE_BUSY_ENOUGH (measure/thresholds.py, the figure train's verdict reads
too); on the CPU the data wait must be under INPUT_SHARE_MEDIUM. It is also the primary kind when no finding is
high or medium. No --try experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.grading import INPUT_SHARE_MEDIUM, confidence, new_finding, no_experiment
from gpufeed.doctor.report import Finding, Notes
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

KIND = "compute_bound"
MEANING = "healthy: the device is busy; the next gain is in the model or the kernels"


def detect(seen: Observation, notes: Notes, others: list[Finding]) -> Finding | None:
    if any(other.share >= INPUT_SHARE_MEDIUM for other in others):
        return None
    totals = seen.totals
    wait_share = totals.share(totals.data_wait_s)
    busy = seen.busy()
    if seen.on_gpu:
        if busy is None or busy < DEVICE_BUSY_ENOUGH:  # healthy: busy enough (measure/thresholds.py)
            return None
        share = busy
    else:
        if wait_share >= INPUT_SHARE_MEDIUM:
            return None
        share = 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"device_busy": busy, "data_wait_share": wait_share, "compute_share": share}
    if seen.on_gpu:
        evidence.update(seen.gpu_activity())
    supporting = seen.count(lambda r: r.data_wait_s < INPUT_SHARE_MEDIUM * r.wall_s)
    return new_finding(KIND, "info", share, evidence, fix(seen.device_type), confidence(supporting))


def fix(device_type: str) -> tuple[str, str]:
    fix = ("The device is busy: the next gain is in the model or the kernels: bf16 autocast, channels_last, "
           "torch.compile, a larger GPU.")
    snippet = (f"model = model.to(memory_format=torch.channels_last)\n"
               f"model = torch.compile(model)\n"
               f"with torch.autocast(\"{device_type}\", dtype=torch.bfloat16):\n"
               f"    loss = criterion(model(images.to(memory_format=torch.channels_last)), labels)")
    return fix, snippet


experiments = no_experiment
