"""Ranking on hand-made catalog rows: fits, order, costs and energy by hand, and the recommendation."""

import dataclasses

import pytest

from gpufeed.hardware.catalog import load_catalog
from gpufeed.plan.compute import ComputeEstimate
from gpufeed.plan.rank import GpuOption, rank_gpus, recommend

GIB = 1 << 30
TEMPLATE = load_catalog()[0]


def row(name, memory_gib, bf16_tflops, price=None, rent=None, tdp=300.0):
    tflops = dict.fromkeys(TEMPLATE.dense_tflops)
    tflops["bf16"] = bf16_tflops
    return dataclasses.replace(TEMPLATE, name=name, memory_bytes=memory_gib * GIB, dense_tflops=tflops,
                               price_usd=price, price_date=None if price is None else "2025-01",
                               rent_usd_per_hour=rent, tdp_w=tdp)


@dataclasses.dataclass(frozen=True)
class Memory:
    peak_bytes: int
    overhead_bytes: int = GIB
    batch_size: int = 256


# 1e18 FLOPs at MFU 0.5 (band 0.25-1.0): 20,000 s = 5.56 h on a 100 TFLOP/s card
COMPUTE = ComputeEstimate(flops_per_step=10**15, flops_per_sample=1e12, steps_per_epoch=100, total_steps=1000,
                          mfu=0.5, mfu_low=0.25, mfu_high=1.0, mfu_source="test")
CATALOG = (
    row("small", 16, 400.0, price=1000, rent=0.5),
    row("slow", 48, 100.0, price=4000, rent=1.0, tdp=300.0),
    row("fast", 80, 200.0, price=30000, rent=3.0, tdp=700.0),
    row("unknown speed", 48, None, price=2000),
    row("exact", 24, 50.0),
)


def ranked(peak_gib=24, gpus=1):
    asked = []

    def max_batch_for(capacity):
        asked.append(capacity)
        return capacity // GIB * 10

    return rank_gpus(CATALOG, Memory(peak_gib * GIB), COMPUTE, "bf16", gpus, max_batch_for), asked


def test_order_and_fits():
    options, asked = ranked()
    assert [o.name for o in options] == ["fast", "slow", "exact", "unknown speed", "small"]
    assert [o.fits for o in options] == [True, True, True, True, False]  # "exact": peak == capacity fits
    assert sorted(asked) == sorted({16 * GIB, 48 * GIB, 80 * GIB, 24 * GIB})  # once per distinct capacity
    small = options[-1]
    assert small.max_batch_size == 160 and "largest batch that fits: 160" in small.notes
    assert "tight" in options[2].notes
    unknown = options[3]
    assert unknown.hours is None and unknown.cost_rent_usd is None and "time unknown" in unknown.notes


def test_hours_costs_and_energy_by_hand():
    options, _ = ranked(gpus=2)
    slow = next(o for o in options if o.name == "slow")
    hours = 1e18 / (100e12 * 2 * 0.5) / 3600  # 2.78 h on two cards
    assert slow.hours == pytest.approx(hours)
    assert (slow.hours_low, slow.hours_high) == (pytest.approx(hours / 2), pytest.approx(hours * 2))
    assert slow.cost_buy_usd == 8000 and slow.price_date == "2025-01"
    assert slow.cost_rent_usd == pytest.approx(1.0 * 2 * hours)
    assert slow.energy_kwh == pytest.approx(300 * 2 * hours / 1000)
    assert "linearly" in slow.notes


def test_recommend():
    options, _ = ranked()
    text = recommend(options)
    # rent: fast 2.78 h x $3 = $8.33, slow 5.56 h x $1 = $5.56 -> slow; buy: price x hours, slow 22,222 < fast 83,333
    assert "Cheapest to rent: slow" in text and "Fastest: fast" in text and "Best value to buy: slow" in text
    assert "Fastest: fast, 2.8 h (1.4 h to 5.6 h)" in text  # 2.78 h, band 1.39-5.56 h
    # four cards: 0.694 h = 42 min, band 21 min to 1.39 h
    assert "Fastest: fast, 42 min (21 min to 1.4 h)" in recommend(ranked(gpus=4)[0])
    text = recommend(options, target_hours=3.0)
    assert "Cheapest to rent: fast" in text and "Best value to buy: fast" in text
    assert "No single configuration finishes" in recommend(options, target_hours=1.0)


def test_recommend_when_nothing_fits():
    options, _ = ranked(peak_gib=100)
    assert not any(o.fits for o in options)
    assert "fast" in recommend(options) and "batch of at most 800" in recommend(options)
    assert recommend([]) == "No GPUs in the catalog."


def test_real_catalog_ranks():
    options = rank_gpus(load_catalog(), Memory(30 * GIB), COMPUTE, "bf16", 1, lambda capacity: 1)
    assert len(options) == len(load_catalog())
    assert all(isinstance(o, GpuOption) for o in options)
    fitting = [o for o in options if o.fits]
    assert all(o.memory_bytes >= 30 * GIB for o in fitting)
    timed = [o.hours for o in fitting if o.hours is not None]
    assert timed == sorted(timed)
