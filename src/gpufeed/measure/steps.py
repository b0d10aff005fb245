"""Per-step records of a watched training loop: where each step's wall time went."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoaderSplit:
    """A DataLoader's time for `batches` batches by part, seconds summed over them (gpufeed.doctor.observe.loader_split
    defines each part and says where it is timed); None: that part was not measured for them, or does not apply
    (no hand-over without worker processes, no pinning without pin_memory)."""

    batches: int
    getitem_s: float | None  # the Dataset's __getitem__ for every sample of a batch
    collate_s: float | None  # the collate function
    handover_s: float | None  # the loop's wait for a finished batch to arrive from its worker, pinning apart
    pin_s: float | None  # pin_memory

    def __add__(self, other: LoaderSplit) -> LoaderSplit:
        """Both together; a part measured for only one of them is None."""
        def both(mine: float | None, theirs: float | None) -> float | None:
            return None if mine is None or theirs is None else mine + theirs
        return LoaderSplit(self.batches + other.batches, both(self.getitem_s, other.getitem_s),
                           both(self.collate_s, other.collate_s), both(self.handover_s, other.handover_s),
                           both(self.pin_s, other.pin_s))

    def per_batch_ms(self) -> dict[str, float | None]:
        """{"getitem_ms", "collate_ms", "handover_ms", "pin_ms"}: each part's mean per batch, milliseconds."""
        parts = {"getitem": self.getitem_s, "collate": self.collate_s, "handover": self.handover_s,
                 "pin": self.pin_s}
        return {f"{name}_ms": None if seconds is None else 1000.0 * seconds / self.batches
                for name, seconds in parts.items()}


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
    loader_split: LoaderSplit | None = None  # the step's training batches' loader time by part (the doctor's
    # DataLoader instrumentation, gpufeed.doctor.observe.loader_split); None: none of its batches was timed inside
    # The step's compute split on the host clock (the doctor's gpufeed.doctor.observe.parts; on CUDA kernels run
    # asynchronously, so these are the host's time in each part, not the device's):
    forward_s: float | None = None  # inside the forward of the step's model (its first outermost module called
    # with grad enabled), summed over the step's calls of it; forwards under torch.no_grad (validation) left out
    optimizer_s: float | None = None  # inside the optimizer.step() calls that began in the step, all optimizers
    backward_s: float | None = None  # the rest of the step's compute: wall_s - data_wait_s - copy_s - sync_s -
    # forward_s - optimizer_s - loop_input_s, at least 0: the loss, the backward pass, zero_grad and the loop's own
    # Python (a validation forward too); None when forward_s or optimizer_s is
    # Token batches (the doctor's gpufeed.doctor.observe.tokens; None: the step's batches carried no token ids):
    tokens: int | None = None  # positions the model computed on, padding included (the ids' B x T, summed)
    real_tokens: int | None = None  # of which real tokens, not padding (None: no mask and no pad id to tell)
    # A loop that builds its own batches (no training DataLoader: a slice of a token array, torch.stack, .to(device)):
    loop_input_s: float | None = None  # host time from the step's start to the start of the first forward of the
    # step's model with grad enabled, less the copies and host waits in it and the step's model's forwards under
    # torch.no_grad there (gpufeed.doctor.observe.parts): the loop reading its next batch; None when not timed (a
    # DataLoader feeds the steps, the step clock is not the optimizer's or a manual one, the model not yet known)

    run_delay_s: float | None = None  # of wall_s, the training thread ready to run while the scheduler ran another
    # thread on its core (Linux's schedstat: gpufeed.doctor.observe.scheduler); None where it cannot be read

    @property
    def input_s(self) -> float:
        """The step's time getting its input: the wait for a DataLoader's batch, or the loop building its own."""
        return self.data_wait_s + (self.loop_input_s or 0.0)


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


def backward_seconds(wall_s: float, data_wait_s: float, copy_s: float, sync_s: float, forward_s: float | None,
                     optimizer_s: float | None, loop_input_s: float | None = None) -> float | None:
    """A StepRecord's `backward_s`: the step's wall time less its data wait, copies, host waits, model forward,
    optimizer steps and the loop's own input work (None: not timed, nothing taken), at least 0; None when the
    forward or the optimizer steps were not timed."""
    if forward_s is None or optimizer_s is None:
        return None
    return max(0.0, wall_s - data_wait_s - copy_s - sync_s - forward_s - optimizer_s - (loop_input_s or 0.0))
