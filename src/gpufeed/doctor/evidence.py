"""What the doctor's rules read, and how they weigh it: the watched steps summed (`Totals`), the `Watch` that holds
them with the host samples and the context, `open_watch` that checks the inputs and builds it, the grading of a
share into a severity and of a count of supporting steps into a confidence, and the report's throughputs.

Throughputs in the report (None when the batch size is unknown):
- model_samples_per_s = samples / (sum(wall_s) - sum(data_wait_s)): what the model consumes fed instantly.
- loader_samples_per_s = context["loader_samples_per_s"] when measured elsewhere; else, only when the steps wait
  for input (data-wait share >= INPUT_SHARE_MEDIUM), the loader paces training: with loader_workers == 0 the
  loader runs inside the wait, so samples / sum(data_wait_s); otherwise samples / sum(wall_s), the rate it
  delivered (exact for background workers, a lower bound when the worker count is unknown). Otherwise None:
  a loader that keeps up shows only that it is at least as fast as the model.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from gpufeed.doctor.report import Finding
from gpufeed.measure.steps import HostSample, StepRecord

# TensorFlow profiler, input-pipeline analysis (op_stats_to_input_pipeline_analysis.cc): input share >= 5% is
# "moderately", >= 20% "highly" input-bound. torch-tb-profiler (RunProfile.analyze) also warns above 5% DataLoader
# time. We grade every share that has no threshold of its own with these two.
INPUT_SHARE_MEDIUM = 0.05
INPUT_SHARE_HIGH = 0.20
# torch-tb-profiler (_analyze_gpu_metrics): "low utilization ... increase batch size" below 50% GPU utilization.
LOW_DEVICE_BUSY = 0.50
# gpufeed's choice: confidence from the number of steps (or samples) that show the symptom.
CONFIDENT_STEPS, SOME_STEPS = 20, 5

CONTEXT_KEYS = ("device", "unmeasured", "cpu_count", "threads", "loader_workers", "loader_pin_memory", "batch_size",
                "dtype_float64_seen", "autocast_seen", "script_error", "memory_peak_bytes", "memory_capacity_bytes",
                "allocator_retries", "world_size", "rank_step_times", "communication_wait_s",
                "loader_samples_per_s", "model_samples_per_s", "profile", "batches_per_step", "loader_batch_size",
                "loader_restart_s")


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

    @classmethod
    def of(cls, records: list[StepRecord], batch_size: int | None) -> Totals:
        timed = [r for r in records if r.compute_s is not None]
        sizes = [r.batch_size for r in records]
        if all(size is not None for size in sizes):
            samples = sum(sizes)
        else:
            samples = batch_size * len(records) if batch_size is not None else None
        return cls(len(records), sum(r.wall_s for r in records), sum(r.data_wait_s for r in records),
                   sum(r.copy_s for r in records), sum(r.copy_bytes for r in records),
                   sum(r.copy_pageable_bytes for r in records), sum(r.sync_s for r in records),
                   sum(r.sync_count for r in records), sum(r.compute_s for r in timed) if timed else None,
                   sum(r.wall_s for r in timed), samples)

    def share(self, seconds: float) -> float:
        """seconds / sum(wall_s), rounded to 12 places so that 0.02 / 0.1 compares as 0.2 with a threshold."""
        return round(seconds / self.wall_s, 12)

    @property
    def device_busy(self) -> float | None:
        """sum(compute_s) / sum(wall_s) over the steps with device timing; None off CUDA."""
        if self.compute_s is None or self.compute_wall_s <= 0:
            return None
        return self.compute_s / self.compute_wall_s


@dataclass
class Watch:
    """Everything a rule reads, and the list it adds `unmeasured` lines to."""

    records: list[StepRecord]
    samples: list[HostSample]
    context: dict
    totals: Totals
    device: str
    on_gpu: bool
    batch_size: int | None
    unmeasured: list[str] = field(default_factory=list)

    @property
    def device_type(self) -> str:
        """"cuda" or "cpu": the variant of the fix code that runs here."""
        return "cuda" if self.on_gpu else "cpu"

    def get(self, key: str):
        return self.context.get(key)

    def note(self, line: str) -> None:
        """Add "subject: why" unless a line on the same subject (the instrumentation's, say) is already there."""
        subject = line.split(":", 1)[0]
        if all(existing.split(":", 1)[0] != subject for existing in self.unmeasured):
            self.unmeasured.append(line)

    def device_busy(self) -> float | None:
        """The device's busy fraction of the watched steps: the profiled steps' kernel time (the union of their
        intervals) per step over the watched step time, when kernels were profiled (kernel durations carry none
        of the profiler's host overhead, and gaps between kernels do not count); else the CUDA-event span
        (`Totals.device_busy`, which counts those gaps as busy); None off CUDA."""
        profile = self.get("profile") or {}
        if self.on_gpu and profile.get("kernel_busy_share") is not None:
            kernel_s = profile["kernel_busy_share"] * profile["step_ms"] / 1000.0  # per profiled step
            return min(1.0, kernel_s / (self.totals.wall_s / self.totals.steps))
        return self.totals.device_busy

    def busy(self) -> float | None:
        """Device busy fraction: `device_busy()`, else NVML utilization (percent / 100), else None."""
        measured = self.device_busy()
        if measured is not None:
            return measured
        readings = [s.gpu_utilization_percent for s in self.samples if s.gpu_utilization_percent is not None]
        return statistics.fmean(readings) / 100.0 if readings else None

    def count(self, predicate) -> int:
        return sum(1 for record in self.records if predicate(record))


def unexplained_idle(watch: Watch, busy: float) -> float:
    """The device's idle share that input waits, copies and syncs do not account for."""
    totals = watch.totals
    return max(0.0, 1.0 - busy - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s))


def host_bound_gate(watch: Watch) -> float | None:
    """Device busy (`device_busy()`) when it is below LOW_DEVICE_BUSY and neither input waits nor syncs explain
    it; else None."""
    totals = watch.totals
    busy = watch.device_busy()
    if not watch.on_gpu or busy is None or busy >= LOW_DEVICE_BUSY:
        return None
    if totals.share(totals.data_wait_s) >= INPUT_SHARE_MEDIUM or totals.share(totals.sync_s) >= INPUT_SHARE_MEDIUM:
        return None
    return busy


def severity(share: float, medium_at: float = INPUT_SHARE_MEDIUM, high_at: float = INPUT_SHARE_HIGH) -> str:
    share = round(share, 12)  # 1.0 - 0.8 is 0.19999999999999996: compare the share a person would compute
    return "high" if share >= high_at else "medium" if share >= medium_at else "low"


def confidence(supporting: int, high_at: int = CONFIDENT_STEPS, medium_at: int = SOME_STEPS) -> str:
    return "high" if supporting >= high_at else "medium" if supporting >= medium_at else "low"


def finding(kind: str, grade: str, share: float, evidence: dict, remedy: tuple[str, str], trust: str) -> Finding:
    return Finding(kind, grade, share, evidence, remedy[0], remedy[1], None, trust)


def throughputs(watch: Watch) -> tuple[float | None, float | None]:
    """(loader_samples_per_s, model_samples_per_s), by the formulas in the module docstring."""
    totals = watch.totals
    model = watch.get("model_samples_per_s")
    feeding_s = totals.wall_s - totals.data_wait_s
    if model is None and totals.samples and feeding_s > 0:
        model = totals.samples / feeding_s
    loader = watch.get("loader_samples_per_s")
    if loader is None and totals.samples and totals.share(totals.data_wait_s) >= INPUT_SHARE_MEDIUM:
        loader = totals.samples / (totals.data_wait_s if watch.get("loader_workers") == 0 else totals.wall_s)
    return loader, model


def open_watch(records: list[StepRecord], samples: list[HostSample], context: dict) -> Watch:
    unknown = sorted(set(context) - set(CONTEXT_KEYS))
    if unknown:
        raise ValueError(f"unknown context keys {unknown}; the doctor reads {list(CONTEXT_KEYS)}")
    if not records:
        raise ValueError("no training step was recorded: the doctor needs at least one watched step")
    batch_size = context.get("batch_size")
    if batch_size is None:
        sizes = Counter(r.batch_size for r in records if r.batch_size is not None)
        batch_size = sizes.most_common(1)[0][0] if sizes else None
    totals = Totals.of(records, batch_size)
    if totals.wall_s <= 0:
        raise ValueError(f"the {len(records)} recorded steps have no wall time; shares cannot be computed")
    device = context.get("device")
    watch = Watch(records, samples, context, totals, device or "unknown",
                  device.startswith("cuda") if device else totals.compute_s is not None, batch_size,
                  list(context.get("unmeasured") or []))
    if device is None:
        watch.note("device: not given; taken as a GPU only if the steps carry CUDA-event timing")
    if watch.on_gpu and watch.busy() is None:
        watch.note("device busy: neither CUDA-event timing nor NVML utilization was read")
    if batch_size is None:
        watch.note("batch size: not read, so samples per second and small_batch are not computed")
    return watch


def model_batch(watch: Watch) -> tuple[int | None, int]:
    """(the batch the model sees, batches per step): with gradient accumulation (several loader batches per
    step) one loader batch, else the step's batch."""
    batches = watch.get("batches_per_step") or 1
    return (watch.get("loader_batch_size") if batches > 1 else watch.batch_size), batches
