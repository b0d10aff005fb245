"""NVML GPM (SM activity, SM occupancy, tensor activity), power and SM clock, through a fake pynvml: the GPM reader
and both samplers. No GPU is needed; every value is the fake's own, so the tests compare exactly."""

from __future__ import annotations

import ctypes
import sys
import time
import types

import pytest
import torch

from gpufeed.hardware import gpm, nvml
from gpufeed.hardware.na import NA, is_na
from gpufeed.measure import sampler as sampler_module
from gpufeed.measure.sampler import GPM_SUBJECT, GpuReader, Sampler

SM_UTIL, SM_OCCUPANCY, ANY_TENSOR = 2, 3, 5  # NVML_GPM_METRIC_* in nvml.h
VALUES = {SM_UTIL: 37.5, SM_OCCUPANCY: 12.25, ANY_TENSOR: 61.0}  # percent, what the fake's windows report


class NVMLError_NotSupported(Exception):  # noqa: N801 (pynvml's class names; nvml.py matches on them)
    pass


class NVMLError_FunctionNotFound(Exception):  # noqa: N801
    pass


class FakeNvml:
    """A pynvml with one device and GPM. Samples are numbered; it records allocations, frees, the sample pairs
    given to nvmlGpmMetricsGet and every SM activity value it returned. `sm_values` (optional) gives each
    window's SM activity in turn."""

    def __init__(self, supported: bool = True, with_gpm: bool = True, support_error: Exception | None = None,
                 metric_errors: dict[int, int] | None = None, sm_values: list[float] | None = None):
        self.allocated: list[int] = []
        self.freed: list[int] = []
        self.got: list[int] = []
        self.pairs: list[tuple[int, int]] = []
        self.sm_returned: list[float] = []
        self._supported, self._support_error = supported, support_error
        self._metric_errors = metric_errors or {}
        self._sm_values = list(sm_values) if sm_values else None
        module = types.ModuleType("pynvml")
        module.NVML_SUCCESS, module.NVML_CLOCK_SM, module.NVML_CLOCK_MEM = 0, 1, 2
        module.nvmlInit = lambda: None
        module.nvmlDeviceGetCount = lambda: 1
        module.nvmlDeviceGetHandleByIndex = lambda index: f"handle{index}"
        module.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=97, memory=41)
        module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=80 * 2**30, used=3 * 2**30,
                                                                              free=77 * 2**30)
        module.nvmlDeviceGetPowerUsage = lambda handle: 312_500  # milliwatts
        module.nvmlDeviceGetClockInfo = lambda handle, kind: {1: 1755, 2: 2619}[kind]
        module.nvmlErrorString = lambda code: {3: "Not Supported"}.get(code, "Unknown Error")
        if with_gpm:
            module.NVML_GPM_METRIC_SM_UTIL, module.NVML_GPM_METRIC_SM_OCCUPANCY = SM_UTIL, SM_OCCUPANCY
            module.NVML_GPM_METRIC_ANY_TENSOR_UTIL, module.NVML_GPM_METRICS_GET_VERSION = ANY_TENSOR, 1
            module.c_nvmlGpmMetricsGet_t = self._request
            module.nvmlGpmQueryDeviceSupport = self._support
            module.nvmlGpmSampleAlloc = self._alloc
            module.nvmlGpmSampleFree = self._free
            module.nvmlGpmSampleGet = self._get
            module.nvmlGpmMetricsGet = self._metrics
        self.module = module

    @staticmethod
    def _request() -> types.SimpleNamespace:
        slots = [types.SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(477)]
        return types.SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None, metrics=slots)

    def _support(self, handle: str) -> types.SimpleNamespace:
        assert handle == "handle0"
        if self._support_error is not None:
            raise self._support_error
        return types.SimpleNamespace(version=1, isSupportedDevice=int(self._supported))

    def _alloc(self) -> int:
        self.allocated.append(len(self.allocated) + 1)
        return self.allocated[-1]

    def _free(self, sample: int) -> None:
        assert sample in self.allocated and sample not in self.freed, f"sample {sample} freed twice or never made"
        self.freed.append(sample)

    def _get(self, handle: str, sample: int) -> int:
        assert handle == "handle0" and sample in self.allocated and sample not in self.freed
        self.got.append(sample)
        return sample

    def _metrics(self, request: types.SimpleNamespace) -> types.SimpleNamespace:
        assert request.version == 1 and request.numMetrics == 3
        live = [sample for sample in self.got if sample not in self.freed]
        assert request.sample1 in live and request.sample2 in live
        assert self.got.index(request.sample1) < self.got.index(request.sample2)  # older first
        self.pairs.append((request.sample1, request.sample2))
        for slot in request.metrics[:request.numMetrics]:
            slot.nvmlReturn = self._metric_errors.get(slot.metricId, 0)
            slot.value = VALUES[slot.metricId]
            if slot.metricId == SM_UTIL and self._sm_values is not None:
                slot.value = self._sm_values[len(self.pairs) - 1]
            if slot.metricId == SM_UTIL and slot.nvmlReturn == 0:
                self.sm_returned.append(slot.value)
        return request


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch):
    """Installs a FakeNvml as pynvml (NVML's cached state is forgotten for the test and restored afterwards)."""

    def put(fake: FakeNvml | None) -> FakeNvml | None:
        monkeypatch.setattr(nvml, "_library", None)
        monkeypatch.setitem(sys.modules, "pynvml", None if fake is None else fake.module)
        return fake

    return put


# --- the GPM reader ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fake, words", [
    (None, "NVML not available: pynvml (package nvidia-ml-py) cannot be imported"),
    (FakeNvml(with_gpm=False), "GPM not available: this pynvml has no nvmlGpmQueryDeviceSupport (upgrade"),
    (FakeNvml(supported=False), "GPM not supported on NVML device 0 (GPM needs a Hopper or newer GPU)"),
    (FakeNvml(support_error=NVMLError_NotSupported("Not Supported")), "GPM needs a Hopper or newer GPU"),
    (FakeNvml(support_error=NVMLError_FunctionNotFound("Function Not Found")), "driver too old"),
])
def test_gpm_support_is_na_with_the_reason(install, fake, words) -> None:
    install(fake)
    support = gpm.gpm_supported(0)
    assert is_na(support) and words in support.reason
    reader = gpm.GpmReader(0)
    assert reader.unavailable == support and reader.read() is None and reader.read() is None
    reader.close()
    if fake is not None:
        assert fake.allocated == []  # nothing allocated for a device without GPM


def test_the_reader_pairs_consecutive_samples_and_frees_the_older(install) -> None:
    fake = install(FakeNvml(sm_values=[10.0, 20.0, 30.0]))
    assert gpm.gpm_supported(0) is True
    moments = iter([0.0, 0.1, 0.25, 0.5, 0.8])
    reader = gpm.GpmReader(0, window_s=0.2, clock=lambda: next(moments))
    assert reader.read() is None  # t=0: the first sample only starts the window
    assert reader.read() is None and fake.allocated == [1]  # t=0.1: too soon for a GPM window, no new sample
    first = reader.read()  # t=0.25
    assert first == {"sm_activity_percent": 10.0, "sm_occupancy_percent": 12.25, "tensor_activity_percent": 61.0}
    assert fake.freed == [1]  # the window's start is freed once its metrics are read
    assert reader.read()["sm_activity_percent"] == 20.0 and reader.read()["sm_activity_percent"] == 30.0
    assert fake.pairs == [(1, 2), (2, 3), (3, 4)]
    assert fake.freed == [1, 2, 3]
    reader.close()
    assert fake.freed == fake.allocated == [1, 2, 3, 4]
    assert reader.read() is None and fake.allocated == [1, 2, 3, 4]  # closed: no more samples


def test_a_metric_the_device_refuses_is_na_with_nvmls_message(install) -> None:
    install(FakeNvml(metric_errors={ANY_TENSOR: 3}))
    reader = gpm.GpmReader(0, window_s=0.0)
    reader.read()
    window = reader.read()
    reader.close()
    assert window["sm_activity_percent"] == 37.5 and window["sm_occupancy_percent"] == 12.25
    assert window["tensor_activity_percent"] == NA("GPM tensor activity unreadable on NVML device 0: Not Supported")


def test_a_failed_sample_keeps_the_window_start_and_frees_its_own_buffer(install) -> None:
    fake = install(FakeNvml())
    reader = gpm.GpmReader(0, window_s=0.0)
    reader.read()

    def refuse(handle, sample):
        raise NVMLError_NotSupported("Not Supported")

    working, fake.module.nvmlGpmSampleGet = fake.module.nvmlGpmSampleGet, refuse
    failed = reader.read()
    assert set(failed.values()) == {NA("GPM unreadable on NVML device 0: Not Supported")}
    fake.module.nvmlGpmSampleGet = working
    assert reader.read()["sm_activity_percent"] == 37.5 and fake.pairs == [(1, 3)]
    reader.close()
    assert sorted(fake.freed) == fake.allocated == [1, 2, 3]


def test_the_installed_pynvmls_own_structures_carry_the_request(monkeypatch) -> None:
    """The request is filled in the real ctypes structures of the installed nvidia-ml-py; only the C calls
    (which need a driver) are replaced."""
    real = pytest.importorskip("pynvml")
    if not hasattr(real, "c_nvmlGpmMetricsGet_t"):
        pytest.skip("this nvidia-ml-py has no GPM structures")
    buffers = [real.struct_c_nvmlGpmSample_t() for _ in range(3)]  # keeps the pointed-to objects alive
    samples = iter([ctypes.pointer(buffer) for buffer in buffers])
    address = [ctypes.addressof(buffer) for buffer in buffers]
    seen, freed = [], []

    def metrics_get(request):
        assert request.version == real.NVML_GPM_METRICS_GET_VERSION and request.numMetrics == 3
        pair = (ctypes.addressof(request.sample1.contents), ctypes.addressof(request.sample2.contents))
        seen.append(([request.metrics[slot].metricId for slot in range(3)], pair))
        for slot in range(3):
            request.metrics[slot].nvmlReturn = real.NVML_SUCCESS
            request.metrics[slot].value = VALUES[request.metrics[slot].metricId]
        return request

    def support(handle):
        answer = real.c_nvmlGpmSupport_t()
        answer.version, answer.isSupportedDevice = real.NVML_GPM_SUPPORT_VERSION, 1
        return answer

    for name, function in (("nvmlInit", lambda: None), ("nvmlDeviceGetHandleByIndex", lambda index: index),
                           ("nvmlGpmQueryDeviceSupport", support), ("nvmlGpmSampleAlloc", lambda: next(samples)),
                           ("nvmlGpmSampleGet", lambda handle, sample: sample), ("nvmlGpmMetricsGet", metrics_get),
                           ("nvmlGpmSampleFree", lambda sample: freed.append(ctypes.addressof(sample.contents)))):
        monkeypatch.setattr(real, name, function)
    monkeypatch.setattr(nvml, "_library", None)
    monkeypatch.setitem(sys.modules, "pynvml", real)
    reader = gpm.GpmReader(0, window_s=0.0)
    assert reader.unavailable is None and reader.read() is None
    assert reader.read() == {"sm_activity_percent": 37.5, "sm_occupancy_percent": 12.25,
                             "tensor_activity_percent": 61.0}
    assert reader.read()["tensor_activity_percent"] == 61.0
    reader.close()
    assert [ids for ids, _ in seen] == [[real.NVML_GPM_METRIC_SM_UTIL, real.NVML_GPM_METRIC_SM_OCCUPANCY,
                                         real.NVML_GPM_METRIC_ANY_TENSOR_UTIL]] * 2 == [[2, 3, 5]] * 2
    assert [pair for _, pair in seen] == [(address[0], address[1]), (address[1], address[2])]
    assert freed == address


# --- the samplers ---------------------------------------------------------------------------------------------


def test_gpu_reader_reads_nvml_units_and_holds_gpm_between_windows(install) -> None:
    install(FakeNvml())
    reader = GpuReader(0, gpm_window_s=0.0)
    readings, new_window = reader.read()
    assert not new_window and readings == {"gpu_utilization_percent": 97.0, "gpu_memory_used_bytes": 3 * 2**30,
                                           "power_w": 312.5, "sm_clock_mhz": 1755, "sm_activity_percent": None,
                                           "sm_occupancy_percent": None, "tensor_activity_percent": None}
    readings, new_window = reader.read()
    assert new_window and (readings["sm_activity_percent"], readings["sm_occupancy_percent"],
                           readings["tensor_activity_percent"]) == (37.5, 12.25, 61.0)
    reader._gpm = gpm.GpmReader(0, window_s=10.0)  # windows far apart: the next reads close none
    reader._gpm.read()
    readings, new_window = reader.read()
    assert not new_window and readings["sm_activity_percent"] == 37.5  # held from the last window
    reader.close()
    assert reader.unmeasured == []


def _wait_for(condition, seconds: float = 30.0) -> None:
    """Until `condition()` holds (at once, usually), or `seconds` passed: long, for a loaded machine."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def cuda_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the script had initialised CUDA device 0, which is NVML device 0."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(sampler_module, "nvml_index_for_cuda", lambda cuda_index: 0)


def test_the_doctors_sampler_carries_gpm_power_and_clock(install, cuda_started) -> None:
    fake = install(FakeNvml())
    host = Sampler(torch.device("cuda"), interval_s=0.02, keep_samples_from_s=time.perf_counter())
    _wait_for(lambda: sum(sample.sm_activity_percent is not None for sample in host.samples) >= 3)
    host.close()
    samples = host.samples
    first = next(index for index, sample in enumerate(samples) if sample.sm_activity_percent is not None)
    assert first >= 1  # the first sample only starts a GPM window
    assert all((sample.sm_activity_percent, sample.sm_occupancy_percent, sample.tensor_activity_percent)
               == (37.5, 12.25, 61.0) for sample in samples[first:])
    assert all(sample.sm_activity_percent is None for sample in samples[:first])
    assert all((sample.power_w, sample.sm_clock_mhz, sample.gpu_utilization_percent, sample.gpu_memory_used_bytes)
               == (312.5, 1755, 97.0, 3 * 2**30) for sample in samples)
    assert len(fake.pairs) >= 1 and sorted(fake.freed) == fake.allocated  # every GPM sample freed at close
    assert host.unmeasured == []


@pytest.mark.parametrize("fake, reason", [
    (FakeNvml(supported=False), "GPM not supported on NVML device 0 (GPM needs a Hopper or newer GPU)"),
    (FakeNvml(with_gpm=False), "GPM not available: this pynvml has no nvmlGpmQueryDeviceSupport (upgrade "
                               "nvidia-ml-py)"),
])
def test_without_gpm_the_doctors_samples_have_none_and_one_reason(install, cuda_started, fake, reason) -> None:
    install(fake)
    host = Sampler(torch.device("cuda"), interval_s=0.02, keep_samples_from_s=time.perf_counter())
    _wait_for(lambda: len(host.samples) >= 15)  # 0.3 s or more: room for a GPM window had there been one
    host.close()
    assert len(host.samples) >= 15
    assert all(sample.sm_activity_percent is None and sample.tensor_activity_percent is None
               and sample.sm_occupancy_percent is None for sample in host.samples)
    assert all(sample.power_w == 312.5 for sample in host.samples)  # the rest of NVML still reads
    assert host.unmeasured == [f"{GPM_SUBJECT}: {reason}"]


def test_the_train_sampler_averages_the_windows_of_the_interval(install, cuda_started) -> None:
    fake = install(FakeNvml(sm_values=[10.0 * (index + 1) for index in range(1000)]))
    sampler = Sampler(torch.device("cuda", 0), interval_s=0.02)  # touches no CUDA itself: NVML only
    _wait_for(lambda: len(fake.sm_returned) >= 3)
    sampler.close()
    sample = sampler.take()
    returned = fake.sm_returned  # every window's SM activity, in order: 10, 20, 30, ...
    assert len(returned) >= 3 and sample.sm_activity_percent == pytest.approx(sum(returned) / len(returned))
    assert sample.sm_activity_percent != returned[-1]  # a mean of the windows, not the last one
    assert sample.gpu_utilization_percent == 97.0
    assert sorted(fake.freed) == fake.allocated
    assert sampler.unmeasured == []
    assert sampler.samples == []  # without keep_samples_from_s nothing piles up over a long run


def test_a_rank_samples_its_own_gpu_not_device_0(install, cuda_started, monkeypatch) -> None:
    install(FakeNvml())
    asked = []
    monkeypatch.setattr(sampler_module, "nvml_index_for_cuda", lambda cuda_index: asked.append(cuda_index) or 0)
    sampler = Sampler(torch.device("cuda", 1), interval_s=0.02)  # rank 1 of a torchrun job
    _wait_for(lambda: sampler.gpu_reader is not None)
    sampler.close()
    assert asked == [1] and sampler.gpu_reader.index == 0  # torch's cuda:1 is whatever NVML index its UUID has
