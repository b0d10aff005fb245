"""A background sampler: NVML utilization of one GPU and the host's CPU use, polled at a fixed rate.

`take()` returns the means since the previous call. GPU utilization is NVML's figure (the share of time any
kernel was running: `nvidia-smi --query-gpu=utilization.gpu`), which reads 100% for a single tiny kernel in
flight; the CUDA-event busy share in `timers.py` is the better measure of our own loop, this one shows what
the whole GPU did. Readings that cannot be taken are None, with the reason in `unmeasured`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psutil
import torch

from gpufeed.hardware import nvml
from gpufeed.hardware.na import is_na
from gpufeed.hardware.probe import nvml_index_for_cuda


@dataclass(frozen=True)
class Sample:
    gpu_utilization_percent: float | None
    cpu_percent: float | None


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
        self._stop = threading.Event()
        psutil.cpu_percent(interval=None)  # the first call only starts psutil's interval
        self._thread = threading.Thread(target=self._run, name="gpufeed-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            cpu = psutil.cpu_percent(interval=None)
            gpu = nvml.utilization_percent(self._index) if self._index is not None else None
            with self._lock:
                self._cpu.append(float(cpu))
                if gpu is not None and not is_na(gpu):
                    self._gpu.append(float(gpu))

    def take(self) -> Sample:
        with self._lock:
            gpu, cpu = self._gpu, self._cpu
            self._gpu, self._cpu = [], []
        return Sample(sum(gpu) / len(gpu) if gpu else None, sum(cpu) / len(cpu) if cpu else None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
