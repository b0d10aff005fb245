"""The host-device link: how fast bytes cross it (H2D and D2H, pageable and pinned) against what the PCIe link
NVML reports could carry (hardware/pcie.py), and what a narrow link means for feeding a GPU.

Figures are GB/s = 1e9 bytes per second, one direction, median over timed copies (CUDA events).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from gpufeed.bench.results import LinkResult
from gpufeed.errors import ConfigError
from gpufeed.hardware import nvml
from gpufeed.hardware.na import NA, is_na
from gpufeed.hardware.pcie import NARROW_THEORETICAL_GB_PER_S, pcie_theoretical_gb_per_s
from gpufeed.hardware.probe import nvml_index_for_cuda
from gpufeed.measure.timing import time_call
from gpufeed.units import bytes_as

MIB = 1 << 20

NARROW_MEASURED_GB_PER_S = 6.0  # pinned host-to-device below this is narrow whatever the link reports
PAGEABLE_SLOWDOWN = 1.5  # pinned this many times faster than pageable (same direction and size) is flagged


@dataclass
class LinkReading:
    """PCIe generation and width as NVML reports them, read right after each timed copy; the fastest reading
    counts, because an idle link drops to a lower generation to save power."""

    nvml_index: int | NA
    readings: list[tuple[int | NA, int | NA]] = field(default_factory=list)

    def read(self) -> None:
        if not is_na(self.nvml_index):
            self.readings.append((nvml.pcie_generation(self.nvml_index), nvml.pcie_width(self.nvml_index)))

    def theoretical(self) -> tuple[float | None, str | None]:
        """GB/s, or None and the line for `unmeasured`."""
        if is_na(self.nvml_index):
            return None, f"host-device link theoretical GB/s: {self.nvml_index.reason}"
        for position, what in ((0, "generation"), (1, "width")):
            values = [reading[position] for reading in self.readings]
            if not values or all(is_na(value) for value in values):
                why = values[-1].reason if values else "no copy was timed"
                return None, f"host-device link theoretical GB/s: PCIe {what} unknown ({why})"
        generation = max(g for g, _ in self.readings if not is_na(g))
        width = max(w for _, w in self.readings if not is_na(w))
        try:
            return pcie_theoretical_gb_per_s(generation, width), None
        except ConfigError as error:
            return None, f"host-device link theoretical GB/s: {error}"


def _copy_buffers(device: torch.device, size: int, pinned: bool) -> tuple[torch.Tensor, torch.Tensor]:
    host = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(1)  # touch every page, so that first-touch faults are not timed
    return host, torch.ones(size, dtype=torch.uint8, device=device)


def _time_copies(device: torch.device, size: int, pinned: bool, repeats: int,
                 reading: LinkReading) -> list[tuple[str, float, int, tuple[float, ...]]]:
    """(direction, GB/s, runs, each copy's seconds) for both directions from one host buffer."""
    host, on_device = _copy_buffers(device, size, pinned)
    measured = []
    for direction, source, target in (("host_to_device", host, on_device), ("device_to_host", on_device, host)):
        timing = time_call(lambda s=source, t=target: t.copy_(s, non_blocking=pinned), device, repeats=repeats)
        reading.read()  # right after the copies, while the link is still at speed
        measured.append((direction, size / timing.median_s / 1e9, timing.runs, timing.seconds))
    return measured


def measure_link(device: torch.device | str, sizes_bytes: Sequence[int] = (64 * MIB,),
                 repeats: int = 10) -> tuple[list[LinkResult], list[str]]:
    """Host-to-device and device-to-host copies of each size, from pageable and from pinned host memory, timed
    with CUDA events; each result carries the PCIe figure for the generation and width NVML reports (None when
    unknown, with the reason in the second list, which also names whatever could not be copied)."""
    device = torch.device(device)
    if device.type == "cpu":
        return [], ["host-device link: the device is the CPU; there is no link to measure"]
    if device.type != "cuda":
        return [], [f"host-device link: measured on CUDA devices only, and {device} is not one"]
    if not torch.cuda.is_available():
        return [], [f"host-device link: {device} asked for, but torch {torch.__version__} sees no CUDA device here"]
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    reading = LinkReading(nvml_index_for_cuda(device.index))
    measured: list[tuple[str, bool, int, float, int, tuple[float, ...]]] = []
    unmeasured: list[str] = []
    for size in sizes_bytes:
        for pinned in (False, True):
            try:
                copies = _time_copies(device, int(size), pinned, repeats, reading)
            except RuntimeError as error:  # out of memory, pinning refused
                memory = "pinned" if pinned else "pageable"
                unmeasured.append(f"host-device link, {memory}, {size} bytes: {str(error).splitlines()[0]}")
                torch.cuda.empty_cache()
                continue
            measured += [(direction, pinned, int(size), gb_per_s, runs, seconds)
                         for direction, gb_per_s, runs, seconds in copies]
    theoretical, why = reading.theoretical()
    if why is not None:
        unmeasured.append(why)
    results = [LinkResult(direction=direction, pinned=pinned, bytes=size, gb_per_s=gb_per_s, runs=runs,
                          theoretical_gb_per_s=theoretical, seconds=seconds)
               for direction, pinned, size, gb_per_s, runs, seconds in measured]
    return results, unmeasured


def _narrow_link_advice(results: Sequence[LinkResult]) -> list[str]:
    theoretical = [r.theoretical_gb_per_s for r in results if r.theoretical_gb_per_s is not None]
    pinned_h2d = [r.gb_per_s for r in results if r.pinned and r.direction == "host_to_device"]
    narrow_theoretical = bool(theoretical) and min(theoretical) <= NARROW_THEORETICAL_GB_PER_S
    narrow_measured = bool(pinned_h2d) and max(pinned_h2d) < NARROW_MEASURED_GB_PER_S
    if not (narrow_theoretical or narrow_measured):
        return []
    evidence = []
    if theoretical:
        evidence.append(f"PCIe {min(theoretical):.2f} GB/s theoretical")
    if pinned_h2d:
        evidence.append(f"{max(pinned_h2d):.2f} GB/s measured pinned host to device")
    return [
        f"The host-device link is narrow ({', '.join(evidence)}; a Thunderbolt eGPU is about PCIe 3.0 x4): every "
        f"batch that crosses it costs time the GPU may spend waiting.",
        "Send batches as uint8 and convert on the device: float32 is 4x the bytes over this link.",
        "Keep the dataset on the device when it fits in its memory: then no batch crosses the link after the "
        "first copy.",
    ]


def _pageable_advice(results: Sequence[LinkResult]) -> list[str]:
    pinned = {(r.direction, r.bytes): r.gb_per_s for r in results if r.pinned}
    lines = []
    for result in results:
        fast = pinned.get((result.direction, result.bytes))
        if result.pinned or fast is None or fast < PAGEABLE_SLOWDOWN * result.gb_per_s:
            continue
        direction = result.direction.replace("_", " ")
        lines.append(f"Copies {direction} from pageable memory ran at {result.gb_per_s:.2f} GB/s against "
                     f"{fast:.2f} GB/s from pinned memory ({bytes_as(result.bytes, 'MiB'):g} MiB): stage batches in "
                     f"pinned memory (pin_memory=True) and copy with non_blocking=True.")
    return lines


def link_advice(results: Sequence[LinkResult]) -> list[str]:
    """Sentences for a person, one finding each: a narrow link (theoretical at most 8 GB/s, or pinned
    host-to-device measured under 6 GB/s) and what to do about it; pageable copies much slower than pinned.
    Empty for a healthy link (or no results)."""
    return _narrow_link_advice(results) + _pageable_advice(results)
