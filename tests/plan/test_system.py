"""Host rules against worked examples: power supply, RAM, cores, disk, and the link of an external GPU."""

import dataclasses

import pytest

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import match_gpu
from gpufeed.plan.hosts import system_to_buy
from gpufeed.plan.system import (
    GIB,
    Feeding,
    cpu_cores_needed,
    disk,
    host_ram,
    link_notes,
    measure_gather_rate,
    page_cache_ram,
    plan_host,
    psu_watts,
)


def test_psu_four_300_watt_cards_and_a_150_watt_cpu():
    # 4 x 300 + 150 + 100 = 1450 W; x 1.25 = 1812.5 W; the next size sold is 2000 W
    watts, arithmetic = psu_watts([300.0] * 4, cpu_tdp_w=150)
    assert watts == 2000
    assert "300 + 300 + 300 + 300 W" in arithmetic and "1450 W" in arithmetic and "1812.5 W" in arithmetic
    assert "2000 W" in arithmetic and "120 V" in arithmetic  # 1450 W exceeds a 15 A household circuit


def test_psu_one_card_and_the_largest_sizes():
    # 450 + 150 + 100 = 700 W; x 1.25 = 875 W -> 1000 W, within a household circuit
    watts, arithmetic = psu_watts([450.0])
    assert watts == 1000 and "120 V" not in arithmetic
    # 8 x 700 + 300 + 200 = 6100 W; x 1.25 = 7625 W -> no single supply: rounded up to 7700 W
    watts, arithmetic = psu_watts([700.0] * 8, cpu_tdp_w=300, rest_w=200)
    assert watts == 7700 and "two supplies" in arithmetic
    assert psu_watts([300.0] * 4, headroom=0.0)[0] == 1500  # 1450 W exactly -> 1500 W


def test_ram_is_the_gpus_memory_at_least_and_twice_ideally():
    # one RTX 4090: at least its 24 GiB, ideally 48 GiB, whatever the dataset
    ideal, minimum, reason = host_ram(24 * GIB)
    assert (minimum, ideal) == (24 * GIB, 48 * GIB)
    assert "rule of thumb" in reason and "pinned" in reason and "dataset" not in reason
    assert host_ram(4 * 24 * GIB)[:2] == (192 * GIB, 96 * GIB)
    assert host_ram(12 * GIB)[:2] == (24 * GIB, 16 * GIB)  # 12 -> 16 GiB, 24 -> 24 GiB
    assert host_ram(5000 * GIB)[1] == 5 * 1024 * GIB  # past the table: whole TiB


def test_page_cache_ram_is_a_choice_apart_from_the_requirement():
    # ImageNet packed at 224 x 224 (179.6 GiB) beside one 4090's ideal 48 GiB: 227.6 GiB -> 256 GiB
    wanted, reason = page_cache_ram(48 * GIB, 1_281_167 * 3 * 224 * 224, read_bytes_per_s=300 * 2**20)
    assert wanted == 256 * GIB
    assert reason.startswith("a choice") and "179.6 GiB dataset" in reason and "300 MiB/s" in reason


def test_cpu_cores():
    # 10,000 samples/s at 150 per core: ceil(66.7) = 67 cores, + 2 for two GPUs' processes = 69
    cores, reason = cpu_cores_needed(10_000, 150, "JPEG default", gpus=2)
    assert cores == 69 and "JPEG default" in reason and "67 cores" in reason
    with pytest.raises(ConfigError):
        cpu_cores_needed(10, 0, "broken")


def test_gather_rate_is_measured():
    rate, reason = measure_gather_rate(3072, seconds=0.01)
    assert rate > 0 and reason.startswith("measured here")


def test_disk_arithmetic_in_gib_with_the_source_files():
    # 11,173,962 parameters x (4 + 8) B = 134,087,544 B a checkpoint; 3 kept + 1 being written
    total, arithmetic = disk(150_000_000, 11_173_962, "adamw", source_bytes=2 * GIB)
    assert total == 2 * GIB + 150_000_000 + 4 * 11_173_962 * 12
    assert "12 B" in arithmetic and "source files 2.00 GiB" in arithmetic
    assert "packed dataset 0.14 GiB" in arithmetic and "0.125 GiB" in arithmetic  # 134,087,544 / 2^30
    assert f"= {total / GIB:.2f} GiB" in arithmetic and " GB" not in arithmetic
    assert disk(0, 1000, "sgd", checkpoints_kept=1)[0] == 2 * 1000 * 8
    with pytest.raises(ConfigError, match="optimizer"):
        disk(0, 1000, "lion")


def test_link_of_an_external_gpu():
    # PCIe 3.0 x4 (Thunderbolt): 3.94 GB/s. 50,000 samples/s of 3x32x32 uint8 = 0.154 GB/s: 4%, enough
    notes = link_notes(3, 4, 50_000, 3072)
    assert "4%" in notes[0] and "enough" in notes[0]
    assert any("narrow link" in note for note in notes)
    # 20,000 samples/s of 3x224x224 = 3.01 GB/s: 76% of 3.94, flagged
    notes = link_notes(3, 4, 20_000, 3 * 224 * 224)
    assert "76%" in notes[0] and "hold the GPU back" in notes[0]
    assert link_notes(None, 16, 1, 1) == ("PCIe generation or width unknown for this card: the link was not checked",)


def test_link_lanes_for_several_cards():
    notes = link_notes(4, 16, 1000, 3072, gpus=4)
    assert not any("narrow" in note for note in notes)
    assert any("64 CPU lanes" in note and "EPYC" in note for note in notes)
    # two PCIe 4.0 x16 cards on a desktop CPU: x8 each, 15.75 GB/s; 0.0123 GB/s needed is 0%
    notes = link_notes(4, 16, 4000, 3072, gpus=2)
    assert "x8 each: 15.75 GB/s" in notes[-1] and "EPYC" not in notes[-1]
    assert len(link_notes(4, 8, 4000, 3072, gpus=2)) == 1  # x8 + x8 fit a desktop CPU: nothing to say


def test_plan_host_puts_it_together():
    spec = dataclasses.replace(match_gpu("4090"), memory_bytes=24 * GIB, tdp_w=300.0, pcie_generation=4)
    plan = plan_host(spec, system_to_buy(spec, 4), dataset_bytes=10 * GIB, cache_dataset=True,
                     parameters=1_000_000, optimizer="adamw", samples_per_s_per_gpu=10_000,
                     feeding=Feeding(3072, per_core_rate=(10_000.0, "stated")), cpu_tdp_w=150, link=(3, 4),
                     source_bytes=GIB)
    assert plan.system == "a workstation with 4 cards" and plan.system_gpus == 4 and plan.systems == 1
    # 4 x 300 + 150 + 100 = 1450 W x 1.25 = 1812.5 -> 2000 W; RAM 96 GiB at least, 192 GiB ideally
    assert plan.psu_watts == 2000 and plan.ram_bytes == 192 * GIB and plan.ram_minimum_bytes == 96 * GIB
    assert plan.ram_cache_bytes == 256 * GIB  # 192 + 10 GiB of dataset -> 256 GiB, a choice apart
    assert plan.cpu_cores == 4 + 4
    assert plan.disk_read_bytes_per_s == 40_000 * 3072
    assert plan.disk_bytes == GIB + 10 * GIB + 4 * 1_000_000 * 12
    assert "PCIe 3.0 x4" in plan.link_notes[0]  # the eGPU link given, not the card's own
    assert plan.reference_system is None


def test_one_4090_needs_24_gib_of_ram_at_least_and_48_ideally():
    spec = match_gpu("4090")
    plan = plan_host(spec, system_to_buy(spec, 1), dataset_bytes=1_281_167 * 3 * 224 * 224, cache_dataset=True,
                     parameters=25_557_032, optimizer="sgd", samples_per_s_per_gpu=1300,
                     feeding=Feeding(150_528, per_core_rate=(5000.0, "stated")))
    assert (plan.ram_minimum_bytes, plan.ram_bytes) == (24 * GIB, 48 * GIB)
    assert plan.ram_cache_bytes == 256 * GIB  # keeping ImageNet in the page cache is the choice apart
    assert plan.psu_watts == 1000  # 450 + 150 + 100 = 700 W x 1.25 = 875 -> 1000 W


def test_one_b200_is_an_eight_gpu_server_not_a_1600_watt_workstation():
    spec = match_gpu("b200")
    plan = plan_host(spec, system_to_buy(spec, 1), dataset_bytes=GIB, cache_dataset=False, parameters=10**6,
                     optimizer="sgd", samples_per_s_per_gpu=10_000,
                     feeding=Feeding(150_528, per_core_rate=(5000.0, "stated")))
    assert plan.system_gpus == 8 and "8-GPU SXM baseboard server" in plan.system
    # RAM for 8 x 180 GiB: 1,440 GiB -> 1,536 GiB at least, 2,880 GiB -> 3,072 GiB ideally
    assert (plan.ram_minimum_bytes, plan.ram_bytes) == (1536 * GIB, 3072 * GIB)
    # 8 x 1000 + 2 x 350 + 0.7 x 8000 = 14,300 W: 5 supplies of 3,000 W carry it (DGX B200: 14.3 kW max)
    assert plan.psu_watts == 15_000 and "14,300 W" in plan.psu_arithmetic
    assert "NVIDIA DGX B200 states 14,300 W" in plan.psu_arithmetic
    assert plan.reference_system.startswith("NVIDIA DGX B200: 14,300 W at most, 2,048 GiB RAM")
    assert plan.cpu_cores == 16 + 8  # 80,000 samples/s at 5,000 a core, + one per GPU
