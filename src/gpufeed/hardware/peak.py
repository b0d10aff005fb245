"""Peak dense FLOP/s per precision: a CPU's from its microarchitecture, cores and clock, a GPU's from the catalog.

A CPU's peak is physical cores × clock × FLOPs per cycle per core. The FLOPs per cycle come from the CPU's row in
`hardware/cpus.json` (`hardware.cpu_table`: keyed on vendor, family and model, each row sourced and dated), for the
fastest instruction set the row lists that the CPU's flags show (a VM may hide AVX-512 or AMX). A CPU without a
row gets the figure of its fastest instruction set (`CPU_FLOPS_PER_CYCLE`), which assumes two FMA units of that
width per core, the most any x86 core has: printed as an upper bound, since Zen 4 runs AVX-512 on 256-bit units
and a Xeon Silver has one 512-bit FMA unit (half the figure). A fused multiply-add counts as 2 FLOPs. Two things
neither the flags nor the table can say, and what is assumed instead:
- the clock under load: the max (turbo) clock when known, else the base clock, else the current clock as psutil
  reads it (in a VM, usually the nominal clock); heavy AVX-512 and AMX code often runs below the max, so a peak
  at the max clock is optimistic, while one at the base or current clock can be exceeded under turbo. A figure
  above its peak proves a faster clock: bench recomputes the CPU's peaks at the clock its measurements prove
  (`proven_peaks`), then "at least" that, so that no figure is above 100% of its peak;
- that every physical core runs the kernel (hyper-threads share a core's FMA units, so they add nothing).
A GPU's peak is the dense figure of its row in `hardware/gpus.json` (sourced and dated), or unknown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from gpufeed.hardware.cpu_table import find_cpu_row
from gpufeed.hardware.na import NA, is_na
from gpufeed.hardware.precisions import PRECISIONS
from gpufeed.hardware.probe import CpuInfo


@dataclass(frozen=True)
class Peak:
    device: str
    precision: str
    tflops: float | None  # dense, not sparse
    derivation: str  # how it was obtained, or why it is unknown
    upper_bound: bool = False  # no row for this CPU in hardware/cpus.json: the most its instruction set allows
    lower_bound: bool = False  # at a clock the measurements prove (`proven_peaks`): the peak is at least this
    clock_mhz: float | None = None  # a CPU's clock the figure assumes
    clock: str | None = None  # which clock: "max", "base", "current" (as the OS gives them) or "proven"

    def bound_word(self, of_peak: bool = False) -> str:
        """'at most ' / 'at least ' before the peak (`of_peak`: before a fraction of it, the other way), or ''."""
        if self.upper_bound == self.lower_bound:
            return ""
        return "at most " if self.upper_bound != of_peak else "at least "


class IsaRate(NamedTuple):
    flag: str  # as /proc/cpuinfo names it
    name: str  # as people name it
    flops_per_cycle: int  # per core
    factors: str  # how flops_per_cycle is made up


# For each precision, the instruction sets that compute it, fastest first. FLOPs per cycle per core.
CPU_FLOPS_PER_CYCLE: dict[str, tuple[IsaRate, ...]] = {
    "fp64": (IsaRate("avx512f", "AVX-512", 32, "2 FMA units × 8 lanes × 2"),
             IsaRate("avx2", "AVX2 with FMA3", 16, "2 FMA units × 4 lanes × 2")),
    "fp32": (IsaRate("avx512f", "AVX-512", 64, "2 FMA units × 16 lanes × 2"),
             IsaRate("avx2", "AVX2 with FMA3", 32, "2 FMA units × 8 lanes × 2")),
    # TDPBF16PS: C[16×16 fp32] += A[16×32 bf16] · B[32×16 bf16] is 16×16×32 = 8,192 multiply-adds = 16,384 FLOPs,
    # and the tile unit issues one every 16 cycles. VDPBF16PS: each of 16 fp32 lanes adds 2 bf16 products (4 FLOPs).
    "bf16": (IsaRate("amx_bf16", "AMX-BF16", 1024, "TDPBF16PS: 16×16×32 multiply-adds × 2 per 16 cycles"),
             IsaRate("avx512_bf16", "AVX-512 BF16", 128, "VDPBF16PS: 2 FMA units × 16 fp32 lanes × 2 products × 2")),
    "fp16": (IsaRate("amx_fp16", "AMX-FP16", 1024, "TDPFP16PS: 16×16×32 multiply-adds × 2 per 16 cycles"),
             IsaRate("avx512_fp16", "AVX512-FP16", 128, "2 FMA units × 32 fp16 lanes × 2")),
}
NO_TF32_ON_CPUS = "no TF32 on CPUs"
ISA_NAMES = {rate.flag: rate.name for rates in CPU_FLOPS_PER_CYCLE.values() for rate in rates} | {
    "asimd": "NEON (ASIMD)", "sve": "SVE"}


def _has_flag(cpu: CpuInfo, flag: str) -> bool | NA:
    """Whether the CPU has `flag`: its CpuInfo field when there is one, else its flag list."""
    value = getattr(cpu, flag, None)
    if value is not None:
        return value
    return cpu.flags if is_na(cpu.flags) else flag in cpu.flags


def _fastest_rate(cpu: CpuInfo, precision: str) -> IsaRate | NA:
    """The fastest instruction set the CPU has for `precision`, or why there is none."""
    rates = CPU_FLOPS_PER_CYCLE[precision]
    for rate in rates:
        has = _has_flag(cpu, rate.flag)
        if is_na(has):
            return NA(f"CPU flags unreadable ({has.reason})")
        if has:
            return rate
    names = " or ".join(rate.flag for rate in rates)
    return NA(f"no {names} instructions on this CPU, so no native {precision} rate")


def _clock_mhz(cpu: CpuInfo) -> tuple[float, str] | NA:
    """The clock the peak assumes, and which one it is: max if known, else base, else current."""
    readings = (("max", cpu.max_clock_mhz), ("base", cpu.base_clock_mhz), ("current", cpu.current_clock_mhz))
    unknown: list[str] = []
    for name, value in readings:
        if not is_na(value) and value > 0:
            note = f"{name} clock" + (f"; {' and '.join(unknown)} unknown, turbo may exceed it" if unknown else "")
            return float(value), note
        unknown.append(name)
    return NA("no CPU clock readable (" + "; ".join(f"{name}: {value}" for name, value in readings) + ")")


def _table_rate(cpu: CpuInfo, precision: str) -> tuple[int, str, bool] | NA:
    """(FLOPs per cycle per core, how they are made up, whether only an upper bound) for `precision`: from the
    CPU's row in hardware/cpus.json, else from its fastest instruction set as an upper bound."""
    row = find_cpu_row(cpu)
    if is_na(cpu.flags):
        return NA(f"CPU flags unreadable ({cpu.flags.reason})")
    if not is_na(row):
        found = row.rate(precision, lambda flag: _has_flag(cpu, flag) is True)
        if found is None:
            listed = [flag for flag, _ in row.flops_per_cycle.get(precision, ())]
            needs = f" (it needs {' or '.join(listed)})" if listed else ""
            return NA(f"no native {precision} rate on {row.name}{needs}, from hardware/cpus.json")
        flag, flops = found
        source = row.sources[0]
        return flops, (f"{ISA_NAMES.get(flag, flag)} on {row.name}: {row.units}; hardware/cpus.json after "
                       f"{source.url}, {source.date}"), False
    rate = _fastest_rate(cpu, precision)
    if is_na(rate):
        return NA(f"{rate.reason}; {row.reason}")
    return rate.flops_per_cycle, f"{rate.name}, {rate.factors}", True


def cpu_peak(cpu: CpuInfo, precision: str, device: str = "cpu") -> Peak:
    """The peak of `cpu` for one precision, with the arithmetic in `derivation`; `upper_bound` when the CPU has no
    row in hardware/cpus.json and the figure assumes the most FMA units its instruction set allows."""
    if precision == "tf32":
        return Peak(device, precision, None, NO_TF32_ON_CPUS)
    if precision not in CPU_FLOPS_PER_CYCLE:
        return Peak(device, precision, None, f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    cores = cpu.physical_cores
    if is_na(cores):
        return Peak(device, precision, None, f"physical core count unknown: {cores.reason}")
    clock = _clock_mhz(cpu)
    if is_na(clock):
        return Peak(device, precision, None, clock.reason)
    rate = _table_rate(cpu, precision)
    if is_na(rate):
        return Peak(device, precision, None, rate.reason)
    (mhz, clock_note), (flops_per_cycle, how, upper) = clock, rate
    tflops = cores * mhz * 1e6 * flops_per_cycle / 1e12
    derivation = (f"{cores} cores × {mhz / 1000:.2f} GHz ({clock_note}) × {flops_per_cycle} {precision} "
                  f"FLOPs/cycle ({how}) = {tflops:.3f} TFLOP/s")
    if upper:
        derivation = f"upper bound ({find_cpu_row(cpu).reason}): {derivation}"
    return Peak(device, precision, tflops, derivation, upper_bound=upper, clock_mhz=mhz,
                clock=clock_note.split(" ", 1)[0])


def proven_peaks(peaks: Iterable[Peak], measured: Iterable[tuple[str, str, float, str]]) -> list[Peak]:
    """The CPU peaks again at the clock the measurements prove, when a figure beats its peak at the clock read.

    `measured` is (device, precision, TFLOP/s, what) per figure. A figure at X% of a peak computed at clock C
    proves the cores ran at X% × C at least (the FLOPs per cycle being the most the core does); the fastest such
    clock over every precision, when above C, replaces it in every CPU peak, which is then `lower_bound` ("at
    least"), so no figure is above 100% of its peak. GPU peaks and peaks no figure beats are returned unchanged.
    Without a max clock from the OS (no cpufreq in most VMs) the clock read is the base or current one, and
    turbo beats it."""
    peaks = list(peaks)
    by_key = {(peak.device, peak.precision): peak for peak in peaks}
    best_mhz, proof = 0.0, ""
    for device, precision, tflops, what in measured:
        peak = by_key.get((device, precision))
        if peak is None or peak.tflops is None or peak.clock_mhz is None or peak.tflops <= 0:
            continue
        implied = peak.clock_mhz * tflops / peak.tflops
        if implied > best_mhz:
            best_mhz, proof = implied, f"{what} ran at {tflops:.3f} TFLOP/s, {tflops / peak.tflops:.0%} of its peak"
    raised = []
    for peak in peaks:
        if peak.tflops is None or peak.clock_mhz is None or best_mhz <= peak.clock_mhz:
            raised.append(peak)
            continue
        tflops = peak.tflops * best_mhz / peak.clock_mhz
        derivation = (f"at least {tflops:.3f} TFLOP/s at {best_mhz / 1000:.2f} GHz, the clock the measurements "
                      f"prove ({proof} at the {peak.clock} clock {peak.clock_mhz / 1000:.2f} GHz); at the "
                      f"{peak.clock} clock: {peak.derivation}")
        raised.append(dataclasses.replace(peak, tflops=tflops, derivation=derivation, lower_bound=True,
                                          clock_mhz=best_mhz, clock="proven"))
    return raised


def cpu_peaks(cpu: CpuInfo, device: str = "cpu") -> list[Peak]:
    """The CPU's peak for every precision in `PRECISIONS` (tf32: unknown, no CPU has it)."""
    return [cpu_peak(cpu, precision, device) for precision in PRECISIONS]


def gpu_peaks(device_name: str, device: str = "cuda:0") -> list[Peak]:
    """The dense peak of the GPU named `device_name` (as torch names it) for every precision, from the catalog;
    `device` is the label the peaks carry (the device string of the kernel results they go with)."""
    try:
        from gpufeed.hardware import catalog

        spec = catalog.find_gpu(device_name)
    except (ImportError, OSError, ValueError) as error:  # no catalog, or one that does not load
        return [Peak(device, precision, None, f"GPU catalog unavailable ({error})") for precision in PRECISIONS]
    peaks = []
    for precision in PRECISIONS:
        value = catalog.peak_tflops(spec, precision)
        if is_na(value):
            peaks.append(Peak(device, precision, None, value.reason))
            continue
        derivation = (f"{value:g} dense {precision} TFLOP/s for {spec.name} (matched {device_name!r}) in "
                      f"hardware/gpus.json; source {spec.source}, compiled {spec.source_date}")
        peaks.append(Peak(device, precision, float(value), derivation))
    return peaks


def peak_table(peaks: Iterable[Peak]) -> dict[tuple[str, str], float | None]:
    """{(device, precision): TFLOP/s or None}: the form `bench.kernels` takes to compute fractions of peak."""
    return {(peak.device, peak.precision): peak.tflops for peak in peaks}
