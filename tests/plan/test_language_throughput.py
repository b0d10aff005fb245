"""A language model's time on a catalog GPU (plan/language/throughput.py) against hand-derived figures: the traced
FLOPs over a stated peak and efficiency, the communication of each strategy over the catalog's link, what the
compute hides, and the command's bad sharding input (one line, exit 2)."""

import dataclasses

import pytest
from tests.plan.sharding_cases import UNITS, T, estimate

from gpufeed.cli.main import main
from gpufeed.hardware.catalog import find_gpu
from gpufeed.plan.language.sharding import Sharding, ShardUnits
from gpufeed.plan.language.throughput import COLLECTIVE_EFFICIENCY, LANGUAGE_EFFICIENCY, language_time

FLOPS = 10**15  # one micro-batch's forward and backward, by hand


def memory(precision="bf16", accumulation=1):
    return dataclasses.replace(estimate(precision, accumulation=accumulation), step_flops=FLOPS, batch_size=2,
                               sequence_length=1000)


def test_one_gpu_is_the_flops_at_the_dense_peak_times_the_efficiency():
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    time = language_time(memory(), UNITS, Sharding(), h100, "bf16")
    compute = FLOPS / (989.4e12 * LANGUAGE_EFFICIENCY)  # H100 SXM's dense bf16
    assert time.compute_s == pytest.approx(compute) and time.communication_s == 0 == time.exposed_s
    assert time.tokens_per_s_per_gpu == pytest.approx(2 * 1000 / compute)
    assert time.mfu == pytest.approx(LANGUAGE_EFFICIENCY)
    twice = language_time(memory(accumulation=2), UNITS, Sharding(), h100, "bf16")
    assert twice.step_s == pytest.approx(2 * compute) and twice.tokens == 2 * 2000


def test_fsdp_on_nvlink_hides_its_communication_and_zero1_over_pcie_shows_it():
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    fsdp = language_time(memory(), UNITS, Sharding("fsdp", 8), h100, "bf16")
    sent = 7 / 8 * (2 * 2 * T + 4 * T)  # all-gather bf16 weights twice, reduce-scatter fp32 gradients
    assert fsdp.communication_s == pytest.approx(sent / (450e9 * COLLECTIVE_EFFICIENCY))
    assert fsdp.exposed_s == 0 and fsdp.step_s == pytest.approx(fsdp.compute_s)
    # an L4 (PCIe 4.0 x16: 16 GT/s x 128/130 x 16 lanes / 8 = 31.5 GB/s) with a tiny step: zero1's gradients and
    # weights do not hide behind 2/3 of it
    l4 = find_gpu("NVIDIA L4")
    small = language_time(dataclasses.replace(memory(), step_flops=10**9), UNITS, Sharding("zero1", 4), l4, "bf16")
    sent = 3 / 4 * (2 * T + 2 * T)  # DeepSpeed's bf16 gradients and weights
    assert small.communication_s == pytest.approx(sent / (16e9 * 128 / 130 * 16 / 8 * COLLECTIVE_EFFICIENCY))
    assert small.exposed_s == pytest.approx(small.communication_s - 2 / 3 * small.compute_s)
    assert "PCIe 4.0 x16" in small.link


def test_a_bridge_joins_two_cards_and_infinity_fabric_scales_with_the_peers():
    a100 = find_gpu("NVIDIA A100 80GB PCIe")
    assert "nvlink bridge" in language_time(memory(), UNITS, Sharding("fsdp", 2), a100, "bf16").link
    assert "PCIe" in language_time(memory(), UNITS, Sharding("fsdp", 4), a100, "bf16").link
    mi300x = find_gpu("AMD Instinct MI300X")
    two = language_time(memory(), UNITS, Sharding("fsdp", 2), mi300x, "bf16")
    eight = language_time(memory(), UNITS, Sharding("fsdp", 8), mi300x, "bf16")
    assert two.communication_s == pytest.approx(1 / 2 * (2 * 2 * T + 4 * T) / (448e9 / 7 * COLLECTIVE_EFFICIENCY))
    assert eight.communication_s == pytest.approx(7 / 8 * (2 * 2 * T + 4 * T) / (448e9 * COLLECTIVE_EFFICIENCY))


def test_across_nodes_the_ring_runs_at_the_network_and_unknown_links_are_na():
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    time = language_time(memory(), UNITS, Sharding("fsdp", 16), h100, "bf16")
    assert time.communication_s == pytest.approx(15 / 16 * (2 * 2 * T + 4 * T) / (50e9 * COLLECTIVE_EFFICIENCY))
    l4 = find_gpu("NVIDIA L4")  # PCIe cards: the catalog has no network between machines for them
    assert "no network rate" in language_time(memory(), ShardUnits((), 0, 0, 0, 0, 0), Sharding("fsdp", 16), l4,
                                              "bf16").reason


@pytest.mark.parametrize("words, message", [
    (["--shard", "zero3"], "--shard zero3 with 1 GPU shards nothing"),
    (["--shard", "fsdp", "--gpus", "0"], "--gpus must be at least 1"),
    (["--shard", "fsdp", "--gpus", "4", "--gpus-per-node", "8"], "must be between 1 and --gpus 4"),
    (["--gpus", "4"], "--gpus 4 needs --shard"),
    (["--tokens", "0"], "--tokens must be a whole number"),
    (["--tokens", "1e6", "--dataset-size", "100"], "give the job's size once"),
])
def test_bad_sharding_on_the_command_line_is_one_line_and_exit_2(words, message, capsys):
    assert main(["plan", "--model", "gpt2", *words]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1


def test_a_sharded_plan_on_the_command_line_keeps_its_figures_consistent(tmp_path, capsys):
    """gpt2 on 2 GPUs under zero2, 48,828 sequences of 512 tokens for 4 epochs (about 10^8 tokens): per-GPU memory
    below the one-GPU step's, and for every card that fits, hours = tokens / (tokens/s a GPU x 2) and rent = the
    catalog rate x 2 x hours; none where it does not fit."""
    pytest.importorskip("transformers")
    import json

    from gpufeed.hardware.catalog import load_catalog

    assert main(["plan", "--model", "gpt2", "--seq-len", "512", "--batch-size", "4", "--gpus", "2", "--shard",
                 "zero2", "--dataset-size", "48828", "--epochs", "4", "--json", "-", "--html",
                 str(tmp_path / "plan.html")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["tokens"] == 48828 * 4 * 512  # sequences x epochs x tokens a sequence
    sharded, memory = document["sharded"], document["memory"]
    assert sharded["strategy"] == "zero2" and sharded["peak_bytes"] < memory["peak_bytes"]
    # DeepSpeed's bf16 layout: the fp32 master weights join AdamW's state, and zero2 halves it over the 2 GPUs
    assert sharded["optimizer_bytes"] == pytest.approx((memory["optimizer_bytes"] + 4 * document["trainable_params"])
                                                       / 2, abs=2)
    rates = {spec.name: spec.rent_usd_per_hour for spec in load_catalog()}
    timed = 0
    for gpu in document["gpus"]:
        if not gpu["fits"]:
            assert gpu["time"] is None and gpu["hours"] is None and gpu["cost_rent_usd"] is None
            continue
        if gpu["time"] is None:
            continue
        timed += 1
        assert gpu["hours"] * 3600 * gpu["time"]["tokens_per_s_per_gpu"] * 2 == pytest.approx(document["tokens"])
        if rates[gpu["name"]] is not None:
            assert gpu["cost_rent_usd"] == pytest.approx(rates[gpu["name"]] * 2 * gpu["hours"])
    assert timed >= 10 and document["host"]["gpus"] == 2
    page = (tmp_path / "plan.html").read_text()
    assert "Memory per GPU, sharded" in page and "Host: 2 x" in page


def test_the_language_table_fits_100_columns_with_its_notes_as_footnotes(capsys):
    pytest.importorskip("transformers")
    assert main(["plan", "--model", "gpt2", "--seq-len", "128", "--gpus", "2", "--shard", "fsdp"]) == 0
    shown = capsys.readouterr().out.splitlines()
    header = next(index for index, line in enumerate(shown) if line.split()[:2] == ["GPU", "fits"])
    table = shown[header:header + 26]  # the header, its rule and the catalog's 24 cards
    assert all(len(line) <= 100 for line in table) and "tok/s a GPU" in table[0]
    marks = {mark for line in table[2:] for mark in (line.split()[-1].split(",") if "[" in line else [])}
    assert marks and all(any(line.startswith(f"{mark} ") for line in shown) for mark in marks)
