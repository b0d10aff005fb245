"""What the doctor saw of a training loop, typed and frozen: the one thing its findings read. It sits below both
stages: observe/ fills it, findings/ reads it.

`Watcher.observe()` (observe/watch.py) builds it, the only place one is made from a run: the watched steps and the
host samples, the device, the host's cores and torch's threads, the training loader's settings, device memory, the
profiled window, what a step held, the dtypes seen, the ranks, the notes so far, the script's error, the step's
arithmetic (FLOPs counted in a warm-up step, observe/flops.py), and the framework with the training loader's site
and settings (`setup`, frameworks/setup.py). Every field is filled there; None inside a part means that reading
could not be taken (its reason is a note). The parts the observe stage hands over are typed here too: the
profiled steps (`ProfiledStep`, `ProfileSummary`, from observe/profile.py) and the step's FLOPs
(`OperatorFlops`, `StepArithmetic`, `TransformerSize`, from observe/flops.py).

Derived here, for every finding alike: `totals` (sums over the watched steps), `on_gpu`, the batch size, the
device's busy fraction (`device_busy`, `busy`), the batch the model sees (`model_batch`) and GPM's activity means.
"""

from __future__ import annotations

import functools
import operator
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.measure.transformer_flops import training_flops_per_token

if TYPE_CHECKING:
    from gpufeed.doctor.notes import Note
    from gpufeed.measure.steps import HostSample, LoaderSplit, StepRecord


# gpufeed's choice: below 32 samples a batch rarely fills a GPU, and per-step fixed costs weigh on a CPU step; the
# batch below which the doctor probes (observe/probe.py) and small_batch judges (findings/kinds/small_batch.py).
SMALL_BATCH = 32


# gpufeed's choice: a probe run "waited" when its threads spent more than 1 ms, and more than 5% of the run, waiting
# for a core; a CFS slice another process takes is about 3 ms, and a quiet run's waits (a thread woken) are tens of
# microseconds. In CI (two test workers and a spinning process on 2 cores) a packed GPT-2 at batch 16 x 128 probed
# at 1x 101 ms, 2x 175, 4x 323 (its steps 17 ms quiet): a third of the step called fixed cost, small_batch the verdict.
WAIT_ALLOWED_S, WAIT_ALLOWED_SHARE = 0.001, 0.05


def waited_too_long(seconds: float, waited: float) -> bool:
    """A timed run whose threads waited for a core more than WAIT_ALLOWED_S and WAIT_ALLOWED_SHARE of it."""
    return waited > max(WAIT_ALLOWED_S, WAIT_ALLOWED_SHARE * seconds)


@dataclass(frozen=True)
class BatchProbe:
    """What observe/probe.py measured after the watch: seconds per forward+backward of the user's model at the
    batch repeated by each factor (the fastest of `repeats` runs)."""

    batch: int
    seconds: tuple[tuple[int, float], ...]  # (factor, seconds), factors ascending: 1, 2, 4
    repeats: int
    # seconds each factor's fastest run spent with a thread of the process waiting for a core (probe.py: every
    # thread's scheduler wait summed); () where not read
    waited: tuple[float, ...] = ()

    def waited_runs(self) -> list[tuple[int, float, float]]:
        """(factor, seconds, waited) of each factor whose fastest run waited for a core too long."""
        return [(factor, seconds, waited) for (factor, seconds), waited in zip(self.seconds, self.waited, strict=False)
                if waited_too_long(seconds, waited)]

    @property
    def slope_resolved(self) -> bool:
        """The time grew from the smallest factor to the largest: the slope between them is a measurement."""
        return self.seconds[-1][1] > self.seconds[0][1]

    @property
    def per_sample_s(self) -> float:
        """The cost of one more sample: the slope between the smallest and largest factor; when the time did not
        grow (below the runs' noise), at most the largest factor's time over its samples."""
        (low, low_s), (high, high_s) = self.seconds[0], self.seconds[-1]
        if self.slope_resolved:
            return (high_s - low_s) / ((high - low) * self.batch)
        return high_s / (high * self.batch)


@dataclass(frozen=True)
class PaddingTrial:
    """What observe/padding.py timed after the watch: a forward and backward of the step's model on one watched
    batch of token ids as it came (`rows` x `width` positions) and on the same rows with the columns that are
    padding in every row cut off (`kept` positions left; for an encoder-decoder, the decoder's labels cut by their
    own padding too: `decoder_width` to `decoder_kept`), the fastest of `rounds` interleaved runs each."""

    rows: int
    width: int
    kept: int
    seconds: float  # as it came
    trimmed_seconds: float  # cut to its longest row
    rounds: int
    decoder_width: int | None = None
    decoder_kept: int | None = None
    # None: on the script's own intra-op threads, wall time; 1: on one thread, each run's time that thread's CPU
    # time (observe/padding.py, when the script's threads' fastest runs waited for cores)
    threads: int | None = None


@dataclass(frozen=True)
class PaddingReading:
    """The padding in the training batches of token ids (observe/padding.py), counted on the host as they arrived,
    where it comes from, and the trial that measured what it costs."""

    batches: int  # training batches of token ids whose padding could be told (a mask or the model's pad id)
    positions: int  # their ids' elements: rows x width, summed
    kept_positions: int  # rows x the span from the first to the last column holding a real token, summed
    real_positions: int  # real tokens (not padding), summed
    widths: tuple[int, ...]  # the distinct widths the batches came in, ascending
    shortest: int  # real tokens in the shortest row seen
    median_length: float
    longest: int
    source: str  # where the padding is made, in words ("the tokenizer's padding=\"max_length\"", ...)
    site: str | None  # the user's line that makes it ("train.py:42"), when known
    trial: PaddingTrial | None  # None: not measured (a note says why)

    @property
    def padding_share(self) -> float:
        """Positions that are padding, of every position the model computes on."""
        return 1.0 - self.real_positions / self.positions if self.positions else 0.0

    @property
    def trimmable_share(self) -> float:
        """Positions in columns that are padding in every row of their batch: what cutting each batch to its
        longest row removes."""
        return 1.0 - self.kept_positions / self.positions if self.positions else 0.0


@dataclass(frozen=True)
class DatasetAttribute:
    """An attribute of the training Dataset that holds many Python objects (observe/worker_memory.py)."""

    name: str  # "items", or "dataset.items" for the Dataset a Subset wraps
    type: str  # "list", "dict", ...
    length: int
    bytes: int  # its items and what they hold one level down, estimated from a sample


@dataclass(frozen=True)
class WorkerMemoryReading:
    """The training DataLoader's workers' private memory through the watch (observe/worker_memory.py)."""

    samples: tuple[tuple[float, int, int | None, tuple[int, ...]], ...]  # (seconds, training batches so far,
    # the main process's private bytes, each worker's), in time order
    workers: int
    dataset_length: int | None
    epoch_batches: int | None  # batches in an epoch of the loader (len(iterator)); None: not known
    batch_size: int | None  # the loader's batch_size (None: a batch sampler without one)
    attributes: tuple[DatasetAttribute, ...]
    available_bytes: int | None  # host RAM available at the end of the watch (psutil)
    ranks_on_node: int  # LOCAL_WORLD_SIZE, else 1
    prefetch_factor: int | None = None  # batches each worker is handed ahead of the loop; None: not known (none)


@dataclass(frozen=True)
class Host:
    cpu_count: int | None  # os.cpu_count(); None when it cannot tell
    threads: int  # torch's intra-op threads as the script left them


@dataclass(frozen=True)
class LoaderSettings:
    """The training DataLoader's settings (None: not read, the loader is not a torch DataLoader)."""

    workers: int | None
    pin_memory: bool | None
    restart_s: float  # of the watched steps' data wait, seconds in its __iter__ or final StopIteration
    parts: LoaderParts | None = None  # its collate function and untimed parts; None: its iterator not instrumented


@dataclass(frozen=True)
class LoaderParts:
    """What the doctor knows of a DataLoader iterator's parts besides their times (observe/loader_split.py): its collate
    function, and the parts it cannot time with why ("what: why" lines)."""

    collate_name: str | None  # "pad_batch", "default_collate"
    collate_site: str | None  # "train.py:18", from the function's code object; None: no Python code
    gaps: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryReading:
    """Device memory since the process began (None off CUDA or when unreadable)."""

    peak_bytes: int | None  # torch.cuda.max_memory_allocated
    capacity_bytes: int | None  # the device's total memory
    allocator_retries: int | None  # the caching allocator's num_alloc_retries


@dataclass(frozen=True)
class StepShape:
    """What a step held (observe/clock.py)."""

    batch_size: int | None  # samples of a step: the most common over the watched steps, else the model's rows
    batches_per_step: int | None  # training loader batches per step (None: no loader batch)
    loader_batch_size: int | None  # samples in one loader batch


@dataclass(frozen=True)
class RankSummary:
    """One rank's watched steps, as means per step in milliseconds (ranks/context.py gathers them; ranks/timing.py times
    the forward, the all-reduce and the optimizer step). compute_ms is the rest of the step: wall - data wait -
    exposed all-reduce; of it, forward_ms (DDP's forward), optimizer_ms (optimizer.step) and backward_ms, the
    rest (the loss, the backward pass, zero_grad)."""

    rank: int
    steps: int
    step_ms: float
    data_wait_ms: float
    compute_ms: float
    collective_ms: float  # an all-reduce in flight (overlapping backward or not)
    exposed_ms: float  # waited on the all-reduce after backward's last gradients: not hidden
    bytes_per_step: float  # all-reduced
    problem: str | None = None  # why this rank's watch is incomplete (it raised, stalled, ...)
    slowest_share: float | None = None  # of the steps all ranks watched, the share where its own work was the most
    forward_ms: float = 0.0
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0


@dataclass(frozen=True)
class Ranks:
    """The processes of a distributed run: world_size 1 and nothing per rank for one process. `per_rank` holds
    the ranks whose steps were gathered, by rank; `missing` says for each other rank why not."""

    world_size: int = 1
    per_rank: tuple[RankSummary, ...] = ()
    missing: tuple[str, ...] = ()  # "rank 1: the script raised ZeroDivisionError ..."
    # the all-reduce itself, without waiting for another rank: per step, the rank that waited least (it arrived
    # last), its wait after backward and its time in flight, averaged over the steps all ranks watched (ms); None
    # when not computed from the steps (then the least-waiting rank's means stand in)
    floor_exposed_ms: float | None = None
    floor_in_flight_ms: float | None = None


@dataclass(frozen=True)
class ProfiledStep:
    """One profiled step. Seconds of the profiled loop; CUDA fields None when kernels were not traced."""

    index: int  # 0 for the first recorded step
    wall_s: float  # between the step's marks
    operators: int  # top-level aten operators the host dispatched
    outside_operators_s: float  # host time outside operators and the loader: Python between ops
    loader_s: float  # inside DataLoader __next__
    kernels: int | None  # CUDA kernels launched
    short_kernels: int | None  # of which shorter than observe/profile.py's SHORT_KERNEL_US
    kernel_s: float | None  # their summed durations
    kernel_busy_s: float | None  # the union of their intervals on the device


@dataclass(frozen=True)
class ProfileSummary:
    """The profiled window: its steps, how many were asked for, and why fewer were recorded (None: all were)."""

    steps: tuple[ProfiledStep, ...]
    requested: int
    cuda: bool  # kernels were traced
    reason: str | None = None


@dataclass(frozen=True)
class OperatorFlops:
    """The FLOPs one operator did in the counted step, at one precision (and layout, for a convolution)."""

    operator: str  # torch's name: "aten.mm", "aten.convolution"
    precision: str  # "fp32", "tf32", "bf16", "fp16", "fp64", else the dtype's name
    channels_last: bool | None  # a convolution's input was channels_last; None: not a forward convolution, or
    # a layout that is both (one channel, or 1x1 images)
    flops: int


@dataclass(frozen=True)
class TransformerSize:
    """The step's model as the 6N + 12·L·h·s rule reads it (measure/transformer_flops.py), read at its first
    training forward (observe/flops.py `transformer_size`)."""

    multiplied_parameters: int  # N: all but an input embedding table that is not the output layer
    trained_parameters: int  # N_t: of them, those that take a gradient
    attention: tuple[int, int] | None  # (L, h) from its transformers config; None: no config that gives them


@dataclass(frozen=True)
class StepArithmetic:
    """The counted step's FLOPs and the device's peak for the precision that did most of them; the counted step's
    token positions and the step's model, for FLOPs per token counted and by the rule."""

    flops_per_step: int
    operators: tuple[OperatorFlops, ...]  # most FLOPs first
    precision: str | None  # of most FLOPs; None when no FLOP was counted
    peak_flops_per_s: float | None  # the device's dense peak in `precision`; None: unknown (see peak_derivation)
    peak_derivation: str  # how the peak was derived, or why it is unknown
    bf16_native: bool | None  # the device computes bf16 natively, not emulated (a GPU from Ampere on; a CPU
    # with AMX-BF16 or AVX512-BF16); None: not known
    tokens: int | None = None  # token positions of the counted step (padding included); None: no token ids
    sequence_length: int | None = None  # their sequences' length, the mean over the positions; None: no token ids
    model: TransformerSize | None = None  # the step's model; None: no training forward seen

    @property
    def flops_per_token(self) -> float | None:
        """The counted FLOPs over the counted step's token positions; None without token ids or FLOPs."""
        return self.flops_per_step / self.tokens if self.tokens and self.flops_per_step else None

    @property
    def rule_flops_per_token(self) -> tuple[int, str] | None:
        """(FLOPs per token by measure/transformer_flops.py's rule, its terms): "6N+12Lhs" at the counted
        step's sequence length when the model's config gives L and h, else "6N" alone (4N + 2N_t, the
        attention left out); None without token ids or a model."""
        if self.model is None or self.sequence_length is None:
            return None
        layers, width = self.model.attention or (0, 0)
        flops = training_flops_per_token(self.model.multiplied_parameters, layers, width, self.sequence_length,
                                         self.model.trained_parameters)
        return flops, "6N+12Lhs" if self.model.attention else "6N"

    def flops_in(self, *precisions: str) -> int:
        """FLOPs done in one of `precisions` (all of them matrix products, convolutions or attention: the
        operators of torch's flop_registry)."""
        return sum(o.flops for o in self.operators if o.precision in precisions)

    @property
    def nchw_convolution_flops(self) -> int:
        """FLOPs of forward convolutions whose input was not channels_last."""
        return sum(o.flops for o in self.operators if o.channels_last is False)

    @property
    def nchw_convolution_share(self) -> float:
        """The share of the step's FLOPs in convolutions on NCHW images, backward included: every convolution's
        FLOPs (forward and backward) times the NCHW fraction of the forward ones (the backward of a convolution
        takes its forward's layout)."""
        forward = sum(o.flops for o in self.operators if o.channels_last is not None)
        every = sum(o.flops for o in self.operators if "convolution" in o.operator)
        if not forward or not self.flops_per_step:
            return 0.0
        return every * (self.nchw_convolution_flops / forward) / self.flops_per_step


@dataclass(frozen=True)
class ProfileWindow:
    """The profiled steps after the watched ones (observe/profile.py): their means, and each step. Seconds and shares of
    the profiled loop; the kernel fields None when kernels were not traced."""

    steps: tuple[ProfiledStep, ...]
    requested: int
    step_ms: float
    operators_per_step: float
    outside_operators_share: float
    kernels_per_step: float | None
    short_kernel_fraction: float | None
    mean_kernel_us: float | None
    kernel_busy_share: float | None

    @classmethod
    def of(cls, summary: ProfileSummary | None) -> ProfileWindow | None:
        """The means of `summary`'s recorded steps; None without any."""
        if summary is None or not summary.steps:
            return None
        steps = summary.steps
        wall_s = sum(s.wall_s for s in steps)
        kernels = sum(s.kernels or 0 for s in steps)
        cuda = summary.cuda
        return cls(steps, summary.requested, 1000.0 * wall_s / len(steps),
                   statistics.fmean(s.operators for s in steps), sum(s.outside_operators_s for s in steps) / wall_s,
                   kernels / len(steps) if cuda else None,
                   sum(s.short_kernels or 0 for s in steps) / kernels if cuda and kernels else None,
                   1e6 * sum(s.kernel_s or 0.0 for s in steps) / kernels if cuda and kernels else None,
                   sum(s.kernel_busy_s or 0.0 for s in steps) / wall_s if cuda else None)


@dataclass(frozen=True)
class Totals:
    """Sums over the watched steps; compute over the steps that measured it."""

    steps: int
    wall_s: float
    data_wait_s: float
    copy_s: float
    copy_bytes: int
    copy_pageable_bytes: int
    sync_s: float
    sync_count: int
    compute_s: float | None
    compute_wall_s: float
    samples: int | None
    loader_split: LoaderSplit | None = None  # the steps' loader time by part, over the batches timed inside
    loop_input_s: float = 0.0  # the loop building its own batches (StepRecord.loop_input_s), over the steps timed

    @classmethod
    def of(cls, records: tuple[StepRecord, ...], batch_size: int | None) -> Totals:
        timed = [r for r in records if r.compute_s is not None]
        sizes = [r.batch_size for r in records]
        if all(size is not None for size in sizes):
            samples = sum(sizes)
        else:
            samples = batch_size * len(records) if batch_size is not None else None
        splits = [r.loader_split for r in records if r.loader_split is not None]
        return cls(len(records), sum(r.wall_s for r in records), sum(r.data_wait_s for r in records),
                   sum(r.copy_s for r in records), sum(r.copy_bytes for r in records),
                   sum(r.copy_pageable_bytes for r in records), sum(r.sync_s for r in records),
                   sum(r.sync_count for r in records), sum(r.compute_s for r in timed) if timed else None,
                   sum(r.wall_s for r in timed), samples, functools.reduce(operator.add, splits) if splits else None,
                   sum(r.loop_input_s or 0.0 for r in records))

    @property
    def input_s(self) -> float:
        """The steps' time getting their input: the wait for a DataLoader's batches, or the loop building its own
        (a step has one or the other: StepRecord.input_s)."""
        return self.data_wait_s + self.loop_input_s

    @property
    def loop_built(self) -> bool:
        """The loop builds its own batches (no DataLoader) and that took time in the watched steps."""
        return self.loop_input_s > 0

    def share(self, seconds: float) -> float:
        """seconds / sum(wall_s), rounded to 12 places so that 0.02 / 0.1 compares as 0.2 with a threshold."""
        return round(seconds / self.wall_s, 12)

    @property
    def device_busy(self) -> float | None:
        """sum(compute_s) / sum(wall_s) over the steps with device timing; None off CUDA."""
        if self.compute_s is None or self.compute_wall_s <= 0:
            return None
        return self.compute_s / self.compute_wall_s


@dataclass(frozen=True)
class Observation:
    """One watched run, as the findings read it (see the module docstring); `Watcher.observe()` makes it."""

    steps: tuple[StepRecord, ...]  # the watched steps
    samples: tuple[HostSample, ...]  # the background readings taken while they ran
    device: str | None  # "cpu", "cuda:0 (NVIDIA H200)"; None: not known
    host: Host
    loader: LoaderSettings
    memory: MemoryReading
    profile: ProfileWindow | None  # None: nothing was profiled (the notes say why)
    shape: StepShape
    float64_seen: bool  # a float64 model input or parameter
    autocast_seen: bool | None  # an outermost forward ran under torch.autocast (None: no forward inspected)
    ranks: Ranks
    notes: tuple[Note, ...]  # the instrumentation's and the caller's, in order
    script_error: str | None  # the script's exception, one line
    arithmetic: StepArithmetic | None = None  # a warm-up step's FLOPs and the peak (observe/flops.py); None: none
    setup: Setup = PLAIN  # the training loop's framework and its loader's site and settings (frameworks/setup.py)
    probe: BatchProbe | None = None  # the small-batch probe after the watch (observe/probe.py); None: not run
    padding: PaddingReading | None = None  # padding in token batches and its trial (observe/padding.py); None: no
    # training batch of token ids whose padding could be told
    worker_memory: WorkerMemoryReading | None = None  # the loader's workers' memory (observe/worker_memory.py)

    @cached_property
    def batch_size(self) -> int | None:
        """Samples of a step: the observed shape's, else the most common batch size of the records."""
        if self.shape.batch_size is not None:
            return self.shape.batch_size
        sizes = Counter(r.batch_size for r in self.steps if r.batch_size is not None)
        return sizes.most_common(1)[0][0] if sizes else None

    @cached_property
    def totals(self) -> Totals:
        return Totals.of(self.steps, self.batch_size)

    @property
    def on_gpu(self) -> bool:
        """The device is a GPU; when not known, taken as one if the steps carry CUDA-event timing."""
        return self.device.startswith("cuda") if self.device else self.totals.compute_s is not None

    @property
    def device_type(self) -> str:
        """"cuda" or "cpu": the variant of the fix code that runs here."""
        return "cuda" if self.on_gpu else "cpu"

    def count(self, predicate: Callable[[StepRecord], bool]) -> int:
        """Watched steps for which `predicate` holds."""
        return sum(1 for record in self.steps if predicate(record))

    def device_busy(self) -> float | None:
        """The device's busy fraction of the watched steps: the profiled steps' kernel time (the union of their
        intervals) per step over the watched step time, when kernels were profiled (kernel durations carry none
        of the profiler's host overhead, and gaps between kernels do not count); else the CUDA-event span
        (`Totals.device_busy`, which counts those gaps as busy); None off CUDA."""
        profile = self.profile
        if self.on_gpu and profile is not None and profile.kernel_busy_share is not None:
            kernel_s = profile.kernel_busy_share * profile.step_ms / 1000.0  # per profiled step
            return min(1.0, kernel_s / (self.totals.wall_s / self.totals.steps))
        return self.totals.device_busy

    def busy(self) -> float | None:
        """Device busy fraction: `device_busy()`, else NVML utilization (percent / 100), else None."""
        measured = self.device_busy()
        if measured is not None:
            return measured
        readings = [s.gpu_utilization_percent for s in self.samples if s.gpu_utilization_percent is not None]
        return statistics.fmean(readings) / 100.0 if readings else None

    def own_collective_s(self) -> float:
        """The watched rank's (rank 0's) wait at the gradient all-reduce after backward over the watched steps,
        in seconds (its RankSummary's exposed_ms per step); 0 for one process."""
        mine = next((r for r in self.ranks.per_rank if r.rank == 0), None)
        return 0.0 if mine is None else min(self.totals.wall_s, mine.exposed_ms / 1000.0 * self.totals.steps)

    def model_batch(self) -> tuple[int | None, int]:
        """(the batch the model sees, batches per step): with gradient accumulation (several loader batches per
        step) one loader batch, else the step's batch."""
        batches = self.shape.batches_per_step or 1
        return (self.shape.loader_batch_size if batches > 1 else self.batch_size), batches

    def gpu_activity(self) -> dict:
        """Means over the host samples: NVML utilization.gpu and, where GPM reads them, SM and tensor activity."""
        def mean(name: str) -> float | None:
            values = [getattr(sample, name) for sample in self.samples]
            values = [value for value in values if value is not None]
            return statistics.fmean(values) if values else None
        return {"nvml_utilization_percent": mean("gpu_utilization_percent"),
                "sm_activity_percent": mean("sm_activity_percent"),
                "tensor_activity_percent": mean("tensor_activity_percent")}
