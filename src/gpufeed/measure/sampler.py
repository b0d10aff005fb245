"""The background sampler: NVML readings of this rank's GPU, the host's CPU use, RAM and disk read rate, polled
at a fixed rate. One `Sampler` serves both users: gpufeed train averages between `take()` calls; the doctor
keeps every reading as a `HostSample`.

`take()` returns the means since the previous call (RAM: the largest use seen; disk: bytes read over the
interval's seconds). GPU utilization is NVML's figure (the share of time any
kernel was running: `nvidia-smi --query-gpu=utilization.gpu`), which reads 100% for a single tiny kernel in
flight; the CUDA-event busy share (`timing.DeviceBusyTimer`) is the better measure of our own loop, this one shows what
the whole GPU did. On Hopper and newer, NVML's GPM metrics add SM activity (the share of SMs busy, which a lone
small kernel does not fill), SM occupancy and tensor activity, each over a GPM window of `gpm.GPM_WINDOW_S` or
more. Readings that cannot be taken are None, with the reason in `unmeasured`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import psutil
import torch

from gpufeed.hardware import gpm, nvml
from gpufeed.hardware.na import is_na
from gpufeed.hardware.probe import nvml_index_for_cuda
from gpufeed.measure.steps import HostSample
from gpufeed.torchrun import launch


class HostReader:
    """Host RAM and disk reads (psutil), as `nvidia-smi`-like plain numbers: `ram()` is (used, total) bytes with
    used = total - available, as node_exporter's NodeMemoryHighUtilization alert counts it; `disk_read_bytes_per_s()`
    is the bytes read from all disks since the previous call over the seconds between (None on the first call).
    A reading that fails is None, with the reason added once to `unmeasured` (pass a list to share it).
    Containers: these are the host's figures (a cgroup memory limit is not read)."""

    def __init__(self, clock=time.perf_counter, unmeasured: list[str] | None = None) -> None:
        self.unmeasured = [] if unmeasured is None else unmeasured
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


GPM_SUBJECT = "SM activity, SM occupancy and tensor activity (NVML GPM)"
NO_GPU = {"gpu_utilization_percent": None, "gpu_memory_used_bytes": None, "power_w": None, "sm_clock_mhz": None,
          **{field: None for field, _, _ in gpm.GPM_METRICS}}


class GpuReader:
    """NVML readings of one GPU (by NVML index) for the sampler. `read()` returns (readings, new_window):
    utilization.gpu, memory used, power draw and SM clock, then the GPM metrics of the latest window, held until
    the next window closes (`new_window` is True when this call closed one). A reading that fails is None, with
    the reason added once to `unmeasured` (pass a list to share it)."""

    def __init__(self, index: int, unmeasured: list[str] | None = None,
                 gpm_window_s: float = gpm.GPM_WINDOW_S) -> None:
        self.index = index
        self.unmeasured = [] if unmeasured is None else unmeasured
        self._gpm = gpm.GpmReader(index, gpm_window_s)
        if self._gpm.unavailable is not None:
            self._note(GPM_SUBJECT, self._gpm.unavailable.reason)
        self._held: dict = {field: None for field, _, _ in gpm.GPM_METRICS}

    def _note(self, subject: str, reason: str) -> None:
        if all(not line.startswith(subject + ":") for line in self.unmeasured):
            self.unmeasured.append(f"{subject}: {reason}")

    def _value(self, subject: str, reading, kind: type = float):
        if is_na(reading):
            self._note(subject, reading.reason)
            return None
        return kind(reading)

    def read(self) -> tuple[dict, bool]:
        index = self.index
        readings = {"gpu_utilization_percent": self._value("GPU utilization", nvml.utilization_percent(index)),
                    "gpu_memory_used_bytes": self._value("GPU memory used", nvml.memory_bytes(index, "used"), int),
                    "power_w": self._value("GPU power draw", nvml.power_usage_w(index)),
                    "sm_clock_mhz": self._value("GPU SM clock", nvml.clock_mhz(index, "sm"), int)}
        window = self._gpm.read()
        if window is not None:
            self._held = {field: self._value(f"GPM {label}", window[field]) for field, label, _ in gpm.GPM_METRICS}
        return {**readings, **self._held}, window is not None

    def close(self) -> None:
        self._gpm.close()


@dataclass(frozen=True)
class Sample:
    gpu_utilization_percent: float | None
    cpu_percent: float | None
    ram_used_bytes: int | None = None  # the largest reading since the previous take()
    ram_total_bytes: int | None = None
    disk_read_bytes_per_s: float | None = None  # over the time since the previous take()
    sm_activity_percent: float | None = None  # NVML GPM: mean of the GPM windows that closed since the previous take()


def rank_cuda_index(device: torch.device) -> int:
    """torch's index of the CUDA device `device`. A bare `cuda` is this rank's device: the current device once
    CUDA has started (read on the thread that set it), else torchrun's LOCAL_RANK when it names a visible device,
    else 0. Never initialises CUDA."""
    if device.index is not None:
        return device.index
    if torch.cuda.is_initialized() and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(Exception):  # a reading that fails falls back below, never a crash
            return torch.cuda.current_device()  # per host thread: the sampler's own thread would read 0
    with contextlib.suppress(ValueError):  # torchrun.launch's ConfigError: the launcher's to report, not a reading's
        local_rank = launch().local_rank
        if 0 <= local_rank < torch.cuda.device_count():
            return local_rank
    return 0


class Sampler:
    """Background readings every `interval_s` (10 Hz): CPU per core, host RAM and disk read rate (psutil) and,
    for a CUDA `device`, NVML readings of that device (utilization, memory used, power draw, SM clock, GPM SM
    activity, SM occupancy and tensor activity). `device` None, or not CUDA, reads the host only.

    The NVML device is torch's device `device` (`rank_cuda_index`: a rank samples its own GPU, not device 0),
    matched to its NVML index by UUID (`probe.nvml_index_for_cuda`). Its readings start once CUDA has been
    initialised in this process: this thread never initialises CUDA itself (the doctor starts before the script
    touches CUDA).

    `take()` returns the means since the previous call (gpufeed train); with `keep_samples_from_s` (a
    `time.perf_counter()` moment) every reading is also kept in `samples` as a `HostSample` timed from it
    (the doctor). Readings that fail are None, with the reason once in `unmeasured`."""

    def __init__(self, device: torch.device | None = None, interval_s: float = 0.1,
                 keep_samples_from_s: float | None = None):
        self.interval_s = interval_s
        self.unmeasured: list[str] = []
        self.samples: list[HostSample] = []
        self._keep_from_s = keep_samples_from_s
        self._cuda = device if device is not None and device.type == "cuda" else None
        self._cuda_index = rank_cuda_index(self._cuda) if self._cuda is not None else None
        self.gpu_reader: GpuReader | None = None  # NVML of this rank's GPU, once CUDA has started
        self._device_tried = False
        self._lock = threading.Lock()
        self._gpu: list[float] = []
        self._sm_activity: list[float] = []
        self.cpu_percents: list[float] = []  # this window's host CPU readings, percent of all cores
        self._ram_used: int | None = None
        self._ram_total: int | None = None
        self._host = HostReader(unmeasured=self.unmeasured)  # the disk rate between readings
        self._disk = HostReader(unmeasured=self.unmeasured)  # its own previous reading: the rate over take()s
        self._host.disk_read_bytes_per_s()  # the first call only starts the interval
        self._disk.disk_read_bytes_per_s()
        psutil.cpu_percent(percpu=True)  # the first call only starts psutil's interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufeed-sampler", daemon=True)
        self._thread.start()

    def _read_device(self) -> tuple[dict, bool]:
        if self._cuda is not None and not self._device_tried and torch.cuda.is_initialized():
            self._device_tried = True
            index = nvml_index_for_cuda(self._cuda_index)
            if is_na(index):
                self.unmeasured.append(f"GPU readings (NVML): {index.reason}")
            else:
                self.gpu_reader = GpuReader(index, unmeasured=self.unmeasured)
        return self.gpu_reader.read() if self.gpu_reader is not None else (NO_GPU, False)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            per_core = tuple(float(value) for value in psutil.cpu_percent(percpu=True))
            cpu = sum(per_core) / len(per_core) if per_core else None
            gpu, new_window = self._read_device()
            used, total = self._host.ram()
            disk = self._host.disk_read_bytes_per_s()
            with self._lock:
                if cpu is not None:
                    self.cpu_percents.append(cpu)
                if gpu["gpu_utilization_percent"] is not None:
                    self._gpu.append(float(gpu["gpu_utilization_percent"]))
                if new_window and gpu["sm_activity_percent"] is not None:
                    self._sm_activity.append(gpu["sm_activity_percent"])
                if used is not None:
                    self._ram_used, self._ram_total = max(used, self._ram_used or 0), total
            if self._keep_from_s is not None:
                self.samples.append(HostSample(time.perf_counter() - self._keep_from_s, cpu, per_core,
                                               ram_used_bytes=used, ram_total_bytes=total,
                                               disk_read_bytes_per_s=disk, **gpu))

    def take(self) -> Sample:
        disk = self._disk.disk_read_bytes_per_s()
        with self._lock:
            gpu, cpu, sm_activity = self._gpu, self.cpu_percents, self._sm_activity
            used, total = self._ram_used, self._ram_total
            self._gpu, self.cpu_percents, self._sm_activity, self._ram_used = [], [], [], None
        return Sample(_mean(gpu), _mean(cpu), used, total, disk, _mean(sm_activity))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        if self.gpu_reader is not None:
            self.gpu_reader.close()


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
