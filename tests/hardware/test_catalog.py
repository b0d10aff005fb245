"""The GPU table (hardware/gpus.json): its rows are sourced, dated and sane, and names resolve to the right row."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from gpufeed.hardware import catalog
from gpufeed.hardware.catalog import (
    NOT_IN_CATALOG,
    PRECISIONS,
    TFLOPS_KEYS,
    find_gpu,
    load_catalog,
    match_gpu,
    peak_tflops,
)
from gpufeed.hardware.na import NA, is_na

GPUS_JSON = Path(catalog.__file__).with_name("gpus.json")
TENSOR_CORE_ARCHITECTURES = {"Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell", "CDNA 3"}


@pytest.fixture(scope="module")
def specs():
    return load_catalog()


def by_name(specs, name):
    (spec,) = [spec for spec in specs if spec.name == name]
    return spec


def test_catalog_loads_and_every_row_has_a_source_and_a_date(specs):
    assert len(specs) >= 18
    for spec in specs:
        assert spec.source.startswith("https://"), spec.name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", spec.source_date), spec.name
        assert re.fullmatch(r"\d{4}-\d{2}", spec.released), spec.name
        assert spec.notes, spec.name
        assert spec.price_usd is None or (spec.price_date and spec.price_source), spec.name
        assert spec.rent_usd_per_hour is None or spec.rent_source, spec.name
    assert load_catalog() is load_catalog()  # cached


def test_catalog_has_the_rows_the_tools_rely_on(specs):
    names = {spec.name for spec in specs}
    for wanted in ["H200 SXM", "H100 SXM5 80GB", "H100 PCIe 80GB", "A100 SXM4 80GB", "A100 PCIe 40GB", "L40S", "L4",
                   "A10", "T4", "V100 SXM2 16GB", "V100 SXM2 32GB", "RTX 4090", "RTX 4080", "RTX 3090", "RTX 3060 12GB",
                   "RTX A6000", "RTX 6000 Ada"]:
        assert any(wanted in name for name in names), wanted


def test_dense_is_at_most_sparse(specs):
    compared = 0
    for spec in specs:
        for key in TFLOPS_KEYS:
            dense, sparse = spec.dense_tflops[key], spec.sparse_tflops[key]
            if dense is not None and sparse is not None:
                assert dense <= sparse, (spec.name, key)
                assert sparse <= 2 * dense * 1.02, (spec.name, key)  # 2:4 sparsity is at most 2x
                compared += 1
    assert compared > 40


def test_units_are_sane(specs):
    for spec in specs:
        bf16 = spec.dense_tflops["bf16"]
        assert bf16 is None or 1 <= bf16 <= 5000, spec.name
        assert 4e9 <= spec.memory_bytes <= 300e9, spec.name
        assert 30 <= spec.tdp_w <= 1500, spec.name
        assert 100 <= spec.memory_bandwidth_gb_per_s <= 10000, spec.name
        assert spec.dense_tflops["fp32"] is not None and 1 <= spec.dense_tflops["fp32"] <= 200, spec.name
        assert spec.pcie_generation in (3, 4, 5, 6) and spec.pcie_lanes == 16, spec.name
        assert spec.price_usd is None or 100 <= spec.price_usd <= 100_000, spec.name
        assert spec.rent_usd_per_hour is None or 0.05 <= spec.rent_usd_per_hour <= 20, spec.name


def test_every_row_says_how_it_is_sold_and_what_it_runs(specs):
    for spec in specs:
        assert spec.form_factor in ("SXM", "OAM", "PCIe", "consumer"), spec.name
        assert spec.system_source, spec.name
        if spec.sold_as_systems:  # modules come on 4- or 8-GPU baseboards, never alone
            assert set(spec.system_gpus) <= {4, 8} and spec.system_gpus, spec.name
        else:
            assert spec.system_gpus == tuple(range(1, 9)), spec.name
        # bf16: everything from Ampere on (and CDNA 3); not Volta or Turing, whose bf16 figure is then null
        assert spec.bf16 == (spec.architecture not in ("Volta", "Turing")), spec.name
        assert spec.bf16 == (spec.dense_tflops["bf16"] is not None), spec.name
        assert spec.memory_bandwidth_bytes_per_s == spec.memory_bandwidth_gb_per_s * 1e9 > 1e11, spec.name
        reference = (spec.reference_system, spec.reference_system_power_w, spec.reference_system_ram_bytes,
                     spec.reference_system_source)
        assert all(value is None for value in reference) or all(value is not None for value in reference), spec.name
        assert spec.reference_system is None or spec.sold_as_systems, spec.name
    modules = {spec.name: spec for spec in specs if spec.sold_as_systems}
    assert set(modules) == {"NVIDIA H200 SXM 141GB", "NVIDIA H100 SXM5 80GB", "NVIDIA A100 SXM4 80GB",
                            "NVIDIA A100 SXM4 40GB", "NVIDIA V100 SXM2 16GB", "NVIDIA V100 SXM2 32GB",
                            "NVIDIA B200 (HGX)", "AMD Instinct MI300X"}
    assert modules["NVIDIA B200 (HGX)"].system_gpus == (8,)  # HGX B200 is an 8-GPU board
    assert modules["NVIDIA H100 SXM5 80GB"].system_gpus == (4, 8)
    assert modules["AMD Instinct MI300X"].form_factor == "OAM" and modules["AMD Instinct MI300X"].system_gpus == (8,)
    assert modules["NVIDIA H100 SXM5 80GB"].reference_system_power_w == 10200  # DGX H100: ~10.2 kW max
    assert modules["NVIDIA H100 SXM5 80GB"].reference_system_ram_bytes == 2 * 2**40


@pytest.mark.parametrize("text, row", [
    ("4090", "NVIDIA GeForce RTX 4090"), ("rtx 4090", "NVIDIA GeForce RTX 4090"), ("B200", "NVIDIA B200 (HGX)"),
    ("h100 sxm", "NVIDIA H100 SXM5 80GB"), ("a100 80gb sxm", "NVIDIA A100 SXM4 80GB"),
    ("a100 80 pcie", "NVIDIA A100 PCIe 80GB"), ("T4", "NVIDIA T4"), ("6000 ada", "NVIDIA RTX 6000 Ada Generation"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB"), ("NVIDIA L40S", "NVIDIA L40S"),
    ("nvidia geforce rtx 3060 12gb", "NVIDIA GeForce RTX 3060 12GB"),
])
def test_match_gpu_takes_loose_names(text, row):
    assert match_gpu(text).name == row


def test_match_gpu_names_the_close_ones_when_it_cannot():
    ambiguous = match_gpu("a100")
    assert is_na(ambiguous) and "matches 4 catalog GPUs" in ambiguous.reason
    assert all(name in ambiguous.reason for name in ("A100 SXM4 80GB", "A100 SXM4 40GB", "A100 PCIe 40GB",
                                                     "A100 PCIe 80GB"))
    missing = match_gpu("RTX 5090")
    assert is_na(missing) and "not a GPU in the catalog" in missing.reason
    assert "close names: NVIDIA GeForce RTX 4090" in missing.reason
    l40 = match_gpu("l40")  # a model number is not a prefix of another: the L40 is not the L40S
    assert is_na(l40) and "NVIDIA L40S" in l40.reason
    nothing = match_gpu("zzzz")
    assert is_na(nothing) and "the catalog holds: NVIDIA H200 SXM 141GB" in nothing.reason


def test_memory_is_the_stated_size_in_gib(specs):
    assert by_name(specs, "NVIDIA H100 SXM5 80GB").memory_bytes == 80 * 2**30
    assert by_name(specs, "NVIDIA GeForce RTX 4090").memory_bytes == 24 * 2**30
    assert by_name(specs, "NVIDIA H200 SXM 141GB").memory_bytes == 141 * 2**30


def test_tensor_cores_beat_plain_fp32(specs):
    checked = 0
    for spec in specs:
        assert spec.architecture in TENSOR_CORE_ARCHITECTURES, spec.name
        figures = spec.dense_tflops
        for key in ("bf16", "fp16"):
            if figures[key] is not None:
                assert figures[key] >= figures["fp32"], (spec.name, key)
                checked += 1
        if figures["fp8"] is not None:
            assert figures["fp8"] >= figures["fp16"], spec.name
        if figures["fp64_tensor"] is not None:
            assert figures["fp64_tensor"] >= figures["fp64"], spec.name
    assert checked >= 2 * 18 - 4  # only Volta and Turing lack bf16


def test_exact_figures_for_hopper(specs):
    h100, h200 = by_name(specs, "NVIDIA H100 SXM5 80GB"), by_name(specs, "NVIDIA H200 SXM 141GB")
    for spec in (h100, h200):
        assert spec.dense_tflops["bf16"] == pytest.approx(989.4, abs=0.5)
        assert spec.sparse_tflops["bf16"] == pytest.approx(1978.9, abs=1)
        assert spec.compute_capability == "9.0"
    assert h100.dense_tflops == h200.dense_tflops  # same chip and tensor cores; only the memory differs
    assert h200.memory_bandwidth_gb_per_s == 4800 and h100.memory_bandwidth_gb_per_s == 3350
    assert by_name(specs, "NVIDIA A100 SXM4 80GB").dense_tflops["bf16"] == 312
    assert by_name(specs, "NVIDIA GeForce RTX 4090").dense_tflops["fp16"] == pytest.approx(165.2)  # FP32 accumulate


# device names as torch.cuda.get_device_name() / NVML report them -> the row they must resolve to
DEVICE_NAMES = {
    "NVIDIA H200": "NVIDIA H200 SXM 141GB",
    "NVIDIA H200 NVL": "NVIDIA H200 NVL 141GB",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe 80GB",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM4 80GB",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 SXM4 40GB",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 PCIe 40GB",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 PCIe 80GB",
    "NVIDIA GeForce RTX 4090": "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 4080": "NVIDIA GeForce RTX 4080",
    "NVIDIA GeForce RTX 3090": "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 3060": "NVIDIA GeForce RTX 3060 12GB",
    "Tesla T4": "NVIDIA T4",
    "NVIDIA A10": "NVIDIA A10",
    "NVIDIA L4": "NVIDIA L4",
    "NVIDIA L40S": "NVIDIA L40S",
    "Tesla V100-SXM2-16GB": "NVIDIA V100 SXM2 16GB",
    "Tesla V100-SXM2-32GB": "NVIDIA V100 SXM2 32GB",
    "Tesla V100-PCIE-16GB": "NVIDIA V100 PCIe 16GB",
    "Tesla V100-PCIE-32GB": "NVIDIA V100 PCIe 32GB",
    "NVIDIA RTX A6000": "NVIDIA RTX A6000",
    "NVIDIA RTX 6000 Ada Generation": "NVIDIA RTX 6000 Ada Generation",
    "NVIDIA B200": "NVIDIA B200 (HGX)",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
    "  nvidia   geforce rtx 4090 ": "NVIDIA GeForce RTX 4090",
}


@pytest.mark.parametrize("device_name, row", DEVICE_NAMES.items())
def test_find_gpu_resolves_device_names(device_name, row):
    spec = find_gpu(device_name)
    assert not is_na(spec), device_name
    assert spec.name == row


@pytest.mark.parametrize("device_name", [
    "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 3060 Ti", "NVIDIA GH200 480GB", "NVIDIA A10G", "NVIDIA L40", "NVIDIA GB200",
    "Quadro RTX 6000", "Tesla V100S-PCIE-32GB", "Apple M2", "", "cpu",
])
def test_find_gpu_gives_na_for_cards_not_in_the_table(device_name):
    result = find_gpu(device_name)
    assert is_na(result), (device_name, result)
    assert NOT_IN_CATALOG in result.reason


def test_every_row_is_reachable_from_a_real_device_name(specs):
    """Each row has an example name above that resolves to it, so no row is shadowed by another's pattern."""
    assert {spec.name for spec in specs} == set(DEVICE_NAMES.values())


def test_most_specific_match_wins():
    base = by_name(load_catalog(), "NVIDIA H200 SXM 141GB")
    general = dataclasses.replace(base, name="general", match=("h200",))
    specific = dataclasses.replace(base, name="specific", match=("h200 nvl",))
    for order in [(general, specific), (specific, general)]:
        assert find_gpu("NVIDIA H200 NVL", catalog=order).name == "specific"
        assert find_gpu("NVIDIA H200", catalog=order).name == "general"
    first, second = (dataclasses.replace(base, name=name, match=("h200",)) for name in ("first", "second"))
    assert find_gpu("NVIDIA H200", catalog=(first, second)).name == "first"  # a tie goes to the earlier row


def test_peak_tflops(specs):
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    assert peak_tflops(h100, "bf16") == pytest.approx(989.4)
    assert peak_tflops(h100, "fp64") == pytest.approx(66.9)  # DGEMM runs on the FP64 tensor cores
    assert peak_tflops(h100, "fp32") == pytest.approx(66.9)
    assert peak_tflops(find_gpu("NVIDIA GeForce RTX 4090"), "fp64") == NA(
        "NVIDIA GeForce RTX 4090: no dense fp64 figure in hardware/gpus.json (see the row's notes)")
    assert peak_tflops(find_gpu("Tesla V100-SXM2-16GB"), "fp64") == pytest.approx(7.8)  # no FP64 tensor cores
    assert is_na(peak_tflops(find_gpu("Tesla T4"), "bf16"))
    unknown = find_gpu("Mystery GPU 9000")
    assert peak_tflops(unknown, "bf16") is unknown
    for spec in specs:
        for precision in PRECISIONS:
            value = peak_tflops(spec, precision)
            assert is_na(value) or isinstance(value, float)
    with pytest.raises(ValueError, match="unknown precision 'int8'"):
        peak_tflops(h100, "int8")


def write_catalog(tmp_path, rows, **top):
    document = {"schema": 1, "updated": "2026-11-30", "notes": "test", "gpus": rows, **top}
    path = tmp_path / f"gpus{len(list(tmp_path.iterdir()))}.json"  # a fresh name: load_catalog caches per path
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def good_rows():
    return json.loads(GPUS_JSON.read_text())["gpus"][:3]


def test_a_copy_of_the_catalog_loads_from_a_path(tmp_path, good_rows):
    specs = load_catalog(path=write_catalog(tmp_path, good_rows))
    assert [spec.name for spec in specs] == [row["name"] for row in good_rows]


@pytest.mark.parametrize("defect, message", [
    (lambda row: row.pop("tdp_w"), r"row 1 \(NVIDIA H200 NVL 141GB\): missing keys \['tdp_w'\]"),
    (lambda row: row.update(boost_mhz=1980), r"row 1 \(NVIDIA H200 NVL 141GB\).*unknown keys \['boost_mhz'\]"),
    (lambda row: row["dense_tflops"].pop("fp8"), r"row 1 \(NVIDIA H200 NVL 141GB\): dense_tflops must have"),
    (lambda row: row["sparse_tflops"].update(int8=3341), r"row 1 .*sparse_tflops .*unknown \['int8'\]"),
    (lambda row: row["dense_tflops"].update(bf16="835"), r"row 1 .*dense_tflops.bf16 must be a positive number"),
    (lambda row: row.update(memory_bytes=None), r"row 1 .*memory_bytes must be int"),
    (lambda row: row.update(form_factor="MXM"), r"row 1 .*form_factor 'MXM' is not one of"),
    (lambda row: row.update(form_factor="SXM"), r"row 1 .*system_gpus \[1, 2, 3, 4, 5, 6, 7, 8\] does not fit"),
    (lambda row: row.update(system_gpus=[1, 2]), r"row 1 .*a card goes 1 to 8 in a system"),
    (lambda row: row.update(system_gpus=[8, 4]), r"row 1 .*system_gpus must be a sorted list"),
    (lambda row: row.update(bf16=False), r"row 1 .*bf16 is False but dense_tflops.bf16 is 835.5"),
    (lambda row: row.update(bf16="yes"), r"row 1 .*bf16 must be bool"),
    (lambda row: row.update(reference_system="DGX"), r"row 1 .*give all of reference_system"),
    (lambda row: row.update(released="Nov 2024"), r"row 1 .*released 'Nov 2024' is not a date"),
    (lambda row: row.update(match=["H200("]), r"row 1 .*lower-case"),
    (lambda row: row.update(match=["h200("]), r"row 1 .*is not a regular expression"),
])
def test_a_broken_catalog_names_the_row(tmp_path, good_rows, defect, message):
    defect(good_rows[1])
    with pytest.raises(ValueError, match=message):
        load_catalog(path=write_catalog(tmp_path, good_rows))


def test_a_broken_catalog_top_level(tmp_path, good_rows):
    with pytest.raises(ValueError, match="schema 2 is not supported"):
        load_catalog(path=write_catalog(tmp_path, good_rows, schema=2))
    with pytest.raises(ValueError, match="exactly the keys"):
        load_catalog(path=write_catalog(tmp_path, good_rows, extra=1))
    with pytest.raises(ValueError, match="duplicate row names"):
        load_catalog(path=write_catalog(tmp_path, good_rows + good_rows[:1]))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        load_catalog(path=tmp_path / "bad.json")
