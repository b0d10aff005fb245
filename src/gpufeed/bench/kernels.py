"""Kernel throughput: square matmuls over a sweep of sizes and one convolution layer, per precision.

FLOPs per call come from `torch.utils.flop_counter.FlopCounterMode` (a multiply-add counts 2), seconds from
`measure.timing.time_call` (CUDA events on a GPU, the wall clock elsewhere), inputs from `torch.randn` (never
zeros, which some hardware multiplies faster). tf32 is fp32 storage with `torch.backends.cuda.matmul.allow_tf32`
and `torch.backends.cudnn.allow_tf32` set for that measurement; fp32 runs with both off; both are restored after
each measurement (hardware/tf32.py) and recorded in every CUDA result. A precision the device cannot run is not
measured: the second value returned lists it as "what: why".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil
import torch
from torch.utils.flop_counter import FlopCounterMode

from gpufeed.bench.budget import NO_BUDGET, Budget, OverBudget, budgeted_timing
from gpufeed.bench.results import KernelResult
from gpufeed.hardware.devices import device_label
from gpufeed.hardware.na import NA, is_na
from gpufeed.hardware.peak import NO_TF32_ON_CPUS
from gpufeed.hardware.precisions import PRECISION_SPECS, PRECISIONS
from gpufeed.hardware.tf32 import tf32_flags
from gpufeed.units import bytes_text

DTYPES = {name: spec.compute_dtype for name, spec in PRECISION_SPECS.items()}  # the matrix products' dtype
CPU_SIZES = (128, 256, 512, 1024)  # quick: seconds on a few cores
GPU_SIZES = (1024, 2048, 4096, 8192)
MEMORY_FRACTION = 0.25  # the most of the free memory one measurement may allocate
PeakTable = Mapping[tuple[str, str], float | None]


def default_sizes(device: torch.device | str) -> tuple[int, ...]:
    """Matmul sizes for a sweep: a quick one on a CPU, large enough to fill a GPU elsewhere."""
    return CPU_SIZES if torch.device(device).type == "cpu" else GPU_SIZES


def count_flops(call: Callable[[], Any]) -> int:
    """FLOPs of one `call()` as torch's flop counter sees them (it runs the call once)."""
    with FlopCounterMode(display=False) as counter:
        call()
    return int(counter.get_total_flops())


def unsupported_reason(device: torch.device | str, precision: str) -> str | None:
    """Why `device` cannot run `precision`, or None when it can (as far as can be told without trying)."""
    device = torch.device(device)
    if precision not in DTYPES:
        return f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})"
    if precision == "tf32" and device.type != "cuda":
        return NO_TF32_ON_CPUS if device.type == "cpu" else f"TF32 is a CUDA setting; none on {device.type}"
    if device.type == "mps" and precision == "fp64":
        return "MPS has no float64"
    if device.type == "cuda" and not torch.version.hip:
        major, minor = torch.cuda.get_device_capability(device)
        if precision == "tf32" and major < 8:
            return f"TF32 needs compute capability 8.0 or newer (Ampere); this device is {major}.{minor}"
        if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
            return f"no native bf16 on compute capability {major}.{minor} (torch would emulate it)"
    return None



def free_memory_bytes(device: torch.device | str) -> int | NA:
    """Bytes free on `device`: the CUDA allocator's view on a GPU, available RAM on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        return int(psutil.virtual_memory().available)
    return NA(f"free memory not readable on {device.type}")


def cap_sizes_for_memory(sizes: Sequence[int], precision: str, free_bytes: int | NA,
                         fraction: float = MEMORY_FRACTION) -> tuple[list[int], list[str]]:
    """The matmul sizes whose three n×n operands fit in `fraction` of `free_bytes`, and a line for each that
    does not. All sizes are kept when the free memory is unknown."""
    if is_na(free_bytes):
        return list(sizes), []
    element_bytes = torch.empty((), dtype=DTYPES[precision]).element_size()
    kept, dropped = [], []
    for n in sizes:
        needed = 3 * n * n * element_bytes
        if needed <= fraction * free_bytes:
            kept.append(n)
        else:
            dropped.append(f"{n} x {n} x {n}: needs {bytes_text(needed, 'GiB', 2, grouped=False)}, over "
                           f"{fraction:.0%} of the {bytes_text(free_bytes, 'GiB', 2, grouped=False)} free")
    return kept, dropped


def _error_line(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first[:200]}"


def with_fractions_of_peak(kernels: list[KernelResult], peaks: PeakTable) -> list[KernelResult]:
    """The kernels with their fractions of peak computed again against `peaks` (after `proven_peaks`)."""
    return [dataclasses.replace(k, fraction_of_peak=_fraction(peaks, k.device, k.precision, k.tflops))
            for k in kernels]


def _fraction(peaks: PeakTable | None, label: str, precision: str, tflops: float) -> float | None:
    peak = (peaks or {}).get((label, precision))
    return tflops / peak if isinstance(peak, (int, float)) and peak > 0 else None


def _measure(op: str, device: torch.device, precision: str, size: str, call: Callable[[], Any],
             peaks: PeakTable | None, timing_options: dict[str, Any]) -> KernelResult:
    """FLOPs and seconds of `call` under the precision's TF32 setting, as a KernelResult."""
    label = device_label(device)
    with tf32_flags(device, precision) as (tf32_matmul, tf32_cudnn):
        flops = count_flops(call)
        timing = budgeted_timing(call, device, **timing_options)
    tflops = flops / timing.median_s / 1e12 if timing.median_s > 0 else 0.0
    return KernelResult(op=op, device=label, precision=precision, size=size, flops=flops,
                        seconds_median=timing.median_s, seconds_min=timing.min_s, seconds_max=timing.max_s,
                        runs=timing.runs, tflops=tflops, fraction_of_peak=_fraction(peaks, label, precision, tflops),
                        tf32_matmul=tf32_matmul, tf32_cudnn=tf32_cudnn, spread=timing.spread,
                        seconds=timing.seconds)


def _random(shape: tuple[int, ...], precision: str, device: torch.device, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(DTYPES[precision])


def _matmul_one(device: torch.device, precision: str, n: int, peaks: PeakTable | None,
                timing_options: dict[str, Any]) -> KernelResult:
    """One n×n×n matmul measured; its operands are freed on return."""
    a, b = _random((n, n), precision, device, seed=1), _random((n, n), precision, device, seed=2)
    out = torch.empty((n, n), device=device, dtype=DTYPES[precision])
    return _measure("matmul", device, precision, f"{n} x {n} x {n}", lambda: torch.mm(a, b, out=out), peaks,
                    timing_options)


def matmul_sweep(device: torch.device | str, precisions: Sequence[str] = PRECISIONS,
                 sizes: Sequence[int] | None = None, peaks: PeakTable | None = None, repeats: int = 10,
                 warmup: int = 3, min_seconds: float = 0.05, memory_fraction: float = MEMORY_FRACTION,
                 max_call_s: float = 2.0, budget: Budget = NO_BUDGET) -> tuple[list[KernelResult], list[str]]:
    """Square matmuls M = N = K = n for each n in `sizes` (default: `default_sizes(device)`) and each precision.

    Returns the results and the "what: why" lines for what was not measured: a precision the device cannot run,
    a size over `memory_fraction` of the free memory, and the sizes from the first whose call, predicted from the
    last measured one (time ∝ n³), would take over `max_call_s` (a slow precision, such as fp64 on a consumer GPU),
    and those `budget` leaves out (bench/budget.py).
    `peaks` maps (device label, precision) to TFLOP/s for `fraction_of_peak` (see `hardware.peak.peak_table`)."""
    device = torch.device(device)
    label, timing_options = device_label(device), {"warmup": warmup, "repeats": repeats, "min_seconds": min_seconds,
                                                   "budget": budget}
    results: list[KernelResult] = []
    unmeasured: list[str] = []
    for precision in precisions:
        reason = unsupported_reason(device, precision)
        if reason is not None:
            unmeasured.append(f"matmul {precision} on {label}: {reason}")
            continue
        kept, dropped = cap_sizes_for_memory(sizes or default_sizes(device), precision, free_memory_bytes(device),
                                             memory_fraction)
        unmeasured += [f"matmul {precision} on {label} at {line}" for line in dropped]
        for position, n in enumerate(kept):
            left = f"matmul {precision} on {label} at {', '.join(map(str, kept[position:]))}"
            if budget.spent():
                unmeasured.append(f"{left}: {budget.spent_reason()}")
                break
            try:
                result = _matmul_one(device, precision, n, peaks, timing_options)
            except OverBudget as skipped:  # the larger sizes would take longer still
                unmeasured.append(f"{left}: {skipped}")
                break
            except (RuntimeError, TypeError) as error:  # "not implemented for 'Half'", out of memory, ...
                unmeasured.append(f"matmul {precision} on {label} at {n} x {n} x {n}: {_error_line(error)}")
                break
            results.append(result)
            later = kept[position + 1:]
            predicted_s = result.seconds_median * (later[0] / n) ** 3 if later else 0.0
            if predicted_s > max_call_s:  # the time of a matmul grows as n³
                unmeasured.append(f"matmul {precision} on {label} at {', '.join(map(str, later))}: skipped, "
                                  f"{later[0]} would take about {predicted_s:.2f} s per call (over {max_call_s} s)")
                break
    return results, unmeasured


def conv_benchmark(device: torch.device | str, precisions: Sequence[str] = PRECISIONS,
                   peaks: PeakTable | None = None, batch: int = 64, in_channels: int = 64, out_channels: int = 64,
                   height_width: int = 32, kernel: int = 3, repeats: int = 10, warmup: int = 3,
                   min_seconds: float = 0.05, budget: Budget = NO_BUDGET) -> tuple[list[KernelResult], list[str]]:
    """One conv2d layer, forward only: (batch, in_channels, height_width²) input, kernel×kernel, stride 1, padding
    kernel // 2 ("same" for an odd kernel), channels_last, no bias. On CUDA, cuDNN autotunes
    (`cudnn.benchmark`) during the measurement; the setting is restored after. `budget` as for `matmul_sweep`."""
    device = torch.device(device)
    label, timing_options = device_label(device), {"warmup": warmup, "repeats": repeats, "min_seconds": min_seconds,
                                                   "budget": budget}
    size = f"{batch}, {in_channels}->{out_channels} channels, {height_width}x{height_width}, {kernel}x{kernel}"
    results: list[KernelResult] = []
    unmeasured: list[str] = []
    saved_benchmark = torch.backends.cudnn.benchmark
    for precision in precisions:
        reason = unsupported_reason(device, precision)
        if budget.spent():
            reason = budget.spent_reason()
        if reason is not None:
            unmeasured.append(f"conv2d {precision} on {label}: {reason}")
            continue
        try:
            torch.backends.cudnn.benchmark = device.type == "cuda" or saved_benchmark
            x = _random((batch, in_channels, height_width, height_width), precision, device, seed=1)
            weight = _random((out_channels, in_channels, kernel, kernel), precision, device, seed=2)
            x, weight = x.to(memory_format=torch.channels_last), weight.to(memory_format=torch.channels_last)
            results.append(_measure("conv2d", device, precision, size,
                                    lambda x=x, w=weight: torch.nn.functional.conv2d(x, w, padding=kernel // 2),
                                    peaks, timing_options))
        except OverBudget as skipped:
            unmeasured.append(f"conv2d {precision} on {label}: {skipped}")
        except (RuntimeError, TypeError) as error:
            unmeasured.append(f"conv2d {precision} on {label}: {_error_line(error)}")
        finally:
            torch.backends.cudnn.benchmark = saved_benchmark
    return results, unmeasured
