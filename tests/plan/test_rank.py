"""Ranking on hand-made catalog rows: fits, order, time, rent per hour and per job, buying as sold, energy, the
fp16 fallback, and the recommendation, each by hand."""

import dataclasses

import pytest

from gpufeed.hardware.catalog import load_catalog
from gpufeed.plan.compute import ComputeEstimate
from gpufeed.plan.rank import GpuOption, PrecisionPlan, best_to_buy, rank_gpus, recommend
from gpufeed.plan.traffic import OperatorCost, StepTraffic

GIB = 1 << 30
TEMPLATE = load_catalog()[0]
CARDS = tuple(range(1, 9))


def row(name, memory_gib, bf16_tflops, price=None, rent=None, tdp=300.0, fp16_tflops=None, module=False):
    tflops = dict.fromkeys(TEMPLATE.dense_tflops)
    tflops.update(bf16=bf16_tflops, fp16=fp16_tflops or bf16_tflops)
    return dataclasses.replace(TEMPLATE, name=name, memory_bytes=memory_gib * GIB, dense_tflops=tflops,
                               price_usd=price, price_date=None if price is None else "2025-01",
                               rent_usd_per_hour=rent, tdp_w=tdp, bf16=bf16_tflops is not None,
                               form_factor="SXM" if module else "PCIe", system_gpus=(4, 8) if module else CARDS)


@dataclasses.dataclass(frozen=True)
class Memory:
    peak_bytes: int
    overhead_bytes: int = GIB
    batch_size: int = 256


# one convolution of 1e15 FLOPs a step at compute efficiency 0.5 (band x0.5-x2): 20 s a step on a 100 TFLOP/s
# card, 1,000 steps = 20,000 s = 5.56 h (band 2.78-11.1 h)
COMPUTE = ComputeEstimate(flops_per_step=10**15, flops_per_sample=10**15 / 256, steps_per_epoch=100,
                          total_steps=1000, bytes_per_step=1, compute_efficiency=0.5, memory_efficiency=0.5,
                          efficiency_low=0.5, efficiency_high=2.0, efficiency_source="test", method="test")
CATALOG = (
    row("small", 16, 400.0, price=1000, rent=0.5),
    row("slow", 48, 100.0, price=4000, rent=1.0, tdp=300.0),
    row("fast", 80, 200.0, price=30000, rent=3.0, tdp=700.0, module=True),
    row("unknown speed", 48, None, price=2000, fp16_tflops=None),
    row("exact", 24, 50.0),
    row("old", 32, None, rent=0.25, fp16_tflops=50.0),
)


def ranked(peak_gib=24, gpus=1):
    asked, precisions = [], []

    def plan_for(precision):
        precisions.append(precision)
        dtype = "float16" if precision == "fp16" else "bfloat16"
        operator = OperatorCost("convolution", "convolution", dtype, 10**15, 1, 0, False)
        traffic = StepTraffic(precision, 256, (operator,), "test")

        def max_batch_for(capacity):
            asked.append((precision, capacity))
            return capacity // GIB * 10

        return PrecisionPlan(Memory(peak_gib * GIB), traffic, max_batch_for)

    return rank_gpus(CATALOG, plan_for, COMPUTE, "bf16", gpus), asked, precisions


def by_name(options, name):
    return next(option for option in options if option.name == name)


def test_order_and_fits():
    options, asked, _ = ranked()
    # exact (bf16) and old (fp16) both run 50 TFLOP/s: a tie keeps the catalog's order
    assert [o.name for o in options] == ["fast", "slow", "exact", "old", "unknown speed", "small"]
    assert [o.fits for o in options] == [True, True, True, True, True, False]  # "exact": peak == capacity fits
    # once per precision and distinct capacity; "unknown speed" and "old" have no bf16, so fp16
    assert sorted(asked) == sorted({("bf16", 16 * GIB), ("bf16", 48 * GIB), ("bf16", 80 * GIB), ("bf16", 24 * GIB),
                                    ("fp16", 32 * GIB), ("fp16", 48 * GIB)})
    small = options[-1]
    assert small.max_batch_size == 160 and "largest batch that fits: 160" in small.notes
    # a card where the job does not fit gets no time, rate, rent or energy (it would run 400 TFLOP/s: 2.78 h), and
    # no "time unknown" note: its note says what would fit; its prices stay, as the catalog's
    assert (small.hours, small.hours_low, small.samples_per_s, small.step_s, small.mfu) == (None,) * 5
    assert (small.cost_rent_usd, small.energy_kwh) == (None, None) and "time unknown" not in small.notes
    assert small.rent_usd_per_hour == 0.5 and small.cost_buy_usd is not None
    assert "tight" in by_name(options, "exact").notes
    unknown = by_name(options, "unknown speed")
    assert unknown.hours is None and unknown.cost_rent_usd is None and "time unknown" in unknown.notes


def test_a_card_without_bf16_is_planned_in_fp16_with_a_scaler():
    options, _, precisions = ranked()
    old = by_name(options, "old")
    assert old.precision == "fp16" and "fp16" in precisions
    assert "no bf16" in old.notes and "gradient scaler" in old.notes
    assert old.hours == pytest.approx(1e15 / (50e12 * 0.5) * 1000 / 3600)  # 11.1 h at the fp16 rate
    assert by_name(options, "slow").precision == "bf16"


def test_hours_rent_buy_and_energy_by_hand():
    options, _, _ = ranked(gpus=2)
    slow = by_name(options, "slow")
    hours = 1e18 / (100e12 * 2 * 0.5) / 3600  # 2.78 h on two cards
    assert slow.hours == pytest.approx(hours)
    assert (slow.hours_low, slow.hours_high) == (pytest.approx(hours / 2), pytest.approx(hours * 2))
    assert slow.step_s == pytest.approx(20.0) and slow.samples_per_s == pytest.approx(2 * 256 / 20.0)
    assert slow.rent_usd_per_hour == pytest.approx(2.0)  # $1 per GPU-hour x 2 GPUs
    assert slow.cost_rent_usd == pytest.approx(2.0 * hours)  # per job
    assert slow.cost_buy_usd == 8000 and slow.buy_gpus == 2 and slow.price_date == "2025-01"
    assert slow.energy_kwh == pytest.approx(300 * 2 * hours / 1000)
    assert "linearly" in slow.notes
    assert slow.mfu == pytest.approx(0.5)  # 1e15 FLOPs in 20 s: 50 of the 100 TFLOP/s peak
    assert slow.memory_bound_share == 0


def test_an_sxm_part_is_bought_as_a_four_gpu_system_and_rented_per_gpu():
    options, _, _ = ranked(gpus=1)
    fast = by_name(options, "fast")
    assert fast.buy_gpus == 4 and fast.cost_buy_usd == 4 * 30000  # sold on 4- or 8-GPU boards
    assert "to buy: 4 GPUs as sold (4- or 8-GPU boards)" in fast.notes
    assert fast.buy_system.startswith("a 4-GPU SXM baseboard server") and "4 GPUs bought for a run on 1" in \
        fast.buy_system
    assert fast.rent_usd_per_hour == pytest.approx(3.0)  # renting: one GPU, priced per GPU
    assert by_name(ranked(gpus=5)[0], "fast").buy_gpus == 8


def test_recommend_with_cents():
    options, _, _ = ranked()
    text = recommend(options)
    # rent per job: fast 2.78 h x $3 = $8.33, slow 5.56 h x $1 = $5.56, old 11.1 h x $0.25 = $2.78 -> old
    assert "Cheapest to rent: old, $0.25/h, $2.78 for the job" in text
    # buy: what is bought x hours: slow 4,000 x 5.56 < fast 4 x 30,000 x 2.78
    assert "Fastest: fast, 2.8 h (1.4 h to 5.6 h)" in text and "Best value to buy: slow at $4,000" in text
    assert best_to_buy(options).name == "slow"
    assert "Fastest: fast, 42 min (21 min to 1.4 h)" in recommend(ranked(gpus=4)[0])  # 0.694 h on four
    text = recommend(options, target_hours=3.0)
    assert "Cheapest to rent: fast, $3.00/h, $8.33 for the job" in text
    assert "Best value to buy: fast at $120,000 for 4 GPUs as sold" in text
    assert "No single configuration finishes" in recommend(options, target_hours=1.0)


def test_recommend_when_nothing_fits():
    options, _, _ = ranked(peak_gib=100)
    assert not any(o.fits for o in options)
    assert "fast" in recommend(options) and "batch of at most 800" in recommend(options)
    assert recommend([]) == "No GPUs in the catalog."


def test_real_catalog_ranks():
    def plan_for(precision):
        dtype = "float16" if precision == "fp16" else "bfloat16"
        traffic = StepTraffic(precision, 256, (OperatorCost("mm", "matmul", dtype, 10**15, 10**9, 0, False),), "t")
        return PrecisionPlan(Memory(30 * GIB), traffic, lambda capacity: 1)

    options = rank_gpus(load_catalog(), plan_for, COMPUTE, "bf16", 1)
    assert len(options) == len(load_catalog())
    assert all(isinstance(o, GpuOption) for o in options)
    fitting = [o for o in options if o.fits]
    assert all(o.memory_bytes >= 30 * GIB for o in fitting)
    timed = [o.hours for o in fitting if o.hours is not None]
    assert timed == sorted(timed) and len(timed) == len(fitting)  # T4 and V100 too: in fp16
    assert {o.precision for o in options if "V100" in o.name or o.name == "NVIDIA T4"} == {"fp16"}
