"""Background samplers: NVML utilization of one GPU, the host's CPU use, RAM and disk read rate, polled at a fixed
rate. `Sampler` (gpufeed train) averages between `take()` calls; `HostSampler` (the doctor) keeps every reading
as a `HostSample`.

`take()` returns the means since the previous call (RAM: the largest use seen; disk: bytes read over the
interval's seconds). GPU utilization is NVML's figure (the share of time any
kernel was running: `nvidia-smi --query-gpu=utilization.gpu`), which reads 100% for a single tiny kernel in
flight; the CUDA-event busy share in `timers.py` is the better measure of our own loop, this one shows what
the whole GPU did. Readings that cannot be taken are None, with the reason in `unmeasured`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import psutil
import torch

from gpufeed.hardware import nvml
from gpufeed.hardware.na import is_na
from gpufeed.hardware.probe import nvml_index_for_cuda
from gpufeed.measure.steps import HostSample


class HostReader:
    """Host RAM and disk reads (psutil), as `nvidia-smi`-like plain numbers: `ram()` is (used, total) bytes with
    used = total - available, as node_exporter's NodeMemoryHighUtilization alert counts it; `disk_read_bytes_per_s()`
    is the bytes read from all disks since the previous call over the seconds between (None on the first call).
    A reading that fails is None, with the reason added once to `unmeasured`. Containers: these are the host's
    figures (a cgroup memory limit is not read)."""

    def __init__(self, clock=time.perf_counter) -> None:
        self.unmeasured: list[str] = []
        self._clock = clock
        self._disk_last: tuple[float, int] | None = None
        self._disk_ok = True

    def _note(self, subject: str, error: BaseException | str) -> None:
        why = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        if all(not line.startswith(subject) for line in self.unmeasured):
            self.unmeasured.append(f"{subject}: unreadable ({why})")

    def ram(self) -> tuple[int | None, int | None]:
        try:
            memory = psutil.virtual_memory()
            return int(memory.total - memory.available), int(memory.total)
        except Exception as error:  # psutil has no reading here: NA, not a crash
            self._note("host RAM", error)
            return None, None

    def disk_read_bytes_per_s(self) -> float | None:
        if not self._disk_ok:
            return None
        try:
            counters = psutil.disk_io_counters()
        except Exception as error:
            counters, reason = None, error
        else:
            reason = "psutil found no disk counters"
        if counters is None:
            self._disk_ok = False
            self._note("disk read rate", reason)
            return None
        now, read = self._clock(), int(counters.read_bytes)
        last, self._disk_last = self._disk_last, (now, read)
        if last is None or now <= last[0]:
            return None
        return max(0, read - last[1]) / (now - last[0])  # a counter that wrapped or was reset reads as 0


@dataclass(frozen=True)
class Sample:
    gpu_utilization_percent: float | None
    cpu_percent: float | None
    ram_used_bytes: int | None = None  # the largest reading since the previous take()
    ram_total_bytes: int | None = None
    disk_read_bytes_per_s: float | None = None  # over the time since the previous take()


class Sampler:
    def __init__(self, device: torch.device, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.unmeasured: list[str] = []
        self._index = None
        if device.type == "cuda":
            index = nvml_index_for_cuda(device.index or 0)
            if is_na(index):
                self.unmeasured.append(f"GPU utilization: {index.reason}")
            else:
                self._index = index
        self._lock = threading.Lock()
        self._gpu: list[float] = []
        self._cpu: list[float] = []
        self._ram_used: int | None = None
        self._ram_total: int | None = None
        self._host = HostReader()
        self._disk = HostReader()  # its own previous reading: the rate over take() intervals
        self._disk.disk_read_bytes_per_s()  # the first call only starts the interval
        self._stop = threading.Event()
        psutil.cpu_percent(interval=None)  # the first call only starts psutil's interval
        self._thread = threading.Thread(target=self._run, name="gpufeed-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            cpu = psutil.cpu_percent(interval=None)
            gpu = nvml.utilization_percent(self._index) if self._index is not None else None
            used, total = self._host.ram()
            with self._lock:
                self._cpu.append(float(cpu))
                if gpu is not None and not is_na(gpu):
                    self._gpu.append(float(gpu))
                if used is not None:
                    self._ram_used, self._ram_total = max(used, self._ram_used or 0), total

    def take(self) -> Sample:
        disk = self._disk.disk_read_bytes_per_s()
        with self._lock:
            gpu, cpu, used, total = self._gpu, self._cpu, self._ram_used, self._ram_total
            self._gpu, self._cpu, self._ram_used = [], [], None
        self._gather_notes()
        return Sample(sum(gpu) / len(gpu) if gpu else None, sum(cpu) / len(cpu) if cpu else None, used, total, disk)

    def _gather_notes(self) -> None:
        for line in self._host.unmeasured + self._disk.unmeasured:
            if line not in self.unmeasured:
                self.unmeasured.append(line)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        self._gather_notes()


class HostSampler:
    """Background readings every `interval_s` (10 Hz): CPU per core, RAM and disk read rate (psutil) and, once
    the script has started CUDA, NVML utilization and memory of CUDA device 0. This thread never initialises CUDA
    itself. Readings that fail are None, with the reason in `reader.unmeasured`."""

    def __init__(self, start_s: float, interval_s: float = 0.1):
        self.samples: list[HostSample] = []
        self._start_s, self._interval_s = start_s, interval_s
        self._nvml_index: int | None = None
        self._stop = threading.Event()
        self.reader = HostReader()
        self.reader.disk_read_bytes_per_s()  # the first call only starts the interval
        psutil.cpu_percent(percpu=True)  # the first call only starts psutil's interval
        self._thread = threading.Thread(target=self._run, name="gpufeed-doctor-sampler", daemon=True)
        self._thread.start()

    def _gpu(self) -> tuple[float | None, int | None]:
        if self._nvml_index is None and torch.cuda.is_available() and torch.cuda.is_initialized():
            index = nvml_index_for_cuda(0)
            self._nvml_index = -1 if is_na(index) else index
        if self._nvml_index is None or self._nvml_index < 0:
            return None, None
        utilization, used = nvml.utilization_percent(self._nvml_index), nvml.memory_bytes(self._nvml_index, "used")
        return (None if is_na(utilization) else float(utilization)), (None if is_na(used) else int(used))

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            per_core = tuple(float(value) for value in psutil.cpu_percent(percpu=True))
            utilization, used = self._gpu()
            ram_used, ram_total = self.reader.ram()
            self.samples.append(HostSample(time.perf_counter() - self._start_s,
                                           sum(per_core) / len(per_core) if per_core else None, per_core,
                                           utilization, used, ram_used, ram_total,
                                           self.reader.disk_read_bytes_per_s()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
