"""The host CPU: model, identity, core counts, SIMD flags and clocks, from /proc/cpuinfo, cpufreq in /sys and psutil.

The identity is what the microarchitecture table (`cpu_table.py`, hardware/cpus.json) is keyed on: on x86 the
`vendor_id`, `cpu family` and `model` lines (decimal, as Linux prints them); on Arm the `CPU implementer` (hex, as
in "0x41"), `CPU architecture` and `CPU part` (hex, parsed to an integer) lines, put in the same three fields.

`probe_cpu()` returns a frozen `CpuInfo`; a reading that cannot be taken is `NA(reason)`. Nothing here prints
or raises. `probe.py` puts it together with the rest of the machine.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpufeed.hardware.na import NA, attempt, is_na

CPUINFO_PATH = Path("/proc/cpuinfo")
CPUFREQ_DIR = Path("/sys/devices/system/cpu/cpu0/cpufreq")
SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


@dataclass(frozen=True)
class CpuInfo:
    model: str | NA  # the model name, e.g. "AMD EPYC 9654 96-Core Processor"
    vendor: str | NA  # x86 vendor_id ("GenuineIntel", "AuthenticAMD"); Arm: "CPU implementer" ("0x41")
    family: int | NA  # x86 "cpu family" (6, 25, 26); Arm: "CPU architecture" (8)
    model_number: int | NA  # x86 "model" (143, 17); Arm: "CPU part" (0xd40 = 3392)
    physical_cores: int | NA
    logical_cores: int | NA
    usable_cores: int | NA  # logical cores this process may run on (affinity; containers restrict it)
    avx2: bool | NA
    avx512f: bool | NA
    avx512_bf16: bool | NA
    amx_tile: bool | NA
    amx_bf16: bool | NA
    max_clock_mhz: float | NA
    base_clock_mhz: float | NA
    current_clock_mhz: float | NA
    flags: tuple[str, ...] | NA  # every flag of the first CPU in /proc/cpuinfo



def _cpuinfo_value(text: str, keys: tuple[str, ...]) -> str | None:
    """The value of the first line of /proc/cpuinfo text whose key is one of `keys`."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def _integer(text: str | None) -> int | None:
    """'17' -> 17, '0xd40' -> 3392, anything else -> None."""
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def parse_cpu_identity(text: str) -> tuple[str | NA, int | NA, int | NA]:
    """(vendor, family, model number) of the first processor in /proc/cpuinfo text, x86 or Arm (see above)."""
    vendor = _cpuinfo_value(text, ("vendor_id",))
    if vendor is not None:
        keys = (("cpu family",), ("model",))
    else:
        vendor = _cpuinfo_value(text, ("CPU implementer",))
        keys = (("CPU architecture",), ("CPU part",))
    if vendor is None:
        missing = NA("no 'vendor_id' (x86) or 'CPU implementer' (Arm) line in /proc/cpuinfo")
        return missing, missing, missing
    found = []
    for key in keys:
        value = _integer(_cpuinfo_value(text, key))
        found.append(NA(f"no integer '{key[0]}' line in /proc/cpuinfo") if value is None else value)
    return vendor, found[0], found[1]


def parse_cpu_flags(text: str) -> tuple[str, ...] | NA:
    """The flags of the first processor in /proc/cpuinfo text ("flags" on x86, "Features" on Arm)."""
    value = _cpuinfo_value(text, ("flags", "Features"))
    return NA("no 'flags' line in /proc/cpuinfo") if value is None else tuple(dict.fromkeys(value.split()))


def _read_khz_as_mhz(path: Path) -> float | None:
    try:
        return int(path.read_text().strip()) / 1000.0
    except (OSError, ValueError):
        return None


def _clocks(model: str | NA) -> tuple[float | NA, float | NA, float | NA]:
    """(max, base, current) in MHz from cpufreq in /sys, psutil, or the "@ 2.10GHz" in the model name."""
    frequency = attempt("psutil.cpu_freq", psutil.cpu_freq)
    maximum: float | NA = _read_khz_as_mhz(CPUFREQ_DIR / "cpuinfo_max_freq") or NA(
        "no cpufreq maximum in /sys and psutil reports none (usual in virtual machines)")
    if is_na(maximum) and frequency and not is_na(frequency) and frequency.max > 0:
        maximum = float(frequency.max)
    base: float | NA = _read_khz_as_mhz(CPUFREQ_DIR / "base_frequency") or NA(
        "no cpufreq base_frequency in /sys and no '@ GHz' in the model name")
    found = re.search(r"@\s*([0-9.]+)\s*GHz", model) if not is_na(model) else None
    if is_na(base) and found:
        base = float(found.group(1)) * 1000.0
    current: float | NA = NA("psutil reports no current clock")
    if frequency and not is_na(frequency) and frequency.current > 0:
        current = float(frequency.current)
    return maximum, base, current


def probe_cpu(cpuinfo_text: str | None = None) -> CpuInfo:
    """The host CPU. `cpuinfo_text` replaces /proc/cpuinfo (for tests); read from disk when None."""
    if cpuinfo_text is None:
        cpuinfo_text = attempt("/proc/cpuinfo unreadable", CPUINFO_PATH.read_text)
    if is_na(cpuinfo_text):
        flags: tuple[str, ...] | NA = cpuinfo_text
        model_text = platform.processor() or None
        vendor, family, model_number = cpuinfo_text, cpuinfo_text, cpuinfo_text
    else:
        flags = parse_cpu_flags(cpuinfo_text)
        vendor, family, model_number = parse_cpu_identity(cpuinfo_text)
        model_text = _cpuinfo_value(cpuinfo_text, ("model name",)) or platform.processor() or None
    model: str | NA = model_text or NA("no 'model name' in /proc/cpuinfo and platform.processor() is empty")
    if is_na(flags) and platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        flags = ()  # not an x86 CPU: it has none of the x86 SIMD flags
    simd = {name: flags if is_na(flags) else name in flags for name in SIMD_FLAGS}
    maximum, base, current = _clocks(model)
    return CpuInfo(
        model=model, vendor=vendor, family=family, model_number=model_number,
        physical_cores=psutil.cpu_count(logical=False) or NA("psutil cannot count physical cores here"),
        logical_cores=os.cpu_count() or NA("os.cpu_count() returned None"),
        usable_cores=attempt("os.sched_getaffinity", lambda: len(os.sched_getaffinity(0))),
        **simd, max_clock_mhz=maximum, base_clock_mhz=base, current_clock_mhz=current, flags=flags)
