"""The doctor's rules: per-step records and host samples in, a `Report` out (DESIGN.md, "The doctor's vocabulary").

One function per kind returns a `Finding` or None. A share is a fraction of the total wall time of the watched
steps. Evidence holds only numbers computed from the inputs (None where an input was not given). Thresholds are
named constants with their source; "gpufeed's choice" marks those no published tool fixes, with the reason.

Throughputs in the report (None when the batch size is unknown):
- model_samples_per_s = samples / (sum(wall_s) - sum(data_wait_s)): what the model consumes fed instantly.
- loader_samples_per_s = context["loader_samples_per_s"] when measured elsewhere; else, only when the steps wait
  for input (data-wait share >= INPUT_SHARE_MEDIUM), the loader paces training: with loader_workers == 0 the
  loader runs inside the wait, so samples / sum(data_wait_s); otherwise samples / sum(wall_s), the rate it
  delivered (exact for background workers, a lower bound when the worker count is unknown). Otherwise None:
  a loader that keeps up shows only that it is at least as fast as the model.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from dataclasses import dataclass, field

from gpufeed.doctor import fixes
from gpufeed.doctor.report import KINDS, Finding, Report, Verdict
from gpufeed.measure.steps import HostSample, StepRecord

# TensorFlow profiler, input-pipeline analysis (op_stats_to_input_pipeline_analysis.cc): input share >= 5% is
# "moderately", >= 20% "highly" input-bound. torch-tb-profiler (RunProfile.analyze) also warns above 5% DataLoader
# time. We grade every share that has no threshold of its own with these two.
INPUT_SHARE_MEDIUM = 0.05
INPUT_SHARE_HIGH = 0.20
# TensorFlow profiler, same file: kernel launch and device collectives shares, moderate >= 3%, high >= 15%.
LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH = 0.03, 0.15
COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH = 0.03, 0.15
# torch-tb-profiler (_analyze_gpu_metrics): "low utilization ... increase batch size" below 50% GPU utilization.
LOW_DEVICE_BUSY = 0.50
# SageMaker Debugger CPUBottleneck rule defaults: CPU above 90% while GPU utilization is below 10%.
CPU_BUSY_PERCENT = 90.0
CPU_BOTTLENECK_DEVICE_BUSY = 0.10
# SageMaker Debugger StepOutlier rule default: a step beyond mean + 3 standard deviations.
OUTLIER_SIGMAS = 3.0
# gpufeed's choice: some copy is unavoidable, so twice the 5% input threshold before copies alone are flagged.
COPY_SHARE = 0.10
# gpufeed's choice: when most copied bytes come from pageable memory, pinning is the first fix to try.
PAGEABLE_FRACTION = 0.50
# gpufeed's choice: healthy = the device busy at least 80% of the wall time (the rest: launches, optimizer).
COMPUTE_BOUND_BUSY = 0.80
# gpufeed's choice: below 32 samples a batch rarely fills a GPU; on the CPU a step under 10 ms is short enough that
# fixed per-step costs (Python, per-operator dispatch of some microseconds) weigh on it.
SMALL_BATCH = 32
SHORT_CPU_STEP_S = 0.010
# gpufeed's choice: peak memory at 90% of capacity leaves no room to raise the batch.
MEMORY_PEAK_FRACTION = 0.90
# gpufeed's choice: an outlier must also be 10% above the typical step, so near-constant steps (sigma ~ 0) do not
# turn jitter into stalls; clipping repeats so that frequent stalls do not hide each other in the sigma.
STALL_MIN_EXCESS = 0.10
STALL_CLIP_ROUNDS = 10
# gpufeed's choice: logging, evaluation and checkpoints come every few steps at least; slow neighbours (gap 1) are
# a slow phase, and every other step slow (gap 2) is the workload's rhythm (two batch shapes), not a stall.
MIN_STALL_PERIOD = 3
# gpufeed's choice: a rank 10% slower than the median holds every other rank at each all-reduce.
STRAGGLER_EXCESS = 0.10
# gpufeed's choice: confidence from the number of steps (or samples) that show the symptom.
CONFIDENT_STEPS, SOME_STEPS = 20, 5
CONFIDENT_STALLS, SOME_STALLS = 5, 3
# gpufeed's choice: more loader processes than 8 seldom help one GPU and cost memory (one dataset copy each).
MAX_SUGGESTED_WORKERS = 8

CONTEXT_KEYS = ("device", "unmeasured", "cpu_count", "threads", "loader_workers", "loader_pin_memory", "batch_size",
                "dtype_float64_seen", "autocast_seen", "script_error", "memory_peak_bytes", "memory_capacity_bytes",
                "allocator_retries", "world_size", "rank_step_times", "communication_wait_s",
                "loader_samples_per_s", "model_samples_per_s")
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


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

    def busy(self) -> float | None:
        """Device busy fraction: CUDA-event compute time, else NVML utilization (percent / 100), else None."""
        if self.totals.device_busy is not None:
            return self.totals.device_busy
        readings = [s.gpu_utilization_percent for s in self.samples if s.gpu_utilization_percent is not None]
        return statistics.fmean(readings) / 100.0 if readings else None

    def count(self, predicate) -> int:
        return sum(1 for record in self.records if predicate(record))


def severity(share: float, medium_at: float = INPUT_SHARE_MEDIUM, high_at: float = INPUT_SHARE_HIGH) -> str:
    share = round(share, 12)  # 1.0 - 0.8 is 0.19999999999999996: compare the share a person would compute
    return "high" if share >= high_at else "medium" if share >= medium_at else "low"


def confidence(supporting: int, high_at: int = CONFIDENT_STEPS, medium_at: int = SOME_STEPS) -> str:
    return "high" if supporting >= high_at else "medium" if supporting >= medium_at else "low"


def finding(kind: str, grade: str, share: float, evidence: dict, remedy: tuple[str, str], trust: str) -> Finding:
    return Finding(kind, grade, share, evidence, remedy[0], remedy[1], None, trust)


def input_bound(watch: Watch) -> Finding | None:
    totals = watch.totals
    share = totals.share(totals.data_wait_s)
    if share < INPUT_SHARE_MEDIUM:
        return None
    workers, cores = watch.get("loader_workers"), watch.get("cpu_count")
    if workers is None:
        watch.note("DataLoader workers: not read (the loader is not a torch DataLoader, or it was not reachable)")
    suggested = min(cores, MAX_SUGGESTED_WORKERS) if cores else None
    evidence = {"data_wait_share": share, "mean_wait_ms": 1000.0 * totals.data_wait_s / totals.steps,
                "loader_workers": workers, "pin_memory": watch.get("loader_pin_memory"), "cpu_count": cores,
                "suggested_workers": suggested}
    supporting = watch.count(lambda r: r.data_wait_s >= INPUT_SHARE_MEDIUM * r.wall_s)
    return finding("input_bound", severity(share), share, evidence, fixes.input_bound(suggested, watch.on_gpu),
                   confidence(supporting))


def cpu_saturated(watch: Watch) -> Finding | None:
    readings = [s.cpu_percent for s in watch.samples if s.cpu_percent is not None]
    if not readings:
        watch.note("host CPU use: no background sample was taken")
        return None
    cpu_percent = statistics.fmean(readings)
    if cpu_percent <= CPU_BUSY_PERCENT:
        return None
    cores, threads, workers = watch.get("cpu_count"), watch.get("threads"), watch.get("loader_workers")
    busy = watch.busy()
    if watch.on_gpu:
        if busy is None or busy >= CPU_BOTTLENECK_DEVICE_BUSY:
            return None
        share = 1.0 - busy  # the device idles while the host is saturated
    else:
        if cores is None or threads is None:
            watch.note("cores or torch threads: not given, so CPU oversubscription is unchecked")
            return None
        runnable = threads + (workers or 0)
        if runnable <= cores:
            return None
        share = 1.0 - cores / runnable  # with R runnable threads on C cores each gets C/R of a core
    evidence = {"cpu_percent": cpu_percent, "threads": threads, "loader_workers": workers, "cpu_count": cores,
                "device_busy": busy}
    supporting = sum(1 for value in readings if value > CPU_BUSY_PERCENT)
    return finding("cpu_saturated", severity(share), share, evidence,
                   fixes.cpu_saturated(cores, workers, threads, watch.on_gpu), confidence(supporting))


def host_to_device(watch: Watch) -> Finding | None:
    totals = watch.totals
    if not watch.on_gpu or (totals.copy_bytes == 0 and totals.copy_s == 0):
        return None
    share = totals.share(totals.copy_s)
    pageable = totals.copy_pageable_bytes / totals.copy_bytes if totals.copy_bytes else 0.0
    if share < COPY_SHARE and pageable < PAGEABLE_FRACTION:
        return None
    evidence = {"copy_share": share, "mean_copy_ms": 1000.0 * totals.copy_s / totals.steps,
                "copy_mib_per_step": totals.copy_bytes / totals.steps / 2**20, "pageable_fraction": pageable,
                "copy_gb_per_s": totals.copy_bytes / totals.copy_s / 1e9 if totals.copy_s > 0 else None,
                "pin_memory": watch.get("loader_pin_memory")}
    supporting = watch.count(lambda r: r.copy_s >= COPY_SHARE * r.wall_s or r.copy_pageable_bytes > 0)
    return finding("host_to_device", severity(share), share, evidence, fixes.host_to_device(),
                   confidence(supporting))


def unexplained_idle(watch: Watch, busy: float) -> float:
    """The device's idle share that input waits, copies and syncs do not account for."""
    totals = watch.totals
    return max(0.0, 1.0 - busy - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s))


def host_bound_gate(watch: Watch) -> float | None:
    """Device busy when it is below LOW_DEVICE_BUSY and neither input waits nor syncs explain it; else None."""
    totals = watch.totals
    busy = totals.device_busy
    if not watch.on_gpu or busy is None or busy >= LOW_DEVICE_BUSY:
        return None
    if totals.share(totals.data_wait_s) >= INPUT_SHARE_MEDIUM or totals.share(totals.sync_s) >= INPUT_SHARE_MEDIUM:
        return None
    return busy


def launch_overhead(watch: Watch) -> Finding | None:
    busy = host_bound_gate(watch)
    if busy is None:
        return None
    share = unexplained_idle(watch, busy)
    launches = [r.kernel_launches for r in watch.records if r.kernel_launches is not None]
    if not launches:
        watch.note("kernel launches: not counted, so launch overhead rests on device idle time alone")
    per_step = statistics.fmean(launches) if launches else None
    idle_s = share * watch.totals.wall_s / watch.totals.steps
    evidence = {"device_busy": busy, "idle_share": share, "kernel_launches_per_step": per_step,
                "idle_us_per_launch": 1e6 * idle_s / per_step if per_step else None,
                "mean_step_ms": 1000.0 * watch.totals.wall_s / watch.totals.steps}
    supporting = watch.count(lambda r: r.compute_s is not None and r.compute_s < LOW_DEVICE_BUSY * r.wall_s)
    return finding("launch_overhead", severity(share, LAUNCH_SHARE_MEDIUM, LAUNCH_SHARE_HIGH), share, evidence,
                   fixes.launch_overhead(), confidence(supporting))


def sync_stall(watch: Watch) -> Finding | None:
    totals = watch.totals
    sync_share = totals.share(totals.sync_s)
    per_step = totals.sync_count / totals.steps
    if sync_share < INPUT_SHARE_MEDIUM and not (watch.on_gpu and per_step >= 1):
        return None
    busy = totals.device_busy
    # A wait on a busy device costs only the bubble it leaves: at most the device's idle share.
    share = min(sync_share, 1.0 - busy) if watch.on_gpu and busy is not None else sync_share
    evidence = {"sync_share": sync_share, "syncs_per_step": per_step,
                "mean_sync_ms": 1000.0 * totals.sync_s / totals.steps, "device_busy": busy}
    return finding("sync_stall", severity(share), share, evidence, fixes.sync_stall(watch.device_type),
                   confidence(watch.count(lambda r: r.sync_count > 0)))


def small_batch(watch: Watch) -> Finding | None:
    batch = watch.batch_size
    if batch is None or batch >= SMALL_BATCH:
        return None
    totals = watch.totals
    model_step_s = (totals.wall_s - totals.data_wait_s) / totals.steps
    evidence = {"batch_size": batch, "model_step_ms": 1000.0 * model_step_s, "device_busy": totals.device_busy}
    if watch.on_gpu:
        busy = watch.busy()
        if busy is None or busy >= LOW_DEVICE_BUSY:
            return None
        evidence["device_busy"] = busy
        share = unexplained_idle(watch, busy)
        strong = host_bound_gate(watch) is not None
        supporting = watch.count(lambda r: r.compute_s is not None and r.compute_s < LOW_DEVICE_BUSY * r.wall_s)
        return finding("small_batch", "medium" if strong else "low", share, evidence, fixes.small_batch(batch),
                       confidence(supporting) if strong else "low")
    if model_step_s >= SHORT_CPU_STEP_S:
        return None
    watch.note("throughput at other batch sizes: not measured, so small_batch on the CPU is a heuristic "
               "(batch and step time) and claims no share of the step")
    return finding("small_batch", "low", 0.0, evidence, fixes.small_batch(batch), "low")


def precision(watch: Watch) -> Finding | None:
    counted = [r for r in watch.records if r.float64_ops > 0]
    seen = watch.get("dtype_float64_seen")
    if seen is None and not counted:
        watch.note("float64 use: not traced")
    totals = watch.totals
    if counted or seen:
        governed = counted or watch.records  # the flag alone does not say which steps
        compute_s = sum(max(0.0, r.wall_s - r.data_wait_s - r.copy_s - r.sync_s) for r in governed)
        share = totals.share(compute_s)  # the step time the dtype governs: a bound on what float32 can save
        evidence = {"float64_ops_per_step": sum(r.float64_ops for r in watch.records) / totals.steps,
                    "steps_with_float64": len(counted), "governed_share": share}
        return finding("precision", "high", share, evidence, fixes.precision(True, watch.device_type),
                       confidence(len(counted)) if counted else "medium")
    if not watch.on_gpu:
        return None
    autocast = watch.get("autocast_seen")
    if autocast is None:
        watch.note("autocast: not known whether the step ran under torch.autocast")
        return None
    if autocast:
        return None
    busy = totals.device_busy
    share = busy if busy is not None else 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"autocast_seen": False, "device_busy": busy, "governed_share": share}
    return finding("precision", "medium", share, evidence, fixes.precision(False, "cuda"), confidence(totals.steps))


def memory_pressure(watch: Watch) -> Finding | None:
    peak, capacity = watch.get("memory_peak_bytes"), watch.get("memory_capacity_bytes")
    retries = watch.get("allocator_retries")
    fraction = peak / capacity if peak is not None and capacity else None
    if watch.on_gpu and (fraction is None or retries is None):
        watch.note("device memory: the peak, the capacity or the allocator's retries were not read")
    if (fraction is None or fraction < MEMORY_PEAK_FRACTION) and not retries:
        return None
    evidence = {"peak_gib": peak / 2**30 if peak is not None else None,
                "capacity_gib": capacity / 2**30 if capacity else None, "peak_fraction": fraction,
                "allocator_retries": retries}
    # Retries flush the allocator's cache and synchronize: a slowdown. A full memory alone only blocks a larger
    # batch. Neither's time is measured here, so the finding claims no share.
    return finding("memory_pressure", "medium" if retries else "low", 0.0, evidence, fixes.memory_pressure(),
                   "high")


def slow_outliers(walls: list[float]) -> tuple[set[int], float]:
    """Positions of the steps beyond mean + OUTLIER_SIGMAS * stdev of the rest (the steps not flagged), and the
    mean of the rest. Clipping starts from the faster half, so that frequent stalls cannot hide in their own
    sigma, and repeats until the flagged set stops changing."""
    median = statistics.median(walls)
    flagged = {position for position, wall in enumerate(walls) if wall > median}
    for _ in range(STALL_CLIP_ROUNDS):
        rest = [wall for position, wall in enumerate(walls) if position not in flagged]
        typical = statistics.fmean(rest)
        spread = statistics.stdev(rest) if len(rest) >= 2 else 0.0
        limit = max(typical + OUTLIER_SIGMAS * spread, typical * (1.0 + STALL_MIN_EXCESS))
        found = {position for position, wall in enumerate(walls) if wall > limit}
        if found == flagged:
            break
        flagged = found
    return flagged, statistics.fmean(wall for position, wall in enumerate(walls) if position not in flagged)


def stall_period(stalls: list[int], indices: list[int]) -> tuple[int, list[int]] | None:
    """The most common gap between slow step indices, and the stalls on that beat; None unless at least two stalls
    fall on it and they fill at least half of the beat's positions in the window."""
    if len(stalls) < 2:
        return None
    gaps = Counter(later - earlier for earlier, later in itertools.pairwise(stalls))
    period = min(gaps, key=lambda gap: (-gaps[gap], gap))
    if period < MIN_STALL_PERIOD:
        return None
    phase = Counter(index % period for index in stalls).most_common(1)[0][0]
    beats = [index for index in indices if index % period == phase]
    hits = [index for index in stalls if index % period == phase]
    if len(hits) < 2 or 2 * len(hits) < len(beats):
        return None
    return period, hits


def periodic_stall(watch: Watch) -> Finding | None:
    walls = [r.wall_s for r in watch.records]
    flagged, typical = slow_outliers(walls)
    indices = [r.index for r in watch.records]
    found = stall_period(sorted(indices[position] for position in flagged), indices)
    if found is None:
        return None
    period, hits = found
    wall_of = {r.index: r.wall_s for r in watch.records}
    extra_s = [wall_of[index] - typical for index in hits]
    share = watch.totals.share(sum(extra_s))
    evidence = {"period_steps": period, "stalls": len(hits), "extra_ms_per_stall": 1000.0 * statistics.fmean(extra_s),
                "typical_step_ms": 1000.0 * typical, "stall_share": share}
    return finding("periodic_stall", severity(share), share, evidence, fixes.periodic_stall(period),
                   confidence(len(hits), CONFIDENT_STALLS, SOME_STALLS))


def communication(watch: Watch) -> Finding | None:
    world = watch.get("world_size")
    if not world or world <= 1:
        return None
    waited = watch.get("communication_wait_s")
    if waited is None:
        watch.note("communication: the time steps waited on gradient all-reduce was not measured")
        return None
    share = watch.totals.share(waited)
    if share < COMMUNICATION_SHARE_MEDIUM:
        return None
    evidence = {"world_size": world, "communication_share": share,
                "mean_communication_ms": 1000.0 * waited / watch.totals.steps}
    return finding("communication", severity(share, COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH), share,
                   evidence, fixes.communication(), confidence(watch.totals.steps))


def straggler(watch: Watch) -> Finding | None:
    times = watch.get("rank_step_times")
    world = watch.get("world_size")
    if not times or len(times) < 2:
        if world and world > 1:
            watch.note("per-rank step times: not gathered, so stragglers are unchecked")
        return None
    median = statistics.median(times)
    slowest = max(times)
    if slowest < median * (1.0 + STRAGGLER_EXCESS):
        return None
    rank = times.index(slowest)
    share = (slowest - median) / slowest  # the median rank waits this share of each synchronized step
    evidence = {"slowest_rank": rank, "slowest_step_ms": 1000.0 * slowest, "median_step_ms": 1000.0 * median,
                "slowdown": slowest / median}
    return finding("straggler", severity(share), share, evidence, fixes.straggler(rank),
                   confidence(watch.totals.steps))


def compute_bound(watch: Watch, others: list[Finding]) -> Finding | None:
    if any(other.share >= INPUT_SHARE_MEDIUM for other in others):
        return None
    totals = watch.totals
    wait_share = totals.share(totals.data_wait_s)
    busy = watch.busy()
    if watch.on_gpu:
        if busy is None or busy < COMPUTE_BOUND_BUSY:
            return None
        share = busy
    else:
        if wait_share >= INPUT_SHARE_MEDIUM:
            return None
        share = 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"device_busy": busy, "data_wait_share": wait_share, "compute_share": share}
    supporting = watch.count(lambda r: r.data_wait_s < INPUT_SHARE_MEDIUM * r.wall_s)
    return finding("compute_bound", "info", share, evidence, fixes.compute_bound(watch.device_type),
                   confidence(supporting))


RULES = (input_bound, cpu_saturated, host_to_device, launch_overhead, sync_stall, small_batch, precision,
         memory_pressure, periodic_stall, communication, straggler)


def primary_kind(findings: list[Finding]) -> str:
    """The kind with the largest share among high and medium findings (ties: earlier in KINDS), else
    compute_bound."""
    serious = [f for f in findings if f.severity in ("high", "medium")]
    if not serious:
        return "compute_bound"
    return max(serious, key=lambda f: (f.share, -KINDS.index(f.kind))).kind


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


def diagnose(records: list[StepRecord], samples: list[HostSample], context: dict) -> Report:
    """Findings for the watched steps, the verdict, and what could not be measured.

    `context` keys (any may be missing; CONTEXT_KEYS lists them; others raise ValueError): device, unmeasured,
    cpu_count, threads, loader_workers, loader_pin_memory, batch_size, dtype_float64_seen, autocast_seen,
    script_error, memory_peak_bytes, memory_capacity_bytes, allocator_retries, world_size, rank_step_times
    (per-rank mean step seconds), communication_wait_s (seconds the watched steps waited on collectives),
    loader_samples_per_s, model_samples_per_s. Raises ValueError with no records (the caller reports "no
    training step seen").
    """
    watch = open_watch(records, samples, context)
    findings = [found for rule in RULES if (found := rule(watch)) is not None]
    healthy = compute_bound(watch, findings)
    if healthy is not None:
        findings.append(healthy)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], -f.share))
    totals = watch.totals
    verdict = Verdict(primary_kind(findings), totals.device_busy, totals.share(totals.data_wait_s), totals.steps,
                      watch.device)
    loader, model = throughputs(watch)
    return Report(verdict, findings, watch.unmeasured, loader, model, context.get("script_error"))
