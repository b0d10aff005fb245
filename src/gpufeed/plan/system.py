"""The rest of the machine around the GPUs: host RAM, CPU cores, disk, power supply and the PCIe link.

The machine is the system the GPUs are sold in (hosts.py: a workstation, or a 4- or 8-GPU server), sized for
all its GPUs. Every figure here is a rule of thumb with its arithmetic in words, not a measurement (except the
per-core gather rate, which `measure_gather_rate` times on this machine). Sizes are rounded up to what one can
buy, and given in GiB (2^30 bytes) throughout.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import GpuSpec
from gpufeed.hardware.pcie import NARROW_THEORETICAL_GB_PER_S, pcie_theoretical_gb_per_s
from gpufeed.plan.hosts import BoughtSystem, server_power
from gpufeed.units import bytes_text

GIB = 1 << 30
# Common totals of 1-16 DIMMs of 8-128 GB modules (DDR5 also sells 24 and 48 GB ones), GiB; above, whole TiB.
RAM_SIZES_GIB = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
# ATX power supply sizes sold by the major makers (Corsair, Seasonic, be quiet!), watts; above: two supplies.
PSU_SIZES_W = (450, 550, 650, 750, 850, 1000, 1200, 1300, 1500, 1600, 2000, 2400)
PSU_HEADROOM = 0.25  # supplies run most efficiently near half to 80% load, and GPUs spike above TDP for ms
DEFAULT_CPU_TDP_W = 150.0
DEFAULT_REST_W = 100.0  # board, RAM, disks, fans
HOUSEHOLD_CIRCUIT_W = 1440  # a 120 V 15 A circuit at the 80% continuous-load rule (North America)
WEIGHT_BYTES = 4  # fp32 master weights in a checkpoint, whatever the training precision
# fp32 optimizer state per parameter, under plan.memory's names: SGD with momentum keeps one buffer, Adam(W) two
OPTIMIZER_STATE_BYTES = {"adamw": 8, "adam": 8, "sgd": 4}
LINK_SHARE_LIMIT = 0.5  # a feed needing more than this share of the link's theoretical rate will stall the GPU
DESKTOP_CPU_GPU_LANES = 16  # lanes a desktop CPU gives its x16 slot(s): x16 for one card, x8/x8 for two


@dataclass(frozen=True)
class HostPlan:
    """What one system needs around its GPUs. Bytes are bytes, rates per second; each `*_reason` shows the rule.

    ram_bytes and ram_minimum_bytes are the requirement (twice, and once, the GPUs' memory); ram_cache_bytes is
    a choice apart from it: enough to also keep the dataset in the page cache, and ram_cache_reason says what
    that buys. system: what is bought, in words; system_gpus: GPUs in one system; systems: how many systems.
    """

    ram_bytes: int
    ram_minimum_bytes: int
    ram_reason: str
    cpu_cores: int
    cpu_reason: str
    disk_bytes: int
    disk_reason: str
    disk_read_bytes_per_s: float
    psu_watts: int
    psu_arithmetic: str
    link_notes: tuple[str, ...]
    ram_cache_bytes: int = 0
    ram_cache_reason: str = ""
    system: str = ""
    system_gpus: int = 1
    systems: int = 1
    reference_system: str | None = None
    bytes_per_sample: int = 0  # as stored on disk; the disk, page cache and link figures use it
    bytes_reason: str = ""
    decode: str = "cpu"  # where the planned machine decodes JPEG samples (cpu_cores counts that case)
    cpu_cores_other_decode: int | None = None  # the cores for the other case, for a JPEG pack (else None)
    cpu_other_decode_reason: str = ""
    gpus_used: int = 1  # of one system's system_gpus, the GPUs the job runs on: RAM, cores and power are for them


def round_ram(size_bytes: float) -> int:
    for gib in RAM_SIZES_GIB:
        if size_bytes <= gib * GIB:
            return gib * GIB
    return math.ceil(size_bytes / (1024 * GIB)) * 1024 * GIB


def host_ram(gpu_memory_bytes_total: int) -> tuple[int, int, str]:
    """(ideal, minimum, reason): at least the GPUs' total memory, ideally twice it, each rounded up to a size in
    RAM_SIZES_GIB. The dataset is not in it: keeping it in the page cache is a choice (`page_cache_ram`)."""
    minimum, ideal = round_ram(gpu_memory_bytes_total), round_ram(2 * gpu_memory_bytes_total)
    def gib(value: float, digits: int) -> str:
        return bytes_text(value, "GiB", digits, grouped=False)

    reason = (f"rule of thumb: at least the GPUs' total memory ({gib(gpu_memory_bytes_total, 1)} -> "
              f"{gib(minimum, 0)}), ideally twice it ({gib(2 * gpu_memory_bytes_total, 1)} -> "
              f"{gib(ideal, 0)}): pinned staging buffers, loader worker copies, checkpoints being written "
              f"and the framework itself all live in host memory")
    return ideal, minimum, reason


def page_cache_ram(ideal_bytes: int, dataset_bytes: int, read_bytes_per_s: float) -> tuple[int, str]:
    """(bytes, reason): the ideal RAM plus the whole dataset, rounded up, and what it buys: epochs after the
    first read from RAM instead of the disk at `read_bytes_per_s`."""
    wanted = round_ram(ideal_bytes + dataset_bytes)
    reason = (f"a choice: {bytes_text(ideal_bytes, 'GiB', 0)} + the {bytes_text(dataset_bytes)} dataset -> "
              f"{bytes_text(wanted, 'GiB', 0)} keeps it in the page cache, so every epoch after the first reads RAM, "
              f"not the disk; without it the disk must sustain {bytes_text(read_bytes_per_s, 'MiB', 0)}/s of random "
              f"reads "
              f"every epoch")
    return wanted, reason


def measure_gather_rate(bytes_per_sample: int, batch_size: int = 256, seconds: float = 0.2) -> tuple[float, str]:
    """(samples/s, how) one core gathers packed uint8 samples in random order (numpy `take`, one thread), the
    CPU's whole share of gpufeed's feed; from a 64 MiB array, so mostly from cache-missing memory."""
    rows = max((64 << 20) // max(bytes_per_sample, 1), batch_size)
    images = np.ones((rows, bytes_per_sample), dtype=np.uint8)
    batch = np.empty((batch_size, bytes_per_sample), dtype=np.uint8)
    generator = np.random.default_rng(0)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or samples == 0:
        np.take(images, generator.integers(0, rows, batch_size), axis=0, out=batch)
        samples += batch_size
    rate = samples / (time.perf_counter() - start)
    return rate, f"measured here: one core gathers {rate:,.0f} packed samples/s of {bytes_per_sample} bytes"


def cpu_cores_needed(samples_per_s_needed: float, per_core_decode_rate: float, reason: str,
                     gpus: int = 1, needed_reason: str = "") -> tuple[int, str]:
    """(cores, reason): ceil(samples/s needed / per-core rate) for the input pipeline, plus one core per GPU for
    the process that drives it. `reason` says where the per-core rate came from, `needed_reason` the rate."""
    if per_core_decode_rate <= 0:
        raise ConfigError(f"per-core decode rate must be positive, got {per_core_decode_rate}")
    feeding = math.ceil(samples_per_s_needed / per_core_decode_rate)
    cores = feeding + gpus
    needed = f" ({needed_reason})" if needed_reason else ""
    text = (f"{samples_per_s_needed:,.0f} samples/s{needed} / {per_core_decode_rate:,.0f} per core ({reason}) = "
            f"{feeding} core{'s' * (feeding != 1)} to feed, + {gpus} (one per GPU for its training process) = "
            f"{cores}")
    return cores, text


def disk(dataset_bytes: int, parameters: int, optimizer: str, checkpoints_kept: int = 3,
         source_bytes: int = 0) -> tuple[int, str]:
    """(bytes, arithmetic in GiB): the source files the dataset is packed from, the packed dataset, and
    `checkpoints_kept` checkpoints plus one being written (saves go to a temporary file, then a rename). A
    checkpoint holds fp32 weights and the optimizer's fp32 state."""
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ConfigError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    per_parameter = WEIGHT_BYTES + OPTIMIZER_STATE_BYTES[optimizer]
    checkpoint = parameters * per_parameter
    total = source_bytes + dataset_bytes + (checkpoints_kept + 1) * checkpoint
    text = (f"source files {bytes_text(source_bytes, 'GiB', 2)} + packed dataset "
            f"{bytes_text(dataset_bytes, 'GiB', 2)} + "
            f"({checkpoints_kept} kept + 1 being written) x checkpoint ({parameters:,} parameters x {per_parameter} "
            f"B: {WEIGHT_BYTES} B fp32 weights + {OPTIMIZER_STATE_BYTES[optimizer]} B {optimizer} state = "
            f"{bytes_text(checkpoint, 'GiB', 3)}) = {bytes_text(total, 'GiB', 2)}")
    return total, text


def psu_watts(gpu_tdps: list[float], cpu_tdp_w: float = DEFAULT_CPU_TDP_W, rest_w: float = DEFAULT_REST_W,
              headroom: float = PSU_HEADROOM) -> tuple[int, str]:
    """(watts, arithmetic): (sum of card TDPs + CPU + the rest) x (1 + headroom), rounded up to a size in
    PSU_SIZES_W. Beyond the largest, the load rounded up to 100 W and a note to use two supplies."""
    load = sum(gpu_tdps) + cpu_tdp_w + rest_w
    wanted = load * (1 + headroom)
    cards = " + ".join(f"{tdp:g}" for tdp in gpu_tdps) or "0"
    text = (f"GPUs {cards} W + CPU {cpu_tdp_w:g} W + rest {rest_w:g} W = {load:g} W; x {1 + headroom:g} headroom "
            f"(efficiency peaks near half load; GPUs spike above TDP for milliseconds) = {wanted:g} W")
    size = next((watts for watts in PSU_SIZES_W if watts >= wanted), None)
    if size is None:
        size = math.ceil(wanted / 100) * 100
        text += f" -> above the largest single ATX supply ({PSU_SIZES_W[-1]} W): two supplies or a server chassis"
    else:
        text += f" -> {size} W, the next size sold"
    if load > HOUSEHOLD_CIRCUIT_W:
        text += (f"; the load exceeds what a 120 V 15 A household circuit carries continuously "
                 f"({HOUSEHOLD_CIRCUIT_W} W): use a 230 V or 20 A circuit")
    return size, text


def _lane_note(gpus: int, generation: int, lanes: int, needed_gb_per_s: float) -> str:
    wanted = (f"{gpus} cards at x{lanes} want {gpus * lanes} CPU lanes; desktop CPUs give "
              f"{DESKTOP_CPU_GPU_LANES} to cards")
    if gpus > 2:
        return wanted + ": a workstation or server CPU (Threadripper, Xeon W, EPYC) gives 64-128"
    half = pcie_theoretical_gb_per_s(generation, max(lanes // 2, 1))
    return (wanted + f", so two run at x{max(lanes // 2, 1)} each: {half:.2f} GB/s, "
            f"{needed_gb_per_s / half:.0%} of it needed")


def link_notes(gpu_pcie_generation: int | None, lanes: int | None, samples_per_s: float,
               bytes_per_sample_uint8: int, gpus: int = 1) -> tuple[str, ...]:
    """Whether each GPU's link carries its batches: uint8 bytes/s needed per GPU (`samples_per_s` is per GPU)
    against the link's theoretical rate, flagged above LINK_SHARE_LIMIT; a narrow-link note; lanes for several."""
    if gpu_pcie_generation is None or lanes is None:
        return ("PCIe generation or width unknown for this card: the link was not checked",)
    link = pcie_theoretical_gb_per_s(gpu_pcie_generation, lanes)
    needed = samples_per_s * bytes_per_sample_uint8 / 1e9
    share = needed / link
    verdict = "more than half: the copies will hold the GPU back" if share > LINK_SHARE_LIMIT else "enough"
    notes = [f"each GPU needs {needed:.2f} GB/s of uint8 batches over PCIe {gpu_pcie_generation}.0 x{lanes} "
             f"({link:.2f} GB/s theoretical): {share:.0%}, {verdict}"]
    if share > LINK_SHARE_LIMIT:
        notes.append("keep the dataset in device memory when it fits (no per-step copy), or a wider link")
    if link <= NARROW_THEORETICAL_GB_PER_S:
        notes.append(f"a narrow link (a Thunderbolt eGPU is PCIe 3.0 x4, 3.94 GB/s): send uint8, never float32 "
                     f"(4x the bytes, {4 * needed:.2f} GB/s here)")
    if gpus > 1 and gpus * lanes > DESKTOP_CPU_GPU_LANES:
        notes.append(_lane_note(gpus, gpu_pcie_generation, lanes, needed))
    return tuple(notes)


@dataclass(frozen=True)
class Feeding:
    """What the input costs the host (plan/input_cost.py): bytes per sample, where the planned machine decodes,
    the per-core staging rate (samples/s, where from) and the other decode's, and what the GPU rate is."""

    bytes_per_sample: int
    bytes_reason: str = ""
    decode: str = "cpu"
    per_core_rate: tuple[float, str] | None = None  # None: the packed uint8 gather, timed here
    other_per_core_rate: tuple[float, str] | None = None
    link_bytes_per_sample: int | None = None  # what crosses PCIe a sample: decoded uint8 crops, or the JPEG bytes
    table_samples_per_s: float | None = None  # a GPU's rate in the ranked table (its band's middle)


def plan_host(spec: GpuSpec, system: BoughtSystem, dataset_bytes: int, cache_dataset: bool, parameters: int,
              optimizer: str, samples_per_s_per_gpu: float, feeding: Feeding, cpu_tdp_w: float = DEFAULT_CPU_TDP_W,
              link: tuple[int, int] | None = None, source_bytes: int = 0,
              gpus_used: int | None = None) -> HostPlan:
    """One system of `system.gpus_per_system` cards of `spec` (hosts.system_to_buy), each consuming
    `samples_per_s_per_gpu`, fed as `feeding` says. `link` is the host link (generation, lanes) when it is narrower
    than the card's own, e.g. (3, 4) for a Thunderbolt eGPU. `source_bytes`: the files the dataset is packed from,
    kept on the same disk. `gpus_used`: the GPUs of one system the job runs on (default all): RAM, cores and power
    are sized for them, not for the board's count."""
    gpus = min(gpus_used or system.gpus_per_system, system.gpus_per_system)
    bytes_per_sample = feeding.bytes_per_sample
    ram, ram_minimum, ram_reason = host_ram(spec.memory_bytes * gpus)
    rate, rate_reason = feeding.per_core_rate or measure_gather_rate(bytes_per_sample)
    feed_rate = samples_per_s_per_gpu * gpus
    needed = (f"{gpus} x {spec.name} at {samples_per_s_per_gpu:,.0f} samples/s, the fast end of its band"
              + ("" if feeding.table_samples_per_s is None else
                 f"; the table's {feeding.table_samples_per_s:,.0f} is its middle"))
    cores, cpu_reason = cpu_cores_needed(feed_rate, rate, rate_reason, gpus, needed)
    other_cores, other_reason = None, ""
    if feeding.other_per_core_rate is not None:
        other_cores, other_reason = cpu_cores_needed(feed_rate, *feeding.other_per_core_rate, gpus, needed)
    disk_bytes, disk_reason = disk(dataset_bytes, parameters, optimizer, source_bytes=source_bytes)
    read_rate = feed_rate * bytes_per_sample
    cache_bytes, cache_reason = page_cache_ram(ram, dataset_bytes, read_rate)
    reference = None
    if system.kind == "server":
        watts, arithmetic = server_power(spec.tdp_w, gpus, spec)
        if spec.reference_system and system.gpus_per_system == 8:
            shipped = bytes_text(spec.reference_system_ram_bytes, "GiB", 0)
            reference = (f"{spec.reference_system}: {spec.reference_system_power_w:,.0f} W at most, "
                         f"{shipped} RAM ({spec.reference_system_source})")
            ram_reason += f"; {spec.reference_system} ships {shipped}"
    else:
        watts, arithmetic = psu_watts([spec.tdp_w] * gpus, cpu_tdp_w)
    if gpus < system.gpus_per_system:
        idle = f" (sized for the {gpus} GPU{'s' * (gpus != 1)} the job uses; the system holds {system.gpus_per_system})"
        ram_reason, arithmetic = ram_reason + idle, arithmetic + idle
    generation, lanes = link or (spec.pcie_generation, spec.pcie_lanes)
    disk_reason += (f"; reads {bytes_text(read_rate, 'MiB', 0)}/s while the data is not in the page cache"
                    + (" (the first epoch only, with the RAM to cache it)" if cache_dataset else ""))
    notes = link_notes(generation, lanes, samples_per_s_per_gpu, feeding.link_bytes_per_sample or bytes_per_sample,
                       gpus if system.kind == "workstation" else 1)
    return HostPlan(ram_bytes=ram, ram_minimum_bytes=ram_minimum, ram_reason=ram_reason, cpu_cores=cores,
                    cpu_reason=cpu_reason, disk_bytes=disk_bytes, disk_reason=disk_reason,
                    disk_read_bytes_per_s=read_rate, psu_watts=watts, psu_arithmetic=arithmetic, link_notes=notes,
                    ram_cache_bytes=cache_bytes, ram_cache_reason=cache_reason, system=system.text,
                    system_gpus=system.gpus_per_system, systems=system.systems, reference_system=reference,
                    gpus_used=gpus,
                    bytes_per_sample=bytes_per_sample, bytes_reason=feeding.bytes_reason, decode=feeding.decode,
                    cpu_cores_other_decode=other_cores, cpu_other_decode_reason=other_reason)
