"""NVIDIA device queries through NVML that return a value or `NA(reason)` and never raise.

`pynvml` (package nvidia-ml-py) is imported on first use and `nvmlInit` is called once per process;
the outcome is cached. When either fails (package missing, no driver, no GPU), every query returns
`NA("NVML not available: <reason>")`. A query that the device does not support returns an `NA` that
names the field, the device and NVML's own message.

Devices are addressed by NVML index, which follows PCI bus order and ignores `CUDA_VISIBLE_DEVICES`;
it can differ from the CUDA index torch uses. Map one to the other with `index_for_uuid`.

Each function's docstring gives its unit and the `nvidia-smi --query-gpu=` field it matches.
GPM metrics (SM activity, occupancy, tensor activity on Hopper and newer) are in gpm.py, which uses the loading
and the error descriptions here.
Safe to call from several threads (the background sampler does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from gpufeed.hardware.na import NA, is_na

T = TypeVar("T")

_lock = threading.Lock()
_library: Any = None  # None: not tried yet; the initialised pynvml module; or NA (why it failed)


def describe_error(error: BaseException) -> str:
    text = str(error).strip()
    if type(error).__name__.startswith("NVMLError") and text:
        return text  # NVML's messages read well alone: "Not Supported", "Driver Not Loaded"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _initialise() -> Any:
    try:
        import pynvml
    except ImportError as error:
        return NA(f"NVML not available: pynvml (package nvidia-ml-py) cannot be imported ({error})")
    try:
        pynvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, OSError...
        return NA(f"NVML not available: {describe_error(error)}")
    return pynvml


def load_library() -> Any:
    """The initialised pynvml module, or the `NA` that says why there is none (tried once)."""
    global _library
    with _lock:
        if _library is None:
            _library = _initialise()
        return _library


def _query_system(field: str, read: Callable[[Any], T]) -> T | NA:
    library = load_library()
    if is_na(library):
        return library
    try:
        return read(library)
    except Exception as error:
        return NA(f"{field} unreadable through NVML: {describe_error(error)}")


def _query(index: int, field: str, read: Callable[[Any, Any], T]) -> T | NA:
    library = load_library()
    if is_na(library):
        return library
    try:
        handle = library.nvmlDeviceGetHandleByIndex(index)
        return read(library, handle)
    except Exception as error:
        return NA(f"{field} unreadable on NVML device {index}: {describe_error(error)}")


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def device_count() -> int | NA:
    """Number of NVIDIA devices the driver sees (all of them, not only CUDA-visible ones). `count`."""
    return _query_system("device count", lambda nv: int(nv.nvmlDeviceGetCount()))


def device_uuid(index: int) -> str | NA:
    """The device's UUID, such as "GPU-5b3c...". `uuid`."""
    return _query(index, "uuid", lambda nv, handle: as_text(nv.nvmlDeviceGetUUID(handle)))


def _bare_uuid(uuid: str) -> str:
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def index_for_uuid(uuid: str) -> int | NA:
    """The NVML index of the device with this UUID (with or without the "GPU-" prefix)."""
    count = device_count()
    if is_na(count):
        return count
    wanted = _bare_uuid(uuid)
    for index in range(count):
        found = device_uuid(index)
        if not is_na(found) and _bare_uuid(found) == wanted:
            return index
    return NA(f"no NVML device has uuid {uuid}")


def device_name(index: int) -> str | NA:
    """Product name, such as "NVIDIA H100 80GB HBM3". `name`."""
    return _query(index, "name", lambda nv, handle: as_text(nv.nvmlDeviceGetName(handle)))


def memory_bytes(index: int, which: Literal["total", "used", "free"] = "total") -> int | NA:
    """Device memory in bytes. `memory.total`, `memory.used`, `memory.free` (nvidia-smi shows MiB)."""
    if which not in ("total", "used", "free"):
        raise ValueError(f"which must be 'total', 'used' or 'free', not {which!r}")
    return _query(index, f"memory.{which}",
                  lambda nv, handle: int(getattr(nv.nvmlDeviceGetMemoryInfo(handle), which)))


def utilization_percent(index: int, which: Literal["gpu", "memory"] = "gpu") -> int | NA:
    """Percent of the last sample period (1/6 s to 1 s) in which a kernel ran ("gpu") or device memory
    was read or written ("memory"). `utilization.gpu`, `utilization.memory`."""
    if which not in ("gpu", "memory"):
        raise ValueError(f"which must be 'gpu' or 'memory', not {which!r}")
    return _query(index, f"utilization.{which}",
                  lambda nv, handle: int(getattr(nv.nvmlDeviceGetUtilizationRates(handle), which)))


def power_usage_w(index: int) -> float | NA:
    """Power drawn by the board now, in watts (NVML reports milliwatts). `power.draw`."""
    return _query(index, "power.draw", lambda nv, handle: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)


def power_limit_w(index: int) -> float | NA:
    """Power cap in force, in watts: the lowest of the limits set by the user, the driver and the
    board (NVML reports milliwatts). `enforced.power.limit`."""
    return _query(index, "enforced.power.limit",
                  lambda nv, handle: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)


def clock_mhz(index: int, domain: Literal["sm", "memory"] = "sm", maximum: bool = False) -> int | NA:
    """Clock of the streaming multiprocessors ("sm") or of the memory ("memory"), in MHz; now, or the
    highest it can run at with `maximum=True`.
    `clocks.sm`, `clocks.mem`, `clocks.max.sm`, `clocks.max.mem`."""
    if domain not in ("sm", "memory"):
        raise ValueError(f"domain must be 'sm' or 'memory', not {domain!r}")
    field = ("clocks.max." if maximum else "clocks.") + ("sm" if domain == "sm" else "mem")

    def read(nv: Any, handle: Any) -> int:
        kind = nv.NVML_CLOCK_SM if domain == "sm" else nv.NVML_CLOCK_MEM
        reader = nv.nvmlDeviceGetMaxClockInfo if maximum else nv.nvmlDeviceGetClockInfo
        return int(reader(handle, kind))

    return _query(index, field, read)


def pcie_generation(index: int, maximum: bool = False) -> int | NA:
    """PCIe link generation (3, 4, 5...): now, or the highest this device and slot allow together
    with `maximum=True`. An idle GPU often drops to a lower generation to save power, so read the
    current value under load. `pcie.link.gen.current`, `pcie.link.gen.max`."""
    field = "pcie.link.gen.max" if maximum else "pcie.link.gen.current"

    def read(nv: Any, handle: Any) -> int:
        reader = nv.nvmlDeviceGetMaxPcieLinkGeneration if maximum else nv.nvmlDeviceGetCurrPcieLinkGeneration
        return int(reader(handle))

    return _query(index, field, read)


def pcie_width(index: int, maximum: bool = False) -> int | NA:
    """PCIe link width in lanes (x1...x16): now, or the widest this device and slot allow with
    `maximum=True`. `pcie.link.width.current`, `pcie.link.width.max`."""
    field = "pcie.link.width.max" if maximum else "pcie.link.width.current"

    def read(nv: Any, handle: Any) -> int:
        reader = nv.nvmlDeviceGetMaxPcieLinkWidth if maximum else nv.nvmlDeviceGetCurrPcieLinkWidth
        return int(reader(handle))

    return _query(index, field, read)


def driver_version() -> str | NA:
    """Version of the installed NVIDIA driver, such as "550.54.15". `driver_version`."""
    return _query_system("driver_version", lambda nv: as_text(nv.nvmlSystemGetDriverVersion()))


def cuda_driver_version() -> str | NA:
    """Highest CUDA version the driver supports, such as "12.4". No `--query-gpu` field: nvidia-smi
    shows it in its header as "CUDA Version"."""

    def read(nv: Any) -> str:
        number = int(nv.nvmlSystemGetCudaDriverVersion())  # 12040 for 12.4
        return f"{number // 1000}.{number % 1000 // 10}"

    return _query_system("CUDA driver version", read)
