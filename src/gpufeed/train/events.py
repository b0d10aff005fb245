"""What a training run reports: at the start, every log interval, and at the end. Plain frozen dataclasses."""

from __future__ import annotations

import dataclasses
import resource
import sys
from dataclasses import dataclass

import torch

from gpufeed.data.pack.cache import CachedPack
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH, MIN_STEPS_PER_EPOCH


@dataclass(frozen=True)
class FolderPacking:
    """A folder given as --data (`role` "data") or --val ("validation") being packed into the cache: `done` of
    `total` files."""

    role: str
    folder: str
    done: int
    total: int


@dataclass(frozen=True)
class FolderWaiting:
    """Another process holds the folder's lock (it is packing it): this one waits, then reads its pack."""

    role: str
    folder: str
    lock: str


@dataclass(frozen=True)
class FolderReady:
    """The folder's pack in the cache, packed now or reused, and what the cache's bound removed."""

    role: str
    folder: str
    cached: CachedPack


@dataclass(frozen=True)
class RunStarted:
    config: dict
    device: str
    precision: str
    precision_reason: str
    parameters: int
    data: str
    train_samples: int
    validation_samples: int
    world_size: int
    effective_batch_size: int
    total_steps: int
    resumed_from: str | None
    skipped_checkpoints: list
    nothing_to_resume: bool = False  # --resume found no run in --out, so this one started fresh
    notes: tuple[str, ...] = ()  # one-line remarks on the settings (e.g. crops upscaled past the packed size)


@dataclass(frozen=True)
class RunComplete:
    """--resume of a run that has already taken all its steps: nothing was trained, nothing was written."""

    out: str
    steps: int  # optimizer steps the run took
    total_steps: int  # what this configuration asks for (at most `steps`)
    checkpoint: str  # the newest checkpoint, holding the finished state
    complete: bool = True

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StepLog:
    """One log interval. Fractions are of the interval's wall time; samples are summed over ranks."""

    epoch: int
    step: int
    total_steps: int
    loss: float
    samples_per_s: float
    data_wait_fraction: float
    device_busy_fraction: float | None  # CUDA events; None off CUDA
    gpu_utilization_percent: float | None  # NVML, mean over the interval; None without NVML or a GPU
    cpu_percent: float | None  # all host cores, psutil, mean over the interval
    learning_rate: float
    seconds: float  # since the start of the loop
    sm_activity_percent: float | None = None  # NVML GPM share of SMs busy, mean over the interval; None without GPM


@dataclass(frozen=True)
class TrainResult:
    validation_accuracy: float  # on the held-out validation split
    validation_loss: float
    epochs: int
    steps: int
    steps_this_run: int
    samples_per_s: float
    data_wait_fraction: float
    device_busy_fraction: float | None
    gpu_utilization_percent: float | None
    peak_memory_bytes: int
    device: str
    precision: str
    world_size: int
    batch_size: int
    effective_batch_size: int
    learning_rate: float
    seconds: float
    model: str
    parameters: int
    resumed_from: str | None
    out: str | None
    config: dict
    verdict: str
    unmeasured: list
    timeline: list = dataclasses.field(default_factory=list)  # this run's StepLog records, one per log interval
    steps_per_epoch: int | None = None  # optimizer steps an epoch (per rank); None in documents before it
    notes: list = dataclasses.field(default_factory=list)  # one-line remarks on the settings (e.g. batch lowered)
    train_samples: int | None = None  # samples an epoch covers (all ranks); None in documents before it
    precision_reason: str = ""  # why: asked for, or auto's choice and its figures; "" in documents before it
    validation_samples: int | None = None
    data_description: str | None = None  # where both came from: "built-in: 50000 train, 10000 test images"
    # one entry per optimizer step of this run, as rank 0 measured it (three lists of equal length, steps_this_run):
    # "wall_s": seconds from the previous step's end (the loop's start, for the first) to this one's, on the host
    # clock (on CUDA no synchronisation is added: host time between step ends, the log intervals' syncs falling in
    # the step after them); "data_wait_s": seconds of it spent waiting for the batch; "samples": the step's samples
    # summed over ranks. Empty in documents before them.
    per_step: dict = dataclasses.field(default_factory=lambda: {"wall_s": [], "data_wait_s": [], "samples": []})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated device memory on CUDA; on the CPU the process's peak resident set (ru_maxrss)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def verdict(result: TrainResult) -> str:
    """One sentence a person understands, from the measured shares (and the steps a run had to learn in)."""
    wait = result.data_wait_fraction
    if result.steps_per_epoch is not None and result.steps_per_epoch < MIN_STEPS_PER_EPOCH:
        return (f"an epoch had only {result.steps_per_epoch} step{'s' if result.steps_per_epoch != 1 else ''}: too "
                f"few for the model to learn, whatever the hardware; lower --batch-size or add data")
    if result.device_busy_fraction is not None:
        busy = result.device_busy_fraction
        if busy >= DEVICE_BUSY_ENOUGH:
            return f"the GPU was busy {busy:.0%} of the time: the input pipeline keeps up"
        if wait >= 0.1:
            return (f"the GPU was busy only {busy:.0%} of the time and the loop waited for data {wait:.0%}: the input "
                    f"pipeline is the bottleneck; try more --workers or run gpufeed doctor")
        return (f"the GPU was busy only {busy:.0%} of the time, not for lack of data (waited {wait:.0%}): time goes "
                f"to Python, launches or synchronisation; run gpufeed doctor")
    if wait < 0.05:
        return (f"training waited for data {wait:.0%} of the time: the feed keeps up, and the CPU's arithmetic is "
                f"the limit; a GPU would be the next step")
    return (f"training waited for data {wait:.0%} of the time: on this CPU the feed competes with the model for "
            f"cores; try --workers 1, or run gpufeed doctor")
