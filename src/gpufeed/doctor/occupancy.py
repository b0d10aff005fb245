"""How full the device is while it runs kernels: NVML utilization against GPM SM and tensor activity.

utilization.gpu (NVML, nvidia-smi's GPU-Util) reads 100% whenever any kernel runs, however few of the SMs it
occupies; GPM's SM activity (Hopper and newer, hardware/gpm.py) reads the share of SMs that had work. A device
busy with kernels that leave most SMs idle is underfilled: the `small_batch` kind (raise the batch or fuse).
"""

from __future__ import annotations

import statistics

from gpufeed.doctor import fixes
from gpufeed.doctor.evidence import LOW_DEVICE_BUSY, Watch, confidence, finding, model_batch, severity
from gpufeed.doctor.report import Finding

# NVIDIA DCGM user guide, profiling metrics, SM Activity (DCGM_FI_PROF_SM_ACTIVE, what NVML's GPM SM_UTIL reads):
# "A value of 0.8 or greater is necessary, but not sufficient, for effective use of the GPU. A value less than
# 0.5 likely indicates ineffective GPU usage." utilization.gpu reads 100% whenever any kernel runs.
LOW_SM_ACTIVITY_PERCENT = 50.0


def gpu_activity(watch: Watch) -> dict:
    """Means over the host samples: NVML utilization.gpu and, where GPM reads them, SM and tensor activity."""
    def mean(name: str) -> float | None:
        values = [getattr(sample, name, None) for sample in watch.samples]
        values = [value for value in values if value is not None]
        return statistics.fmean(values) if values else None
    return {"nvml_utilization_percent": mean("gpu_utilization_percent"),
            "sm_activity_percent": mean("sm_activity_percent"),
            "tensor_activity_percent": mean("tensor_activity_percent")}


def underfilled(watch: Watch) -> Finding | None:
    """The device runs kernels most of the time, but they occupy few of its SMs (GPM SM activity below 50%)."""
    activity = gpu_activity(watch)
    sm = activity["sm_activity_percent"]
    busy = watch.busy()
    if sm is None or busy is None or busy < LOW_DEVICE_BUSY or sm >= LOW_SM_ACTIVITY_PERCENT:
        return None
    share = busy * (1.0 - sm / 100.0)  # step time in kernels that left the rest of the SMs idle: an upper bound
    batch, batches = model_batch(watch)
    evidence = {"device_busy": busy, **activity, "batch_size": batch, "sm_idle_share_of_busy": 1 - sm / 100}
    supporting = sum(1 for sample in watch.samples
                     if getattr(sample, "sm_activity_percent", None) is not None
                     and sample.sm_activity_percent < LOW_SM_ACTIVITY_PERCENT)
    return finding("small_batch", severity(share), share, evidence, fixes.small_batch(batch, sm, batches),
                   confidence(supporting))
