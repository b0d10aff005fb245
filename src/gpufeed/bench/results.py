"""What `gpufeed bench` measures, as frozen dataclasses. Units are in the names; every figure carries its runs
and spread; a figure that could not be measured is absent from its list and named in `unmeasured`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufeed.hardware.peak import Peak

if TYPE_CHECKING:
    from gpufeed.bench.busy import MachineBusy


@dataclass(frozen=True)
class KernelResult:
    op: str  # "matmul" or "conv2d"
    device: str  # "cpu", "cuda:0"
    precision: str  # one of hardware.precisions.PRECISIONS
    size: str  # "M x N x K" for matmul; "batch, in->out channels, HxW, kernel" for conv2d
    flops: int  # per call, multiply-add counted as 2 FLOPs (torch.utils.flop_counter)
    seconds_median: float
    seconds_min: float
    seconds_max: float
    runs: int
    tflops: float  # flops / seconds_median / 1e12
    fraction_of_peak: float | None  # None when the peak for this device and precision is unknown
    tf32_matmul: bool | None  # torch.backends.cuda.matmul.allow_tf32 during the run (None on the CPU)
    tf32_cudnn: bool | None  # torch.backends.cudnn.allow_tf32 during the run (None on the CPU)
    spread: float | None = None  # slowest / fastest repeat (measure.timing.spread), as every view prints it
    seconds: tuple[float, ...] = ()  # every timed repeat, in the order run: what the median, min and max are of


@dataclass(frozen=True)
class TrainStepResult:
    model: str  # "mlp" or "cnn"
    device: str
    precision: str
    batch_size: int
    samples_per_s: float
    seconds_median: float
    seconds_min: float
    seconds_max: float
    runs: int
    speedup_vs_cpu_fp32: float | None  # this figure / the CPU's fp32 figure for the same model and batch
    spread: float | None = None  # slowest / fastest repeat (measure.timing.spread)
    seconds: tuple[float, ...] = ()  # every timed step, in the order run: what the median, min and max are of


@dataclass(frozen=True)
class LinkResult:
    direction: str  # "host_to_device" or "device_to_host"
    pinned: bool
    bytes: int  # per copy
    gb_per_s: float  # 1e9 bytes per second, median
    runs: int
    theoretical_gb_per_s: float | None  # from the PCIe generation and width NVML reports
    seconds: tuple[float, ...] = ()  # every timed copy, in the order run (gb_per_s = bytes / their median / 1e9)


@dataclass(frozen=True)
class PrecisionRun:
    precision: str
    device: str
    validation_accuracy: float
    validation_loss: float
    seconds: float
    steps: int


@dataclass(frozen=True)
class GpuEstimate:
    gpu: str  # the catalog's name
    form_factor: str  # SXM, PCIe or consumer
    step_s: float  # the planner's step time, seconds
    step_s_low: float  # at the fast end of its efficiency band
    step_s_high: float  # at the slow end
    speedup: float  # the CPU's measured step / step_s
    speedup_low: float  # / step_s_high
    speedup_high: float  # / step_s_low


@dataclass(frozen=True)
class GpuAnswer:
    model: str
    batch_size: int
    cpu_precision: str  # of the fastest CPU step measured for this model and batch
    cpu_step_s: float  # its median
    gpu_precision: str
    flops_per_step: int
    bytes_per_step: int  # what the step reads and writes, as the planner traced it
    efficiency_source: str  # where the planner's efficiencies and their band come from
    estimates: list[GpuEstimate]
    gpu_present: bool  # the machine has a GPU that was not benchmarked


@dataclass(frozen=True)
class BenchResult:
    machine: object  # hardware.probe.MachineInfo
    settings: dict  # what was asked: devices, precisions, quick
    kernels: list[KernelResult] = field(default_factory=list)
    peaks: list[Peak] = field(default_factory=list)
    train_steps: list[TrainStepResult] = field(default_factory=list)
    link: list[LinkResult] = field(default_factory=list)
    precision_runs: list[PrecisionRun] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)  # sentences a person reads in ten seconds
    unmeasured: list[str] = field(default_factory=list)  # "what: why"
    machine_busy: MachineBusy | None = None  # other processes, steal and spread over the bench's window
    gpu_estimate: GpuAnswer | None = None  # with no GPU benchmarked: the planner's speed-up on catalog GPUs
