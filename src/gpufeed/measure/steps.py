"""Per-step records of a watched training loop: where each step's wall time went."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepRecord:
    """One training step. Times are seconds of wall clock unless named otherwise; None = not measured."""

    index: int
    start_s: float  # since the watch began
    wall_s: float  # from the end of the previous step to the end of this one
    data_wait_s: float  # blocked waiting for the next batch (the loader's __next__)
    copy_s: float  # host time inside host-to-device copies (.to / .cuda / copy_)
    copy_bytes: int  # bytes copied host -> device in this step
    copy_pageable_bytes: int  # of which from pageable (not pinned) host memory
    compute_s: float | None  # device time of the step (CUDA events around it); None off CUDA
    sync_count: int  # host waits on the device inside the step (.item(), .cpu(), synchronize, ...)
    sync_s: float  # host time spent in those waits
    batch_size: int | None  # samples in the step's batch when it could be read
    float64_ops: int  # operations on float64 tensors seen in the step (0 when not traced)
    kernel_launches: int | None  # device kernels launched in the step, when counted (the doctor counts them in
    # a profiled window after the watched steps instead: gpufeed.doctor.profile)


@dataclass(frozen=True)
class HostSample:
    """A background reading (sampler.py), `time_s` since the watch began."""

    time_s: float
    cpu_percent: float | None  # all cores, psutil
    cpu_per_core_percent: tuple[float, ...]
    gpu_utilization_percent: float | None  # NVML utilization.gpu
    gpu_memory_used_bytes: int | None
    ram_used_bytes: int | None = None  # host RAM in use: total - available (psutil.virtual_memory)
    ram_total_bytes: int | None = None
    disk_read_bytes_per_s: float | None = None  # all disks, since the previous sample (psutil.disk_io_counters)
    power_w: float | None = None  # board power draw, NVML power.draw
    sm_clock_mhz: int | None = None  # NVML clocks.sm
    # NVML GPM (Hopper or newer), percent over the latest GPM window (>= 0.2 s) closed by this sample; None before
    # the first window closes, or without GPM (the reason is in the sampler's unmeasured list)
    sm_activity_percent: float | None = None  # SMs busy; a lone small kernel reads low, not 100%
    sm_occupancy_percent: float | None = None  # resident warps over the SMs' maximum
    tensor_activity_percent: float | None = None  # share of time the SMs ran any tensor-core instruction
