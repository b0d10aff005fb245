"""What this machine is: CPU (cpu.py), RAM, the disk holding the data, accelerators and software versions.

`probe_machine()` returns a frozen `MachineInfo`. Every reading that cannot be taken is `NA(reason)`,
and `MachineInfo.unmeasured` lists each of them as "field: reason". Nothing here prints or raises.
CUDA devices are read through torch (name, memory, capability) and NVML (PCIe link, power, driver).
"""

from __future__ import annotations

import dataclasses
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

from gpufeed.hardware import nvml
from gpufeed.hardware.cpu import CpuInfo, probe_cpu
from gpufeed.hardware.na import NA, attempt, is_na

T = TypeVar("T")


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class DiskInfo:
    path: str  # the data path, absolute
    mountpoint: str | NA
    filesystem_type: str | NA
    device: str | NA
    free_bytes: int | NA  # free to this (non-root) user
    total_bytes: int | NA


@dataclass(frozen=True)
class AcceleratorInfo:
    kind: str  # "cuda", "mps" or "xpu"
    index: int  # as torch numbers it: torch.device(kind, index)
    name: str | NA
    memory_bytes: int | NA
    compute_capability: str | NA  # "9.0"
    pcie_generation_current: int | NA
    pcie_generation_max: int | NA
    pcie_width_current: int | NA
    pcie_width_max: int | NA
    power_limit_w: float | NA
    driver_version: str | NA
    cuda_version: str | NA  # highest CUDA the driver supports (not torch's runtime)


@dataclass(frozen=True)
class SoftwareInfo:
    os: str
    python: str
    torch: str | NA
    numpy: str | NA
    cuda_runtime: str | NA  # torch.version.cuda
    cudnn: str | NA


@dataclass(frozen=True)
class MachineInfo:
    cpu: CpuInfo
    memory: MemoryInfo
    disk: DiskInfo
    accelerators: list[AcceleratorInfo]
    software: SoftwareInfo
    unmeasured: list[str]  # "field: reason" for every NA above, and why a device kind is absent




# --- memory and disk --------------------------------------------------------------------------------


def probe_memory() -> MemoryInfo:
    memory = psutil.virtual_memory()
    return MemoryInfo(total_bytes=int(memory.total), available_bytes=int(memory.available))


def probe_disk(data_path: str | Path = ".") -> DiskInfo:
    """The filesystem holding `data_path` (or, if it does not exist yet, its nearest existing parent)."""
    path = Path(data_path).expanduser().resolve()
    existing = next((p for p in (path, *path.parents) if p.exists()), Path(path.anchor))
    usage = attempt(f"disk usage of {existing}", lambda: psutil.disk_usage(str(existing)))
    partitions = attempt("psutil.disk_partitions", lambda: psutil.disk_partitions(all=True))
    best = None
    if not is_na(partitions):
        for partition in partitions:  # longest mountpoint that contains the path; later mounts win ties
            mount = Path(partition.mountpoint)
            deeper = best is None or len(mount.parts) >= len(Path(best.mountpoint).parts)
            if existing.is_relative_to(mount) and deeper:
                best = partition
    missing = partitions if is_na(partitions) else NA(f"no mounted filesystem found for {existing}")
    return DiskInfo(
        path=str(path),
        mountpoint=best.mountpoint if best else missing,
        filesystem_type=best.fstype if best else missing,
        device=best.device if best else missing,
        free_bytes=usage if is_na(usage) else int(usage.free),
        total_bytes=usage if is_na(usage) else int(usage.total),
    )


# --- accelerators -----------------------------------------------------------------------------------


def _read(source: Any, get: Callable[[Any], T]) -> T | NA:
    """`get(source)`, or `source` itself when it is already an NA."""
    return source if is_na(source) else attempt("unreadable", lambda: get(source))


def _nvml_index(cuda_index: int, uuid: str | NA, cuda_count: int) -> int | NA:
    """The NVML index of a CUDA device: by UUID; else by position when one device leaves no doubt."""
    found = _read(uuid, nvml.index_for_uuid)
    if not is_na(found):
        return found
    count = nvml.device_count()
    if is_na(count):
        return count
    if count == 1 and cuda_count == 1:
        return 0
    return NA(f"cannot match CUDA device {cuda_index} to an NVML device (uuid {uuid})")


def nvml_index_for_cuda(cuda_index: int) -> int | NA:
    """The NVML index of torch's CUDA device `cuda_index` (torch and NVML may number devices differently)."""
    import torch

    if not torch.cuda.is_available():
        return NA("no CUDA device")
    properties = attempt("CUDA device properties", lambda: torch.cuda.get_device_properties(cuda_index))
    if is_na(properties):
        return properties
    return _nvml_index(cuda_index, _read(properties, lambda p: str(p.uuid)), torch.cuda.device_count())


def _cuda_device(torch: Any, index: int, count: int) -> AcceleratorInfo:
    properties = attempt("torch.cuda.get_device_properties", lambda: torch.cuda.get_device_properties(index))
    nvml_index = _nvml_index(index, _read(properties, lambda p: str(p.uuid)), count)
    is_rocm = bool(getattr(torch.version, "hip", None))
    return AcceleratorInfo(
        kind="cuda", index=index,
        name=_read(properties, lambda p: p.name),
        memory_bytes=_read(properties, lambda p: int(p.total_memory)),
        compute_capability=_read(properties, lambda p: p.gcnArchName if is_rocm else f"{p.major}.{p.minor}"),
        pcie_generation_current=_read(nvml_index, nvml.pcie_generation),
        pcie_generation_max=_read(nvml_index, lambda i: nvml.pcie_generation(i, maximum=True)),
        pcie_width_current=_read(nvml_index, nvml.pcie_width),
        pcie_width_max=_read(nvml_index, lambda i: nvml.pcie_width(i, maximum=True)),
        power_limit_w=_read(nvml_index, nvml.power_limit_w),
        driver_version=nvml.driver_version(),
        cuda_version=nvml.cuda_driver_version(),
    )


def _cuda_devices(torch: Any) -> tuple[list[AcceleratorInfo], list[str]]:
    """CUDA (or ROCm) devices torch can use, or the reason there are none."""
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        seen = nvml.device_count()
        hint = (f", though the driver sees {seen} NVIDIA device(s): install a CUDA build of torch"
                if not is_na(seen) and seen > 0 else "")
        return [], [f"accelerators.cuda: torch {torch.__version__} was built without CUDA{hint}"]
    count = attempt("torch.cuda.device_count", torch.cuda.device_count)
    if is_na(count) or count == 0:
        why = count.reason if is_na(count) else "no CUDA device visible"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return [], [f"accelerators.cuda: {why}{where}"]
    return [_cuda_device(torch, index, count) for index in range(count)], []


def other_device(kind: str, index: int, name: str | NA, memory_bytes: int | NA,
                  driver_version: str | NA) -> AcceleratorInfo:
    """An MPS or XPU device: NVML's PCIe, power and CUDA fields do not apply."""
    absent = NA(f"not reported for {kind.upper()} devices")
    return AcceleratorInfo(kind=kind, index=index, name=name, memory_bytes=memory_bytes,
                           compute_capability=NA("not a CUDA device"), pcie_generation_current=absent,
                           pcie_generation_max=absent, pcie_width_current=absent, pcie_width_max=absent,
                           power_limit_w=absent, driver_version=driver_version,
                           cuda_version=NA("not a CUDA device"))


def _other_devices(torch: Any) -> tuple[list[AcceleratorInfo], list[str]]:
    """Apple MPS and Intel XPU devices."""
    devices: list[AcceleratorInfo] = []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and attempt("mps", mps.is_available) is True:
        memory = attempt("torch.mps.recommended_max_memory", lambda: int(torch.mps.recommended_max_memory()))
        devices.append(other_device("mps", 0, "Apple GPU (MPS)", memory, NA("not reported for MPS devices")))
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and attempt("xpu", xpu.is_available) is True:
        for index in range(xpu.device_count()):
            properties = attempt("torch.xpu.get_device_properties",
                                  lambda i=index: xpu.get_device_properties(i))
            devices.append(other_device("xpu", index, _read(properties, lambda p: p.name),
                                         _read(properties, lambda p: int(p.total_memory)),
                                         _read(properties, lambda p: str(p.driver_version))))
    return devices, []


def probe_accelerators() -> tuple[list[AcceleratorInfo], list[str]]:
    """Every accelerator torch can use, and lines saying why a kind is absent."""
    try:
        import torch
    except Exception as error:
        return [], [f"accelerators: torch cannot be imported ({type(error).__name__}: {error})"]
    devices: list[AcceleratorInfo] = []
    notes: list[str] = []
    for kind, find in (("cuda", _cuda_devices), ("mps/xpu", _other_devices)):
        try:
            found, why = find(torch)
        except Exception as error:  # a broken driver must not stop the rest of the probe
            found, why = [], [f"accelerators.{kind}: probing failed ({type(error).__name__}: {error})"]
        devices += found
        notes += why
    return devices, notes


# --- software and the whole machine -----------------------------------------------------------------


def _cudnn_version(torch: Any) -> str | NA:
    number = attempt("torch.backends.cudnn.version", torch.backends.cudnn.version)
    if is_na(number) or number is None:
        return number if is_na(number) else NA(f"torch {torch.__version__} has no cuDNN")
    if number >= 10000:  # cuDNN 9 and later: major*10000 + minor*100 + patch
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 100}.{number % 100}"  # cuDNN 8: major*1000 + ...


def probe_software() -> SoftwareInfo:
    numpy_version = attempt("numpy cannot be imported", lambda: __import__("numpy").__version__)
    torch = attempt("torch cannot be imported", lambda: __import__("torch"))
    if is_na(torch):
        torch_version, cuda_runtime, cudnn = torch, torch, torch
    else:
        torch_version = torch.__version__
        cuda_runtime = torch.version.cuda or NA(f"torch {torch.__version__} was built without CUDA")
        cudnn = _cudnn_version(torch)
    return SoftwareInfo(os=platform.platform(), python=platform.python_version(), torch=torch_version,
                        numpy=numpy_version, cuda_runtime=cuda_runtime, cudnn=cudnn)


def unmeasured_fields(value: Any, prefix: str = "") -> list[str]:
    """"field: reason" for every NA inside a dataclass (lists and nested dataclasses included)."""
    if is_na(value):
        return [f"{prefix}: {value.reason}"]
    lines: list[str] = []
    if isinstance(value, list):
        for index, item in enumerate(value):
            lines += unmeasured_fields(item, f"{prefix}[{index}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            name = f"{prefix}.{field.name}" if prefix else field.name
            lines += unmeasured_fields(getattr(value, field.name), name)
    return lines


def probe_machine(data_path: str | Path = ".") -> MachineInfo:
    """Probe CPU, RAM, the disk holding `data_path`, accelerators and software. Never raises for a
    reading that cannot be taken: that field is NA and listed in `unmeasured`."""
    cpu, memory, disk = probe_cpu(), probe_memory(), probe_disk(data_path)
    accelerators, notes = probe_accelerators()
    software = probe_software()
    parts = {"cpu": cpu, "memory": memory, "disk": disk, "accelerators": accelerators, "software": software}
    unmeasured = [line for name, part in parts.items() for line in unmeasured_fields(part, name)]
    return MachineInfo(cpu=cpu, memory=memory, disk=disk, accelerators=accelerators, software=software,
                       unmeasured=unmeasured + notes)
