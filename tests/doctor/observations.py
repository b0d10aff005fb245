"""Observations made by hand for the tests of the findings: every field `Watcher.observe()` fills, with the values
of a plain CPU run (`on_cpu`) or GPU run (`on_gpu`) unless a test changes them by name; the step records, host
samples and profiled windows they hold; and lookups into the report."""

from __future__ import annotations

import dataclasses
import time

import pytest

from gpufeed.doctor.notes import Note
from gpufeed.doctor.observation import (
    BatchProbe,
    Host,
    LoaderSettings,
    MemoryReading,
    Observation,
    PaddingReading,
    ProfiledStep,
    ProfileSummary,
    ProfileWindow,
    Ranks,
    StepArithmetic,
    StepShape,
)
from gpufeed.measure.steps import HostSample, StepRecord

NO_MEMORY = MemoryReading(None, None, None)
ONE_PROCESS = Ranks()
CPU = {}  # the defaults of `observation`
GPU = {"device": "cuda:0", "cpu_count": 16, "threads": 8, "workers": 8, "pin_memory": True, "batch_size": 256,
       "autocast_seen": True, "memory": MemoryReading(40 * 2**30, 80 * 2**30, 0)}


def observation(records: list[StepRecord], samples: list[HostSample] = (), *, device: str | None = "cpu",
                cpu_count: int | None = 8, threads: int = 8, workers: int | None = 0, pin_memory: bool | None = False,
                restart_s: float = 0.0, memory: MemoryReading = NO_MEMORY, profile: ProfileWindow | None = None,
                batch_size: int | None = 64, batches_per_step: int | None = None,
                loader_batch_size: int | None = None, float64_seen: bool = False, autocast_seen: bool | None = False,
                ranks: Ranks = ONE_PROCESS, notes: tuple[str, ...] = (),
                script_error: str | None = None, arithmetic: StepArithmetic | None = None,
                probe: BatchProbe | None = None, padding: PaddingReading | None = None) -> Observation:
    """`notes`: lines the instrumentation could not measure."""
    return Observation(tuple(records), tuple(samples), device, Host(cpu_count, threads),
                       LoaderSettings(workers, pin_memory, restart_s), memory, profile,
                       StepShape(batch_size, batches_per_step, loader_batch_size), float64_seen, autocast_seen, ranks,
                       tuple(Note("unmeasured", line) for line in notes), script_error, arithmetic=arithmetic,
                       probe=probe, padding=padding)


def on_cpu(records: list[StepRecord], samples: list[HostSample] = (), **changes) -> Observation:
    return observation(records, samples, **{**CPU, **changes})


def on_gpu(records: list[StepRecord], samples: list[HostSample] = (), **changes) -> Observation:
    return observation(records, samples, **{**GPU, **changes})


def step(index, wall=0.1, wait=0.0, copy=0.0, copy_bytes=0, pageable=0, compute=None, syncs=0, sync=0.0,
         batch=None):
    return StepRecord(index=index, start_s=index * wall, wall_s=wall, data_wait_s=wait, copy_s=copy,
                      copy_bytes=copy_bytes, copy_pageable_bytes=pageable, compute_s=compute, sync_count=syncs,
                      sync_s=sync, batch_size=batch)


def steps(count=20, **fields):
    return [step(index, **fields) for index in range(count)]


def host(cpu=50.0, gpu=None, count=10, ram=None, ram_total=64 * 2**30):
    """`ram`: the used fraction of `ram_total` in every sample (None: not read)."""
    return [HostSample(time_s=0.1 * i, cpu_percent=cpu, cpu_per_core_percent=(), gpu_utilization_percent=gpu,
                       gpu_memory_used_bytes=None, ram_used_bytes=None if ram is None else int(ram * ram_total),
                       ram_total_bytes=None if ram is None else ram_total) for i in range(count)]


def profiled(steps=5, wall=0.02, operators=1300, outside=0.43, kernels=None, short=None, kernel_s=None, busy=None):
    """The observation's profiled window of `steps` identical profiled steps of `wall` seconds; `outside` and `busy`
    are shares of the step, `kernel_s` seconds per step."""
    cuda = kernels is not None
    rows = [ProfiledStep(i, wall, operators, outside * wall, 0.0, kernels, short, kernel_s,
                         busy * wall if cuda else None) for i in range(steps)]
    return ProfileWindow.of(ProfileSummary(tuple(rows), steps, cuda))


def by_kind(report):
    kinds = [f.kind for f in report.findings]
    assert len(kinds) == len(set(kinds)), "one finding per kind"
    return {f.kind: f for f in report.findings}


def serious(report):
    return [f.kind for f in report.findings if f.severity in ("high", "medium")]


def periodic(count, period, extra, base=0.1):
    return [step(i, wall=base + (extra if i % period == period - 1 else 0.0)) for i in range(count)]


def with_sm(samples, sm):
    return [dataclasses.replace(sample, sm_activity_percent=sm, tensor_activity_percent=sm / 2) for sample in samples]


class FakeClock:
    """The `time` module as the doctor's timing code sees it under `fake_clock`: `perf_counter()` and `monotonic()`
    read a clock that moves only when a test calls `advance(seconds)`; every other name is the real module's."""

    def __init__(self, start: float):
        self.now = start

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


# every module of the doctor that reads the clock for a step's times: the step's wall time (watch.py), its parts
# (parts.py), the loader's wait (hooks.py, wrapper.py) and the loader's parts in this process (loader_split.py)
CLOCKED = ("gpufeed.doctor.observe.watch", "gpufeed.doctor.observe.parts", "gpufeed.doctor.observe.hooks",
           "gpufeed.doctor.observe.loader_split", "gpufeed.doctor.wrapper")


def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """One FakeClock for every module of CLOCKED until the test ends: the times recorded are then the sums of what
    the test advanced, exactly when it advances by binary fractions (0.25, 0.015625). It starts at a whole second
    near the real clock's reading, so that the background sampler's time stamps stay comparable."""
    clock = FakeClock(float(round(time.perf_counter())))
    for module in CLOCKED:
        monkeypatch.setattr(f"{module}.time", clock)
    return clock
