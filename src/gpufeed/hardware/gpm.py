"""GPM (GPU Performance Monitoring, NVML, Hopper or newer): SM activity, SM occupancy and tensor activity.

Split from nvml.py, whose loading of pynvml and error descriptions it uses (through the module, so a test that
replaces nvml's library replaces it here too). Every reading is a value or `NA` with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpufeed.hardware import nvml
from gpufeed.hardware.na import NA, is_na

# --- GPM: SM activity, occupancy and tensor activity (Hopper or newer) -----------------------------------------
# GPM (GPU Performance Monitoring) counts what the SMs did between two samples: the honest version of
# utilization.gpu, which reads 100% while any kernel runs, however few SMs it occupies. Each metric is a float
# in percent over the window between the samples (metric ids 2, 3 and 5 in nvml.h).
GPM_METRICS = (("sm_activity_percent", "SM activity", "NVML_GPM_METRIC_SM_UTIL"),  # share of SMs busy
               ("sm_occupancy_percent", "SM occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),  # active warps / maximum
               ("tensor_activity_percent", "tensor activity", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"))  # any tensor op
# NVML's GPM reference (nvmlGpmMetricsGet): two nvmlGpmSampleGet calls "should be greater than 100ms" apart,
# the internal sample refresh rate; two refresh periods leave every window at least one whole refresh.
GPM_WINDOW_S = 0.2
_GPM_NAMES = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmSampleFree",
              "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t", "NVML_GPM_METRICS_GET_VERSION",
              *(constant for _, _, constant in GPM_METRICS))


def gpm_supported(index: int) -> bool | NA:
    """True when the device has GPM metrics; otherwise the `NA` that says why not: no NVML, a pynvml without
    the GPM functions, a driver whose NVML lacks them (before R525), or a GPU older than Hopper."""
    library = nvml.load_library()
    if is_na(library):
        return library
    missing = [name for name in _GPM_NAMES if not hasattr(library, name)]
    if missing:
        return NA(f"GPM not available: this pynvml has no {missing[0]} (upgrade nvidia-ml-py)")
    try:
        support = library.nvmlGpmQueryDeviceSupport(library.nvmlDeviceGetHandleByIndex(index))
    except Exception as error:
        if type(error).__name__ == "NVMLError_FunctionNotFound":
            return NA("GPM not available: the driver's NVML has no nvmlGpmQueryDeviceSupport (driver too old; "
                      "GPM needs R525 or newer)")
        if type(error).__name__ == "NVMLError_NotSupported":
            return NA(f"GPM not supported on NVML device {index} (GPM needs a Hopper or newer GPU)")
        return NA(f"GPM support unreadable on NVML device {index}: {nvml.describe_error(error)}")
    if not support.isSupportedDevice:
        return NA(f"GPM not supported on NVML device {index} (GPM needs a Hopper or newer GPU)")
    return True


class GpmReader:
    """GPM metrics of one device over consecutive windows. Each `read()` takes a GPM sample; when at least
    `window_s` passed since the previous one it returns {field: percent or NA} for `GPM_METRICS` between the two
    and frees the older sample, otherwise None (the first call only starts the window). `unavailable` is the NA
    that says why nothing can be read (then `read()` returns None). `close()` frees the sample still held.
    Safe to call from several threads."""

    def __init__(self, index: int, window_s: float = GPM_WINDOW_S, clock: Callable[[], float] = time.perf_counter):
        self.index, self._window_s, self._clock = index, window_s, clock
        self._lock = threading.Lock()
        self._previous: tuple[float, Any] | None = None  # (clock, sample) of the window's start
        self._closed = False
        support = gpm_supported(index)
        self.unavailable: NA | None = support if is_na(support) else None

    def _failed(self, error: BaseException) -> dict[str, NA]:
        why = NA(f"GPM unreadable on NVML device {self.index}: {nvml.describe_error(error)}")
        return {field: why for field, _, _ in GPM_METRICS}

    def read(self) -> dict[str, float | NA] | None:
        with self._lock:
            if self.unavailable is not None or self._closed:
                return None
            now, nv = self._clock(), nvml.load_library()
            if self._previous is not None and now - self._previous[0] < self._window_s:
                return None
            try:
                sample = nv.nvmlGpmSampleAlloc()
            except Exception as error:  # out of memory, or NVML shut down: nothing more to read
                self.unavailable = NA(f"GPM sample buffer not allocated: {nvml.describe_error(error)}")
                return None
            try:
                nv.nvmlGpmSampleGet(nv.nvmlDeviceGetHandleByIndex(self.index), sample)
            except Exception as error:
                _free(nv, sample)
                return self._failed(error)  # the previous sample stays the window's start
            previous, self._previous = self._previous, (now, sample)
            if previous is None:
                return None
            try:
                return _gpm_metrics(nv, self.index, previous[1], sample)
            except Exception as error:
                return self._failed(error)
            finally:
                _free(nv, previous[1])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            previous, self._previous = self._previous, None
            if previous is not None:
                _free(nvml.load_library(), previous[1])


def _free(nv: Any, sample: Any) -> None:
    try:
        nv.nvmlGpmSampleFree(sample)
    except Exception:  # nothing to do about a buffer NVML will not take back; a reading must not crash
        pass


def _gpm_metrics(nv: Any, index: int, first: Any, second: Any) -> dict[str, float | NA]:
    request = nv.c_nvmlGpmMetricsGet_t()
    request.version = nv.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRICS)
    request.sample1, request.sample2 = first, second
    for slot, (_, _, constant) in enumerate(GPM_METRICS):
        request.metrics[slot].metricId = getattr(nv, constant)
    nv.nvmlGpmMetricsGet(request)
    values: dict[str, float | NA] = {}
    for slot, (field, label, _) in enumerate(GPM_METRICS):
        metric = request.metrics[slot]
        if metric.nvmlReturn == getattr(nv, "NVML_SUCCESS", 0):
            values[field] = float(metric.value)
        else:
            values[field] = NA(f"GPM {label} unreadable on NVML device {index}: {_error_text(nv, metric.nvmlReturn)}")
    return values


def _error_text(nv: Any, code: int) -> str:
    try:
        return nvml.as_text(nv.nvmlErrorString(code))
    except Exception:
        return f"NVML error {code}"
