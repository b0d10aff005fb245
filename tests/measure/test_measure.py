"""The loop timers (timing.py) and the background sampler, on the CPU."""

import time
from types import SimpleNamespace

import psutil
import pytest
import torch

from gpufeed.hardware.na import NA
from gpufeed.measure import sampler as sampler_module
from gpufeed.measure.sampler import HostReader, Sampler, rank_cuda_index
from gpufeed.measure.timing import DeviceBusyTimer, Stopwatch

WAIT_S = 30.0  # the most a test waits for the sampler thread's readings (it goes on as soon as they are there)


@pytest.mark.timing
def test_stopwatch_accumulates_a_known_sleep():
    """On the real clock (its arithmetic on a fake one: test_timing.py): at least the three 20 ms sleeps, and no
    more than the time around the blocks less the 20 ms slept between them (outside every block)."""
    watch = Stopwatch()
    started = time.perf_counter()
    for index in range(3):
        with watch:
            time.sleep(0.02)
        if index == 0:
            time.sleep(0.02)
    around_s = time.perf_counter() - started
    total = watch.take()
    assert 0.0599 <= total <= around_s - 0.0199 and watch.take() == 0.0


def test_device_timer_is_none_off_cuda():
    timer = DeviceBusyTimer(torch.device("cpu"))
    timer.start()
    timer.stop()
    assert timer.collect() is None


def test_sampler_reads_the_cpu_and_no_gpu_here():
    sampler = Sampler(torch.device("cpu"), interval_s=0.02)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        sum(range(10000))  # keep a core busy so the reading is not trivially zero
        if len(sampler.cpu_percents) >= 3:
            break
    sample = sampler.take()
    sampler.close()
    assert sample.gpu_utilization_percent is None and sample.sm_activity_percent is None
    assert sample.cpu_percent is not None and 0.0 <= sample.cpu_percent <= 100.0
    assert not any("GPU" in line or "GPM" in line for line in sampler.unmeasured)  # a CPU run lacks no GPU reading


def test_sampler_reads_the_host_ram_and_a_disk_rate():
    sampler = Sampler(torch.device("cpu"), interval_s=0.02)
    deadline = time.monotonic() + WAIT_S
    while not sampler.cpu_percents and time.monotonic() < deadline:  # a first reading (RAM is read with it)
        time.sleep(0.02)
    sample = sampler.take()
    sampler.close()
    total = psutil.virtual_memory().total
    assert sample.ram_total_bytes == total and 0 < sample.ram_used_bytes <= total
    assert sample.disk_read_bytes_per_s is None or sample.disk_read_bytes_per_s >= 0.0
    assert all("RAM" not in line for line in sampler.unmeasured)


def test_disk_read_rate_is_the_counter_delta_over_the_clock(monkeypatch):
    reads, moments = iter([1000, 1000 + 3 * 2**20, 500]), iter([10.0, 12.0, 13.0])
    monkeypatch.setattr(psutil, "disk_io_counters", lambda: SimpleNamespace(read_bytes=next(reads)))
    reader = HostReader(clock=lambda: next(moments))
    assert reader.disk_read_bytes_per_s() is None  # the first reading only starts the interval
    assert reader.disk_read_bytes_per_s() == 3 * 2**20 / 2.0  # 3 MiB in 2 s
    assert reader.disk_read_bytes_per_s() == 0.0  # the counter went back (reset): no negative rate
    assert reader.unmeasured == []


def test_unreadable_ram_and_disks_are_none_with_one_reason_each(monkeypatch):
    def broken():
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", broken)
    monkeypatch.setattr(psutil, "disk_io_counters", lambda: None)  # psutil's answer when it finds no disk
    reader = HostReader()
    assert reader.ram() == (None, None) and reader.ram() == (None, None)
    assert reader.disk_read_bytes_per_s() is None and reader.disk_read_bytes_per_s() is None
    assert reader.unmeasured == ["host RAM: unreadable (OSError: no /proc/meminfo)",
                                 "disk read rate: unreadable (psutil found no disk counters)"]


def test_ram_used_is_total_minus_available(monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(total=16 * 2**30, available=4 * 2**30,
                                                                          used=9 * 2**30))
    assert HostReader().ram() == (12 * 2**30, 16 * 2**30)  # node_exporter's figure, not psutil's `used`


def test_the_doctors_sampler_reads_no_gpu_before_the_script_starts_cuda(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU the script has not touched yet
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(sampler_module, "nvml_index_for_cuda", lambda index: asked.append(index) or 0)
    host = Sampler(torch.device("cuda"), interval_s=0.02, keep_samples_from_s=time.perf_counter())
    deadline = time.monotonic() + WAIT_S
    while len(host.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    host.close()
    assert len(host.samples) >= 3 and asked == []  # never asked for the device: that would start CUDA
    gpu_fields = ("gpu_utilization_percent", "gpu_memory_used_bytes", "power_w", "sm_clock_mhz", "sm_activity_percent",
                  "sm_occupancy_percent", "tensor_activity_percent")
    assert all(getattr(sample, field) is None for sample in host.samples for field in gpu_fields)
    assert not any("GPU" in line or "GPM" in line for line in host.unmeasured)


def test_a_cuda_device_nvml_cannot_match_is_one_reason(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(sampler_module, "nvml_index_for_cuda", lambda index: NA("NVML not available: no driver"))
    host = Sampler(torch.device("cuda"), interval_s=0.02, keep_samples_from_s=time.perf_counter())
    deadline = time.monotonic() + WAIT_S
    while len(host.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    host.close()
    assert len(host.samples) >= 3 and all(sample.power_w is None for sample in host.samples)
    lines = [line for line in host.unmeasured if "NVML" in line]
    assert lines == ["GPU readings (NVML): NVML not available: no driver"]  # once, though every sample lacked it


def test_rank_cuda_index_is_the_given_index_else_this_ranks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert rank_cuda_index(torch.device("cuda", 1)) == 1
    assert rank_cuda_index(torch.device("cuda")) == 0
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's second process on this machine
    assert rank_cuda_index(torch.device("cuda")) == 1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # CUDA_VISIBLE_DEVICES left each rank one GPU
    assert rank_cuda_index(torch.device("cuda")) == 0


def test_rank_cuda_index_reads_the_current_device_once_cuda_started(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)  # the script called torch.cuda.set_device(3)
    assert rank_cuda_index(torch.device("cuda")) == 3


def test_a_sampler_without_a_device_reads_the_host_and_keeps_samples_when_asked():
    sampler = Sampler(interval_s=0.02, keep_samples_from_s=time.perf_counter())
    deadline = time.monotonic() + WAIT_S
    while len(sampler.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    sample = sampler.take()
    sampler.close()
    assert len(sampler.samples) >= 3 and all(reading.gpu_utilization_percent is None for reading in sampler.samples)
    assert [reading.time_s for reading in sampler.samples] == sorted(reading.time_s for reading in sampler.samples)
    assert sample.cpu_percent is not None and sample.ram_total_bytes == psutil.virtual_memory().total
