"""The hardware probe against independent sources, and the NVML queries without a GPU (faked)."""

from __future__ import annotations

import os
import shutil
import sys
import types
from pathlib import Path

import psutil
import pytest

from gpufeed.hardware import nvml, probe
from gpufeed.hardware.cpu import parse_cpu_flags
from gpufeed.hardware.na import NA, is_na

X86_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz
flags\t\t: fpu sse sse2 avx avx512f avx512bw amx_tile amx_int8
bugs\t\t: spectre_v1

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz
flags\t\t: fpu sse sse2 avx avx512f avx512bw amx_tile amx_int8
"""

ARM_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve
"""


# --- the NA value -----------------------------------------------------------------------------------


def test_na_is_falsy_and_recognised() -> None:
    missing = NA("no driver")
    assert not missing
    assert is_na(missing) and not is_na(0) and not is_na(None)
    assert str(missing) == "NA (no driver)"


# --- CPU --------------------------------------------------------------------------------------------


def test_parse_cpu_flags_reads_the_first_processor() -> None:
    flags = parse_cpu_flags(X86_CPUINFO)
    assert flags == ("fpu", "sse", "sse2", "avx", "avx512f", "avx512bw", "amx_tile", "amx_int8")
    assert parse_cpu_flags(ARM_CPUINFO)[-1] == "sve"
    assert is_na(parse_cpu_flags("processor : 0\nmodel name : something\n"))


def test_probe_cpu_on_a_sample_cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("gpufeed.hardware.cpu.CPUFREQ_DIR", tmp_path)  # no cpufreq files: clock from the name
    cpu = probe.probe_cpu(X86_CPUINFO)
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz"
    assert (cpu.avx512f, cpu.amx_tile) == (True, True)
    assert (cpu.avx2, cpu.avx512_bf16, cpu.amx_bf16) == (False, False, False)
    assert cpu.base_clock_mhz == 2000.0


def test_cpufreq_files_give_the_clocks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "cpuinfo_max_freq").write_text("3800000\n")  # kHz, as Linux writes them
    (tmp_path / "base_frequency").write_text("2100000\n")
    monkeypatch.setattr("gpufeed.hardware.cpu.CPUFREQ_DIR", tmp_path)
    cpu = probe.probe_cpu(X86_CPUINFO)
    assert (cpu.max_clock_mhz, cpu.base_clock_mhz) == (3800.0, 2100.0)


def test_cpu_counts_match_the_operating_system() -> None:
    cpu = probe.probe_cpu()
    assert cpu.logical_cores == os.cpu_count()
    if not is_na(cpu.physical_cores):
        assert 1 <= cpu.physical_cores <= cpu.logical_cores
    if hasattr(os, "sched_getaffinity"):
        assert cpu.usable_cores == len(os.sched_getaffinity(0))


# --- memory and disk --------------------------------------------------------------------------------


def test_memory_matches_psutil_and_meminfo() -> None:
    memory = probe.probe_memory()
    assert memory.total_bytes == psutil.virtual_memory().total
    assert 0 < memory.available_bytes <= memory.total_bytes
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():  # an independent reading: MemTotal in KiB
        line = next(line for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:"))
        assert memory.total_bytes == int(line.split()[1]) * 1024


def test_disk_matches_shutil(tmp_path: Path) -> None:
    disk = probe.probe_disk(tmp_path)
    usage = shutil.disk_usage(tmp_path)
    assert disk.path == str(tmp_path.resolve())
    assert disk.total_bytes == usage.total
    assert abs(disk.free_bytes - usage.free) <= max(64 * 2**20, 0.01 * usage.total)  # free space moves
    assert os.path.ismount(disk.mountpoint)
    assert os.stat(tmp_path).st_dev == os.stat(disk.mountpoint).st_dev  # the same filesystem
    assert not is_na(disk.filesystem_type) and not is_na(disk.device)


def test_disk_is_the_longest_mountpoint_holding_the_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    mounts = [("/dev/deep", tmp_path / "a", "xfs"), ("/dev/mid", tmp_path, "btrfs"),
              ("/dev/sibling", Path(f"{tmp_path}b"), "ext4"), ("/dev/root", Path("/"), "ext4")]
    partitions = [types.SimpleNamespace(device=device, mountpoint=str(mount), fstype=kind, opts="rw")
                  for device, mount, kind in mounts]
    monkeypatch.setattr(probe.psutil, "disk_partitions", lambda all=False: partitions)
    assert probe.probe_disk(tmp_path / "a" / "b").device == "/dev/deep"
    assert probe.probe_disk(tmp_path).filesystem_type == "btrfs"  # not fooled by the "...b" sibling
    assert probe.probe_disk("/").mountpoint == "/"


def test_disk_of_a_path_not_yet_created_is_its_parents(tmp_path: Path) -> None:
    disk = probe.probe_disk(tmp_path / "not" / "yet")
    assert disk.path == str((tmp_path / "not" / "yet").resolve())
    assert disk.total_bytes == shutil.disk_usage(tmp_path).total


# --- the whole machine ------------------------------------------------------------------------------


def test_every_na_is_listed_in_unmeasured() -> None:
    machine = probe.probe_machine(".")
    expected = probe.unmeasured_fields(machine.cpu, "cpu") + probe.unmeasured_fields(machine.software, "software")
    assert set(expected) <= set(machine.unmeasured)
    assert all(": " in line for line in machine.unmeasured)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA device")
def test_without_cuda_the_cuda_fields_are_na_with_a_reason() -> None:
    import torch

    machine = probe.probe_machine(".")
    assert not [device for device in machine.accelerators if device.kind == "cuda"]
    notes = [line for line in machine.unmeasured if line.startswith("accelerators.cuda: ")]
    assert len(notes) == 1 and len(notes[0]) > len("accelerators.cuda: ")
    if torch.version.cuda is None:
        assert is_na(machine.software.cuda_runtime) and "without CUDA" in machine.software.cuda_runtime.reason
        assert any(line.startswith("software.cuda_runtime: ") for line in machine.unmeasured)


def test_unmeasured_fields_walks_lists_and_nested_dataclasses() -> None:
    device = probe.other_device("xpu", 1, "card", 2**30, NA("no driver"))
    lines = probe.unmeasured_fields([device], "accelerators")
    assert "accelerators[0].driver_version: no driver" in lines
    assert not any(".name:" in line or ".memory_bytes:" in line for line in lines)


# --- NVML, faked --------------------------------------------------------------------------------------


class NVMLError(Exception):
    """Stands for pynvml.NVMLError; the module matches on the class name."""


def fake_pynvml(init_error: Exception | None = None, uuids: tuple[str, ...] = ("GPU-aaaa", "GPU-bbbb")):
    """A pynvml with `len(uuids)` devices and fixed readings (in NVML's own units)."""
    module = types.ModuleType("pynvml")
    module.NVML_CLOCK_SM, module.NVML_CLOCK_MEM, module.NVML_TEMPERATURE_GPU = 1, 2, 0

    def init() -> None:
        if init_error is not None:
            raise init_error

    def not_supported(handle: int) -> int:
        raise NVMLError("Not Supported")

    module.nvmlInit = init
    module.nvmlDeviceGetCount = lambda: len(uuids)
    module.nvmlDeviceGetHandleByIndex = lambda index: index
    module.nvmlDeviceGetUUID = lambda handle: uuids[handle]
    module.nvmlDeviceGetName = lambda handle: b"NVIDIA H100 80GB HBM3"  # old pynvml returns bytes
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=80 * 2**30, used=2**30, free=79 * 2**30)
    module.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=97, memory=41)
    module.nvmlDeviceGetPowerUsage = not_supported
    module.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000 + handle  # milliwatts
    module.nvmlDeviceGetClockInfo = lambda handle, kind: {1: 1980, 2: 2619}[kind]
    module.nvmlDeviceGetMaxClockInfo = lambda handle, kind: {1: 1980, 2: 2619}[kind] + 100
    module.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: 4 + handle
    module.nvmlDeviceGetMaxPcieLinkGeneration = lambda handle: 5
    module.nvmlDeviceGetCurrPcieLinkWidth = lambda handle: 8 + handle
    module.nvmlDeviceGetMaxPcieLinkWidth = lambda handle: 16
    module.nvmlDeviceGetTemperature = lambda handle, sensor: 45
    module.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    module.nvmlSystemGetCudaDriverVersion = lambda: 12040
    return module


@pytest.fixture
def fresh_nvml(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Forget the cached NVML state for one test (restored afterwards)."""
    monkeypatch.setattr(nvml, "_library", None)
    return monkeypatch


ALL_QUERIES = [
    lambda: nvml.device_count(), lambda: nvml.device_uuid(0), lambda: nvml.index_for_uuid("GPU-aaaa"),
    lambda: nvml.device_name(0), lambda: nvml.memory_bytes(0), lambda: nvml.utilization_percent(0),
    lambda: nvml.power_usage_w(0), lambda: nvml.power_limit_w(0), lambda: nvml.clock_mhz(0, "memory", True),
    lambda: nvml.pcie_generation(0), lambda: nvml.pcie_width(0, maximum=True),
    lambda: nvml.driver_version(), lambda: nvml.cuda_driver_version(),
]


@pytest.mark.parametrize("query", ALL_QUERIES)
def test_without_pynvml_every_query_is_na(fresh_nvml: pytest.MonkeyPatch, query) -> None:
    fresh_nvml.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    assert is_na(nvml.load_library())
    result = query()
    assert is_na(result) and result.reason.startswith("NVML not available: ")


@pytest.mark.parametrize("query", ALL_QUERIES)
def test_when_init_fails_every_query_is_na(fresh_nvml: pytest.MonkeyPatch, query) -> None:
    fresh_nvml.setitem(sys.modules, "pynvml", fake_pynvml(init_error=NVMLError("Driver Not Loaded")))
    result = query()
    assert result == NA("NVML not available: Driver Not Loaded")


def test_queries_convert_units_and_name_unsupported_fields(fresh_nvml: pytest.MonkeyPatch) -> None:
    fresh_nvml.setitem(sys.modules, "pynvml", fake_pynvml())
    assert not is_na(nvml.load_library())
    assert nvml.device_name(0) == "NVIDIA H100 80GB HBM3"
    assert nvml.memory_bytes(0) == 80 * 2**30 and nvml.memory_bytes(0, "used") == 2**30
    assert (nvml.utilization_percent(0), nvml.utilization_percent(0, "memory")) == (97, 41)
    assert nvml.power_limit_w(1) == 700.001
    assert (nvml.clock_mhz(0), nvml.clock_mhz(0, "memory", maximum=True)) == (1980, 2719)
    assert (nvml.pcie_generation(1), nvml.pcie_width(1), nvml.pcie_width(1, maximum=True)) == (5, 9, 16)
    assert nvml.cuda_driver_version() == "12.4" and nvml.driver_version() == "550.54.15"
    assert nvml.power_usage_w(0) == NA("power.draw unreadable on NVML device 0: Not Supported")
    assert nvml.index_for_uuid("bbbb") == 1 and is_na(nvml.index_for_uuid("GPU-cccc"))


def fake_cuda_torch(uuid: str) -> types.SimpleNamespace:
    properties = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=85_000_000_000,
                                       major=9, minor=0, uuid=uuid, gcnArchName="")
    return types.SimpleNamespace(
        __version__="2.13.0+cu124", version=types.SimpleNamespace(cuda="12.4", hip=None),
        cuda=types.SimpleNamespace(device_count=lambda: 1, get_device_properties=lambda index: properties),
        backends=types.SimpleNamespace(mps=types.SimpleNamespace(is_available=lambda: False)), xpu=None)


def test_a_cuda_device_is_matched_to_nvml_by_uuid(fresh_nvml: pytest.MonkeyPatch) -> None:
    # CUDA_VISIBLE_DEVICES=1: torch's cuda:0 is NVML's device 1, which has another link and power limit
    fresh_nvml.setitem(sys.modules, "pynvml", fake_pynvml())
    fresh_nvml.setitem(sys.modules, "torch", fake_cuda_torch(uuid="bbbb"))
    devices, notes = probe.probe_accelerators()
    assert notes == [] and len(devices) == 1
    device = devices[0]
    assert (device.kind, device.index, device.compute_capability) == ("cuda", 0, "9.0")
    assert (device.memory_bytes, device.power_limit_w) == (85_000_000_000, 700.001)
    assert (device.pcie_generation_current, device.pcie_generation_max) == (5, 5)
    assert (device.pcie_width_current, device.pcie_width_max) == (9, 16)
    assert (device.driver_version, device.cuda_version) == ("550.54.15", "12.4")


def test_an_unmatched_uuid_falls_back_only_when_there_is_no_doubt(fresh_nvml: pytest.MonkeyPatch) -> None:
    fresh_nvml.setitem(sys.modules, "torch", fake_cuda_torch(uuid="zzzz"))
    fresh_nvml.setitem(sys.modules, "pynvml", fake_pynvml(uuids=("GPU-aaaa",)))
    devices, _ = probe.probe_accelerators()
    assert devices[0].pcie_width_current == 8  # one CUDA device, one NVML device: the same one
    fresh_nvml.setattr(nvml, "_library", None)
    fresh_nvml.setitem(sys.modules, "pynvml", fake_pynvml(uuids=("GPU-aaaa", "GPU-bbbb")))
    devices, _ = probe.probe_accelerators()
    assert is_na(devices[0].pcie_width_current) and "cannot match" in devices[0].pcie_width_current.reason


def test_a_cuda_device_without_nvml_keeps_torch_fields(fresh_nvml: pytest.MonkeyPatch) -> None:
    fresh_nvml.setitem(sys.modules, "pynvml", None)
    fresh_nvml.setitem(sys.modules, "torch", fake_cuda_torch(uuid="aaaa"))
    devices, _ = probe.probe_accelerators()
    device = devices[0]
    assert device.name == "NVIDIA H100 80GB HBM3" and device.compute_capability == "9.0"
    assert is_na(device.pcie_width_max) and device.pcie_width_max.reason.startswith("NVML not available")
    lines = probe.unmeasured_fields(devices, "accelerators")
    assert any(line.startswith("accelerators[0].power_limit_w: NVML not available") for line in lines)
