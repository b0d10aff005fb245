"""cpu_saturated: the host's cores are all busy.

Found when the background samples' mean CPU use is above CPU_BUSY_PERCENT and either the GPU idles at the same
time (SageMaker Debugger's CPUBottleneck: below CPU_BOTTLENECK_DEVICE_BUSY; the share is the device's idle share)
or, on the CPU, more threads want to run (torch's threads plus the loader's workers) than there are cores (the
share is what each thread loses: 1 - cores / runnable). When the loader has workers, the fix names its site
(`evidence.site`, with num_workers as set) in the framework's words (frameworks/words.py). No --try experiment.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import OWN_LEVEL, OWN_LEVEL_SOURCE, confidence, new_finding, severity
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# SageMaker Debugger CPUBottleneck rule defaults: CPU above 90% while GPU utilization is below 10%.
CPU_BUSY_PERCENT = 90.0
CPU_BOTTLENECK_DEVICE_BUSY = 0.10


class CpuSaturated(Kind):
    NAME = "cpu_saturated"
    MEANING = "the host's cores are all busy"
    PART = "step"  # shares.py: saturated cores slow every part of the step
    RECOMMEND_AT, RECOMMEND_SOURCE = OWN_LEVEL, OWN_LEVEL_SOURCE
    FIGURES = ("cpu_percent", "threads", "loader_workers")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        readings = [s.cpu_percent for s in seen.samples if s.cpu_percent is not None]
        if not readings:
            notes.unmeasured("host CPU use: no background sample was taken")
            return None
        cpu_percent = statistics.fmean(readings)
        if cpu_percent <= CPU_BUSY_PERCENT:
            return None
        cores, threads, workers = seen.host.cpu_count, seen.host.threads, seen.loader.workers
        busy = seen.busy()
        if seen.on_gpu:
            if busy is None or busy >= CPU_BOTTLENECK_DEVICE_BUSY:
                return None
            share = 1.0 - busy  # the device idles while the host is saturated
        else:
            if cores is None:
                notes.unmeasured("cores: os.cpu_count() could not tell, so CPU oversubscription is unchecked")
                return None
            runnable = threads + (workers or 0)
            if runnable <= cores:
                return None
            share = 1.0 - cores / runnable  # with R runnable threads on C cores each gets C/R of a core
        evidence = {"cpu_percent": cpu_percent, "threads": threads, "loader_workers": workers, "cpu_count": cores,
                    "device_busy": busy}
        if workers:  # about the loader's workers: where they are set
            evidence.update(words.loader_evidence(seen.setup, ("num_workers",), notes))
        supporting = sum(1 for value in readings if value > CPU_BUSY_PERCENT)
        return new_finding(self.NAME, severity(share), share, evidence,
                           fix(cores, workers, threads, seen.on_gpu, seen.setup if workers else PLAIN),
                           confidence(supporting))


def fix(cores: int | None, workers: int | None, threads: int | None, on_gpu: bool,
        setup: Setup = PLAIN) -> tuple[str, str]:
    """`setup`: the framework and the loader's site when the loader has workers (the plain default otherwise)."""
    if on_gpu:
        fix = ("The host's cores are all busy while the device waits: the CPU cannot prepare batches fast enough. "
               "Move augmentation to the device, decode once (`gpufeed pack`) instead of every epoch, and keep "
               "loader workers plus training threads at or below the number of cores.")
    else:
        fix = ("More threads want to run than there are cores, so they take turns and each runs slower. Set the "
               "training threads (torch.set_num_threads) plus the loader workers to the number of cores.")
    if setup.site is not None:
        fix += f" The loader's workers are set in {setup.site_is} at {setup.site} ({words.knob(setup, 'num_workers')})."
    cores_text = str(cores) if cores is not None else "os.cpu_count()"
    worker_count = workers if workers else 0
    was = ""
    if cores is not None and worker_count >= cores:  # gpufeed's choice: half the cores each, when workers fill them
        worker_count, was = max(1, cores // 2), f" (was {worker_count})"
    suggested_threads = max(1, cores - worker_count) if cores is not None else None
    threads_text = str(suggested_threads) if suggested_threads is not None else f"{cores_text} - workers"
    snippet = (f"cores = {cores_text}\n"
               f"workers = {worker_count}{was}  # loader processes; each should use one thread\n"
               f"torch.set_num_threads({threads_text})  # training threads + workers = cores\n")
    one_thread = {} if setup.settings_in == "TrainingArguments" else {  # the Trainer sets its own worker_init_fn
        "worker_init_fn": "lambda _: torch.set_num_threads(1)"}
    return fix, snippet + words.loader_snippet(setup, {"num_workers": "workers", **one_thread})

