"""Rank the catalog's GPUs for one training run: does it fit, how long, what it costs to buy and to rent, energy.

Precision per card: bf16 on a card without bf16 (Volta, Turing) is planned in fp16 with a gradient scaler, as
`gpufeed train --precision auto` runs there; tf32 on a card without TF32 in fp32. Fits: the memory estimate's
peak in that precision (which includes its `overhead_bytes` for the CUDA context and allocator slack) is at most
the card's `memory_bytes` as the catalog states it (vendor size x 2^30). The driver shows a little less as
usable (ECC and its own reservations, typically under 2%), so a fit with under TIGHT_SHARE to spare is noted as
tight. Hours: the step's roofline (roofline.py) x steps / GPUs. Rent: clouds price any count of any GPU per
GPU-hour, so $/h = the dated on-demand rate x GPUs and $ per job = $/h x hours. Buy: the dated list price x the
GPUs of the system it is sold in (hosts.py: an SXM part comes as a 4- or 8-GPU board even for a run on one);
GPUs only, the rest of the machine is extra. Energy: every card at its TDP the whole run (an upper bound for
the GPUs alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufeed.hardware.catalog import GpuSpec
from gpufeed.hardware.na import is_na
from gpufeed.plan.compute import ComputeEstimate, efficiency_of, hours_for
from gpufeed.plan.hosts import buy_note, system_to_buy
from gpufeed.plan.roofline import model_flops_utilisation, step_time
from gpufeed.plan.traffic import StepTraffic
from gpufeed.units import bytes_text, duration_text, money_text

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
class PrecisionPlan:
    """What one precision needs: the memory estimate, the traced traffic, and the largest batch for a capacity."""

    memory: MemoryLike
    traffic: StepTraffic
    max_batch_for: Callable[[int], int]


@dataclass(frozen=True)
class GpuOption:
    """One catalog GPU (times `gpus` cards) for this run. None where the catalog lacks the figure, and the time,
    rates, rent and energy None where the job does not fit (a run that cannot start has none)."""

    name: str
    fits: bool
    max_batch_size: int  # largest batch per card that fits its memory (0: not even one sample)
    memory_bytes: int  # one card's, as the catalog states it
    hours: float | None  # the whole run; None when a rate the step needs is unknown
    hours_low: float | None  # at the fast end of the efficiency band
    hours_high: float | None  # at the slow end
    cost_buy_usd: float | None  # list price x the GPUs of the system(s) bought
    price_date: str | None
    cost_rent_usd: float | None  # per job: on-demand rate x cards x hours
    energy_kwh: float | None  # TDP x cards x hours
    notes: str
    precision: str = ""  # the precision planned on this card (bf16 falls back to fp16 without bf16)
    step_s: float | None = None  # one optimizer step on one card
    samples_per_s: float | None = None  # all cards together
    mfu: float | None = None  # model FLOPs per second over the dense peak the step implies
    memory_bound_share: float | None = None  # of the step time, in operators limited by memory bandwidth
    rent_usd_per_hour: float | None = None  # on-demand rate x cards
    buy_gpus: int = 0  # GPUs in the system(s) bought
    buy_system: str = ""


def planned_precision(spec: GpuSpec, precision: str) -> tuple[str, str]:
    """(precision this card runs, a note or ''): bf16 -> fp16 without bf16, tf32 -> fp32 without TF32."""
    if precision == "bf16" and not spec.bf16:
        return "fp16", (f"no bf16 on {spec.architecture}: planned in fp16 with a gradient scaler "
                        f"(gpufeed train --precision fp16, or auto)")
    if precision == "tf32" and spec.dense_tflops["tf32"] is None:
        return "fp32", f"no TF32 on {spec.architecture}: planned in fp32"
    return precision, ""


def _option(spec: GpuSpec, plan: PrecisionPlan, compute: ComputeEstimate, precision: str, gpus: int,
            max_batch: int, grad_accumulation: int) -> GpuOption:
    memory = plan.memory
    fits = memory.peak_bytes <= spec.memory_bytes
    planned, note = planned_precision(spec, precision)
    notes = [note] if note else []
    if not fits:
        notes.append(f"needs {bytes_text(memory.peak_bytes, grouped=False)} at batch {memory.batch_size} (of "
                     f"which {bytes_text(memory.overhead_bytes, grouped=False)} context and allocator overhead), "
                     f"has {bytes_text(spec.memory_bytes, digits=0, grouped=False)}; largest batch that fits: "
                     f"{max_batch}")
    elif spec.memory_bytes - memory.peak_bytes < TIGHT_SHARE * spec.memory_bytes:
        notes.append("tight: under 5% of its memory to spare")
    step = step_time(plan.traffic, spec, efficiency_of(compute), grad_accumulation)
    hours = low = high = samples = mfu = bound = None
    timed = fits and not is_na(step)  # no time, rate or cost for a run that cannot start (its note says why)
    if fits and is_na(step):
        notes.append(f"time unknown: {step.reason}")
    elif timed:
        hours, low, high = hours_for(step, compute, gpus)
        samples = plan.traffic.batch_size * grad_accumulation * gpus / step.seconds
        mfu = model_flops_utilisation(compute.flops_per_step, step.seconds, spec, planned)
        bound = (step.memory_bound_s + step.layout_s) / step.seconds
    system = system_to_buy(spec, gpus)
    cost_buy = None if spec.price_usd is None else spec.price_usd * system.gpus
    per_hour = None if spec.rent_usd_per_hour is None else spec.rent_usd_per_hour * gpus
    cost_rent = None if per_hour is None or hours is None else per_hour * hours
    energy = None if hours is None else spec.tdp_w * gpus * hours / 1000
    if buy_note(spec, system, gpus):
        notes.append(buy_note(spec, system, gpus))
    if gpus > 1 and hours is not None:
        notes.append(f"{gpus} cards assumed to scale linearly")
    return GpuOption(name=spec.name, fits=fits, max_batch_size=max_batch, memory_bytes=spec.memory_bytes,
                     hours=hours, hours_low=low, hours_high=high, cost_buy_usd=cost_buy,
                     price_date=spec.price_date, cost_rent_usd=cost_rent, energy_kwh=energy, notes="; ".join(notes),
                     precision=planned, step_s=step.seconds if timed else None, samples_per_s=samples,
                     mfu=mfu, memory_bound_share=bound, rent_usd_per_hour=per_hour, buy_gpus=system.gpus,
                     buy_system=system.text)


def rank_gpus(catalog: Sequence[GpuSpec], plan_for: Callable[[str], PrecisionPlan], compute: ComputeEstimate,
              precision: str, gpus: int, grad_accumulation: int = 1) -> list[GpuOption]:
    """Every catalog row as a GpuOption: those that fit first, fastest first (unknown time last), then those
    that do not, largest memory first. `plan_for(precision)` gives each card's precision its memory and
    traffic (the caller caches it); its `max_batch_for` is asked once per precision and distinct capacity."""
    batches: dict[tuple[str, int], int] = {}
    options = []
    for spec in catalog:
        planned, _ = planned_precision(spec, precision)
        plan = plan_for(planned)
        if (planned, spec.memory_bytes) not in batches:
            batches[(planned, spec.memory_bytes)] = plan.max_batch_for(spec.memory_bytes)
        options.append(_option(spec, plan, compute, precision, gpus, batches[(planned, spec.memory_bytes)],
                               grad_accumulation))
    fitting = sorted((o for o in options if o.fits), key=lambda o: (o.hours is None, o.hours or 0.0))
    others = sorted((o for o in options if not o.fits), key=lambda o: -o.memory_bytes)
    return fitting + others


def _hours_text(option: GpuOption) -> str:
    return f"{duration_text(option.hours)} ({duration_text(option.hours_low)} to {duration_text(option.hours_high)})"


def best_to_buy(options: Sequence[GpuOption], target_hours: float | None = None) -> GpuOption | None:
    """The card that fits with the lowest price of what is bought x hours (the most work per dollar)."""
    buyable = [o for o in options if o.fits and o.hours is not None and o.cost_buy_usd is not None
               and (target_hours is None or o.hours <= target_hours)]
    return min(buyable, key=lambda o: o.cost_buy_usd * o.hours, default=None)


def recommend(options: Sequence[GpuOption], target_hours: float | None = None) -> str:
    """A few sentences: the cheapest card to rent that fits (and finishes within `target_hours`), the fastest,
    and the best to buy (lowest price of the system bought x hours, i.e. most work per dollar)."""
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
        sentences.append(f"Cheapest to rent: {cheapest.name}, {money_text(cheapest.rent_usd_per_hour)}/h, "
                         f"{money_text(cheapest.cost_rent_usd)} for the job, {_hours_text(cheapest)}.")
    fastest = min(timed, key=lambda o: o.hours)
    sentences.append(f"Fastest: {fastest.name}, {_hours_text(fastest)}.")
    value = best_to_buy(within)
    if value is not None:
        bought = f" for {value.buy_gpus} GPUs as sold" if value.buy_gpus > 1 else ""
        sentences.append(f"Best value to buy: {value.name} at ${value.cost_buy_usd:,.0f}{bought} (list price "
                         f"{value.price_date}), {_hours_text(value)}.")
    return " ".join(sentences)
