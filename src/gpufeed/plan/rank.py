"""Rank the catalog's GPUs for one training run: does it fit, how long, what it costs to buy and to rent, energy.

Fits: the memory estimate's peak (which includes its `overhead_bytes` for the CUDA context and allocator slack)
is at most the card's `memory_bytes` as the catalog states it (vendor size x 2^30). The driver shows a little
less as usable (ECC and its own reservations, typically under 2%), so a fit with under TIGHT_SHARE to spare is
noted as tight. Hours come from `compute.hours_on` with the card's dense peak for the precision; rent is the
dated on-demand rate x GPUs x hours; buy is the dated list price x GPUs; energy assumes every card draws its
TDP the whole run (an upper bound for the GPUs alone; the host adds its share on top).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufeed.hardware.catalog import GpuSpec, peak_tflops
from gpufeed.hardware.na import is_na
from gpufeed.plan.compute import ComputeEstimate, hours_on

TIGHT_SHARE = 0.05  # less than this share of the card's memory left over: "tight"


class MemoryLike(Protocol):
    """What ranking reads of a `plan.memory.MemoryEstimate` (per card, bytes)."""

    @property
    def peak_bytes(self) -> int: ...

    @property
    def overhead_bytes(self) -> int: ...

    @property
    def batch_size(self) -> int: ...


@dataclass(frozen=True)
class GpuOption:
    """One catalog GPU (times `gpus` cards) for this run. None where the catalog lacks the figure."""

    name: str
    fits: bool
    max_batch_size: int  # largest batch per card that fits its memory (0: not even one sample)
    memory_bytes: int  # one card's, as the catalog states it
    hours: float | None  # the whole run at the estimate's MFU; None when the peak for the precision is unknown
    hours_low: float | None  # at the high end of the MFU band
    hours_high: float | None  # at the low end of the MFU band
    cost_buy_usd: float | None  # list price x cards
    price_date: str | None
    cost_rent_usd: float | None  # on-demand rate x cards x hours
    energy_kwh: float | None  # TDP x cards x hours
    notes: str


def _option(spec: GpuSpec, memory: MemoryLike, compute: ComputeEstimate, precision: str, gpus: int,
            max_batch: int) -> GpuOption:
    fits = memory.peak_bytes <= spec.memory_bytes
    notes: list[str] = []
    if not fits:
        notes.append(f"needs {memory.peak_bytes / 2**30:.1f} GiB at batch {memory.batch_size} (of which "
                     f"{memory.overhead_bytes / 2**30:.1f} GiB context and allocator overhead), has "
                     f"{spec.memory_bytes / 2**30:.0f} GiB; largest batch that fits: {max_batch}")
    elif spec.memory_bytes - memory.peak_bytes < TIGHT_SHARE * spec.memory_bytes:
        notes.append("tight: under 5% of its memory to spare")
    peak = peak_tflops(spec, precision)
    hours = low = high = None
    if is_na(peak):
        notes.append(f"time unknown: {peak.reason}")
    else:
        hours, low, high = hours_on(peak, compute, gpus)
    cost_buy = None if spec.price_usd is None else spec.price_usd * gpus
    cost_rent = None if spec.rent_usd_per_hour is None or hours is None else spec.rent_usd_per_hour * gpus * hours
    energy = None if hours is None else spec.tdp_w * gpus * hours / 1000
    if gpus > 1 and hours is not None:
        notes.append(f"{gpus} cards assumed to scale linearly")
    return GpuOption(name=spec.name, fits=fits, max_batch_size=max_batch, memory_bytes=spec.memory_bytes,
                     hours=hours, hours_low=low, hours_high=high, cost_buy_usd=cost_buy,
                     price_date=spec.price_date, cost_rent_usd=cost_rent, energy_kwh=energy, notes="; ".join(notes))


def rank_gpus(catalog: Sequence[GpuSpec], memory: MemoryLike, compute: ComputeEstimate, precision: str,
              gpus: int, max_batch_for: Callable[[int], int]) -> list[GpuOption]:
    """Every catalog row as a GpuOption: those that fit first, fastest first (unknown time last), then those
    that do not, largest memory first. `max_batch_for(capacity_bytes)` is asked once per distinct capacity."""
    batches: dict[int, int] = {}
    options = []
    for spec in catalog:
        if spec.memory_bytes not in batches:
            batches[spec.memory_bytes] = max_batch_for(spec.memory_bytes)
        options.append(_option(spec, memory, compute, precision, gpus, batches[spec.memory_bytes]))
    fitting = sorted((o for o in options if o.fits), key=lambda o: (o.hours is None, o.hours or 0.0))
    others = sorted((o for o in options if not o.fits), key=lambda o: -o.memory_bytes)
    return fitting + others


def duration_text(hours: float) -> str:
    """Hours as a person reads them: 3.2 h, 14 min, 40 s."""
    if hours >= 1:
        return f"{hours:.1f} h"
    if hours * 60 >= 1:
        return f"{hours * 60:.0f} min"
    seconds = hours * 3600
    if seconds >= 1:
        return f"{seconds:.0f} s"
    return f"{seconds * 1000:.0f} ms" if seconds * 1000 >= 1 else "under 1 ms"


def _hours_text(option: GpuOption) -> str:
    return f"{duration_text(option.hours)} ({duration_text(option.hours_low)} to {duration_text(option.hours_high)})"


def recommend(options: Sequence[GpuOption], target_hours: float | None = None) -> str:
    """A few sentences: the cheapest card to rent that fits (and finishes within `target_hours`), the fastest,
    and the best to buy (lowest list price x hours, i.e. most work per dollar)."""
    timed = [o for o in options if o.fits and o.hours is not None]
    if not timed:
        largest = max(options, key=lambda o: o.memory_bytes, default=None)
        if largest is None:
            return "No GPUs in the catalog."
        return (f"No GPU in the catalog both fits and has a known speed. The largest, {largest.name}, takes a "
                f"batch of at most {largest.max_batch_size}: lower the batch size, use bf16, or use more cards.")
    within = [o for o in timed if target_hours is None or o.hours <= target_hours]
    sentences = []
    if target_hours is not None and not within:
        sentences.append(f"No single configuration finishes within {target_hours:g} h; the fastest needs "
                         f"{_hours_text(min(timed, key=lambda o: o.hours))}: add cards or cut epochs.")
    rentable = [o for o in within if o.cost_rent_usd is not None]
    if rentable:
        cheapest = min(rentable, key=lambda o: o.cost_rent_usd)
        cost = cheapest.cost_rent_usd
        money = f"about ${cost:,.2f}" if cost >= 0.01 else "under a cent"
        sentences.append(f"Cheapest to rent: {cheapest.name}, {money} for {_hours_text(cheapest)}.")
    fastest = min(timed, key=lambda o: o.hours)
    sentences.append(f"Fastest: {fastest.name}, {_hours_text(fastest)}.")
    buyable = [o for o in within if o.cost_buy_usd is not None]
    if buyable:
        value = min(buyable, key=lambda o: o.cost_buy_usd * o.hours)
        sentences.append(f"Best value to buy: {value.name} at ${value.cost_buy_usd:,.0f} (list price "
                         f"{value.price_date}), {_hours_text(value)}.")
    return " ".join(sentences)
