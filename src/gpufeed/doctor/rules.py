"""The doctor's rules: per-step records and host samples in, a `Report` out (docs/design.md, "The doctor's vocabulary").

One function per kind returns a `Finding` or None. A share is a fraction of the total wall time of the watched
steps. Evidence holds only numbers computed from the inputs (None where an input was not given). Thresholds are
named constants with their source; "gpufeed's choice" marks those no published tool fixes, with the reason.

What the rules read, the grading of shares and counts, and the throughputs are in evidence.py; slow-step
detection, periodic_stall and straggler in stalls.py; launch_overhead (from the profiled window) in launch.py;
memory_pressure (device and host) in memory.py; SM occupancy (GPM) in occupancy.py. The functions and classes
moved there import from here too.
"""

from __future__ import annotations

import dataclasses
import statistics

from gpufeed.doctor import fixes
from gpufeed.doctor.evidence import CONTEXT_KEYS as CONTEXT_KEYS  # re-exported: moved to evidence.py
from gpufeed.doctor.evidence import (
    INPUT_SHARE_MEDIUM,
    LOW_DEVICE_BUSY,
    Watch,
    confidence,
    finding,
    host_bound_gate,
    model_batch,
    open_watch,
    severity,
    throughputs,
    unexplained_idle,
)
from gpufeed.doctor.evidence import Totals as Totals
from gpufeed.doctor.launch import launch_overhead
from gpufeed.doctor.memory import memory_pressure
from gpufeed.doctor.occupancy import gpu_activity, underfilled
from gpufeed.doctor.report import KINDS, Finding, Report, Verdict
from gpufeed.doctor.stalls import periodic_stall, straggler
from gpufeed.doctor.stalls import slow_outliers as slow_outliers  # re-exported: moved to stalls.py
from gpufeed.doctor.stalls import stall_period as stall_period
from gpufeed.measure.steps import HostSample, StepRecord
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH

# TensorFlow profiler, the file cited for INPUT_SHARE_* in evidence.py: device collectives share, moderate >= 3%,
# high >= 15% (the same grades as kernel launches: launch.py). LOW_DEVICE_BUSY (torch-tb-profiler) is in evidence.py.
COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH = 0.03, 0.15
# SageMaker Debugger CPUBottleneck rule defaults: CPU above 90% while GPU utilization is below 10%.
CPU_BUSY_PERCENT = 90.0
CPU_BOTTLENECK_DEVICE_BUSY = 0.10
# gpufeed's choice: some copy is unavoidable, so twice the 5% input threshold before copies alone are flagged.
COPY_SHARE = 0.10
# gpufeed's choice: when most copied bytes come from pageable memory, pinning is the first fix to try.
PAGEABLE_FRACTION = 0.50
# gpufeed's choice: below 32 samples a batch rarely fills a GPU; on the CPU a step under 10 ms is short enough that
# fixed per-step costs (Python, per-operator dispatch of some microseconds) weigh on it.
SMALL_BATCH = 32
SHORT_CPU_STEP_S = 0.010
# gpufeed's choice: more loader processes than 8 seldom help one GPU and cost memory (one dataset copy each).
MAX_SUGGESTED_WORKERS = 8
# gpufeed's choice: when half the data wait is the loader starting or stopping its workers (__iter__, the final
# StopIteration), the fix is to keep them (persistent_workers), not to add more.
RESTART_SHARE = 0.50

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def input_bound(watch: Watch) -> Finding | None:
    totals = watch.totals
    share = totals.share(totals.data_wait_s)
    if share < INPUT_SHARE_MEDIUM:
        return None
    workers, cores = watch.get("loader_workers"), watch.get("cpu_count")
    if workers is None:
        watch.note("DataLoader workers: not read (the loader is not a torch DataLoader, or it was not reachable)")
    suggested = min(cores, MAX_SUGGESTED_WORKERS) if cores else None
    restart = watch.get("loader_restart_s")
    restart_share = restart / totals.data_wait_s if restart is not None else None
    evidence = {"data_wait_share": share, "mean_wait_ms": 1000.0 * totals.data_wait_s / totals.steps,
                "loader_workers": workers, "pin_memory": watch.get("loader_pin_memory"), "cpu_count": cores,
                "suggested_workers": suggested, "restart_share_of_wait": restart_share}
    supporting = watch.count(lambda r: r.data_wait_s >= INPUT_SHARE_MEDIUM * r.wall_s)
    restarts = restart_share if workers and restart_share is not None and restart_share >= RESTART_SHARE else None
    return finding("input_bound", severity(share), share, evidence,
                   fixes.input_bound(suggested, watch.on_gpu, workers, restarts), confidence(supporting))


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


def sync_stall(watch: Watch) -> Finding | None:
    totals = watch.totals
    sync_share = totals.share(totals.sync_s)
    per_step = totals.sync_count / totals.steps
    if sync_share < INPUT_SHARE_MEDIUM and not (watch.on_gpu and per_step >= 1):
        return None
    busy = watch.device_busy()
    # A wait on a busy device costs only the bubble it leaves: at most the device's idle share.
    share = min(sync_share, 1.0 - busy) if watch.on_gpu and busy is not None else sync_share
    evidence = {"sync_share": sync_share, "syncs_per_step": per_step,
                "mean_sync_ms": 1000.0 * totals.sync_s / totals.steps, "device_busy": busy}
    return finding("sync_stall", severity(share), share, evidence, fixes.sync_stall(watch.device_type),
                   confidence(watch.count(lambda r: r.sync_count > 0)))


def small_batch(watch: Watch) -> Finding | None:
    """Judged on the batch the model sees (`model_batch`), and on the CPU the model's time per batch."""
    batch, batches = model_batch(watch)
    if watch.on_gpu and (found := underfilled(watch)) is not None:
        return found
    if batch is None or batch >= SMALL_BATCH:
        return None
    totals = watch.totals
    model_step_s = (totals.wall_s - totals.data_wait_s) / totals.steps / batches
    evidence = {"batch_size": batch, "model_step_ms": 1000.0 * model_step_s, "device_busy": watch.device_busy()}
    if batches > 1:
        evidence["batches_per_step"] = batches
    if watch.on_gpu:
        busy = watch.busy()
        if busy is None or busy >= LOW_DEVICE_BUSY:
            return None
        evidence["device_busy"] = busy
        share = unexplained_idle(watch, busy)
        strong = host_bound_gate(watch) is not None
        supporting = watch.count(lambda r: r.compute_s is not None and r.compute_s < LOW_DEVICE_BUSY * r.wall_s)
        return finding("small_batch", "medium" if strong else "low", share, evidence,
                       fixes.small_batch(batch, accumulated=batches), confidence(supporting) if strong else "low")
    if model_step_s >= SHORT_CPU_STEP_S:
        return None
    watch.note("throughput at other batch sizes: not measured, so small_batch on the CPU is a heuristic "
               "(batch and step time) and claims no share of the step")
    return finding("small_batch", "low", 0.0, evidence, fixes.small_batch(batch, accumulated=batches), "low")


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
    busy = watch.device_busy()
    share = busy if busy is not None else 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"autocast_seen": False, "device_busy": busy, "governed_share": share}
    return finding("precision", "medium", share, evidence, fixes.precision(False, "cuda"), confidence(totals.steps))


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


def compute_bound(watch: Watch, others: list[Finding]) -> Finding | None:
    if any(other.share >= INPUT_SHARE_MEDIUM for other in others):
        return None
    totals = watch.totals
    wait_share = totals.share(totals.data_wait_s)
    busy = watch.busy()
    if watch.on_gpu:
        if busy is None or busy < DEVICE_BUSY_ENOUGH:  # healthy: busy enough (measure/thresholds.py)
            return None
        share = busy
    else:
        if wait_share >= INPUT_SHARE_MEDIUM:
            return None
        share = 1.0 - totals.share(totals.data_wait_s + totals.copy_s + totals.sync_s)
    evidence = {"device_busy": busy, "data_wait_share": wait_share, "compute_share": share}
    if watch.on_gpu:
        evidence.update(gpu_activity(watch))
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


def diagnose(records: list[StepRecord], samples: list[HostSample], context: dict) -> Report:
    """Findings for the watched steps, the verdict, and what could not be measured.

    `context` keys (any may be missing; CONTEXT_KEYS lists them; others raise ValueError): device, unmeasured,
    cpu_count, threads, loader_workers, loader_pin_memory, batch_size, dtype_float64_seen, autocast_seen,
    script_error, memory_peak_bytes, memory_capacity_bytes, allocator_retries, world_size, rank_step_times
    (per-rank mean step seconds), communication_wait_s (seconds the watched steps waited on collectives),
    loader_samples_per_s, model_samples_per_s, profile (`ProfileSummary.as_context()`: operators and kernels per
    profiled step), batches_per_step and loader_batch_size (gradient accumulation: small_batch judges one loader
    batch), loader_restart_s (of the data wait, the seconds the training loader spent starting or stopping its
    workers). Raises ValueError with no records (the caller reports "no training step seen").
    """
    watch = open_watch(records, samples, context)
    findings = [found for rule in RULES if (found := rule(watch)) is not None]
    healthy = compute_bound(watch, findings)
    if healthy is not None:
        findings.append(healthy)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], -f.share))
    totals = watch.totals
    verdict = Verdict(primary_kind(findings), watch.device_busy(), totals.share(totals.data_wait_s), totals.steps,
                      watch.device)
    loader, model = throughputs(watch)
    timeline = {"steps": [dataclasses.asdict(record) for record in records],
                "samples": [dataclasses.asdict(sample) for sample in samples],
                "profile": (context.get("profile") or {}).get("per_step", [])}
    return Report(verdict, findings, watch.unmeasured, loader, model, context.get("script_error"), timeline)
