"""FLOPs per cycle from the microarchitecture table: fake /proc/cpuinfo texts through the probe and the bench's peak,
against hand arithmetic (cores × clock × FLOPs per cycle), and the table itself checked row by row."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from gpufeed.hardware.cpu import parse_cpu_identity, probe_cpu
from gpufeed.hardware.cpu_table import find_cpu_row, load_cpu_table
from gpufeed.hardware.na import is_na
from gpufeed.hardware.peak import cpu_peak

X86_FLAGS = "fpu sse sse2 fma avx avx2 avx512f avx512dq avx512bw avx512vl"


def x86(vendor: str, family: int, model: int, name: str, extra_flags: str = "") -> str:
    line = (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\nstepping\t: 1\nflags\t\t: {X86_FLAGS} {extra_flags}\n\n")
    return line + line.replace("processor\t: 0", "processor\t: 1")


def arm(part: str, features: str = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics") -> str:
    return (f"processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
            f"CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: {part}\nCPU revision\t: 1\n")


EPYC_9654 = x86("AuthenticAMD", 25, 17, "AMD EPYC 9654 96-Core Processor", "avx512_bf16")
XEON_8480 = x86("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+", "avx512_bf16 amx_tile amx_bf16")
XEON_8380 = x86("GenuineIntel", 6, 106, "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz")
XEON_4114 = x86("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz")
XEON_8180 = x86("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz")
XEON_5118 = x86("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz")
EPYC_9755 = x86("AuthenticAMD", 26, 2, "AMD EPYC 9755 128-Core Processor", "avx512_bf16")
RYZEN_9950X = x86("AuthenticAMD", 26, 68, "AMD Ryzen 9 9950X 16-Core Processor", "avx512_bf16")
RYZEN_AI_370 = x86("AuthenticAMD", 26, 36, "AMD Ryzen AI 9 HX 370 w/ Radeon 890M", "avx512_bf16")
XEON_6980P = x86("GenuineIntel", 6, 173, "Intel(R) Xeon(R) 6980P", "avx512_bf16 amx_tile amx_bf16")
NEOVERSE_V1 = arm("0xd40", "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve bf16 svebf16 i8mm")
NEOVERSE_N1 = arm("0xd0c")

CORES, MHZ = 4, 3000.0


def cpu_from(text: str):
    """The probe's reading of `text`, with the machine-dependent core count and clock fixed."""
    return dataclasses.replace(probe_cpu(text), physical_cores=CORES, max_clock_mhz=MHZ)


def per_cycle(flops: int) -> float:
    return CORES * MHZ * 1e6 * flops / 1e12  # TFLOP/s


@pytest.mark.parametrize("text, precision, flops, row_words", [
    (EPYC_9654, "fp32", 32, "Zen 4"),  # AVX-512 on 256-bit units: half the two-512-bit-unit figure
    (EPYC_9654, "fp64", 16, "Zen 4"),
    (EPYC_9654, "bf16", 64, "Zen 4"),
    (XEON_8480, "fp32", 64, "Sapphire Rapids"),
    (XEON_8480, "bf16", 1024, "Sapphire Rapids"),  # AMX-BF16
    (XEON_8380, "fp32", 64, "Ice Lake-SP"),
    (XEON_8180, "fp32", 64, "two 512-bit FMA units"),
    (XEON_4114, "fp32", 32, "one 512-bit FMA unit"),
    (EPYC_9755, "fp32", 64, "Zen 5 server"),
    (RYZEN_9950X, "fp32", 64, "Zen 5 desktop"),
    (RYZEN_AI_370, "fp32", 32, "Zen 5 mobile"),
    (NEOVERSE_V1, "fp32", 32, "Neoverse V1"),
    (NEOVERSE_N1, "fp32", 16, "Neoverse N1"),
])
def test_a_known_microarchitecture_takes_its_row(text, precision, flops, row_words):
    peak = cpu_peak(cpu_from(text), precision)
    assert peak.tflops == pytest.approx(per_cycle(flops))
    assert not peak.upper_bound and "upper bound" not in peak.derivation
    assert f"× {flops} {precision} FLOPs/cycle" in peak.derivation and row_words in peak.derivation
    assert re.search(r"https?://\S+, \d{4}-\d{2}-\d{2}", peak.derivation)  # the row's source: URL and date


@pytest.mark.parametrize("text, identity", [
    (XEON_6980P, "GenuineIntel family 6 model 173"),  # Granite Rapids: no row yet
    (XEON_5118, "GenuineIntel family 6 model 85"),  # Gold 5000: one or two FMA units by SKU, so no row
    (x86("AuthenticAMD", 26, 112, "AMD RYZEN AI MAX+ 395"), "AuthenticAMD family 26 model 112"),
])
def test_a_cpu_without_a_row_gets_the_instruction_set_figure_as_an_upper_bound(text, identity):
    peak = cpu_peak(cpu_from(text), "fp32")
    assert peak.upper_bound and peak.tflops == pytest.approx(per_cycle(64))  # two 512-bit FMA units assumed
    assert peak.derivation.startswith(f"upper bound (no row for {identity} in hardware/cpus.json)")


def test_an_arm_cpu_without_a_row_or_a_listed_rate_is_unknown_not_a_guess():
    unknown = cpu_peak(cpu_from(arm("0xd4e")), "fp32")  # Cortex-X3: no row, and no x86 flags to bound it
    assert unknown.tflops is None and "no row for Arm implementer 0x41 part 0xd4e" in unknown.derivation
    bf16 = cpu_peak(cpu_from(NEOVERSE_V1), "bf16")
    assert bf16.tflops is None and "no native bf16 rate on Arm Neoverse V1" in bf16.derivation


def test_a_row_needs_the_flag_a_vm_may_hide():
    masked = XEON_8480.replace(" avx512f", "").replace(" amx_bf16", "")
    peak = cpu_peak(cpu_from(masked), "fp32")
    assert peak.tflops == pytest.approx(per_cycle(32)) and "AVX2" in peak.derivation  # the row's AVX2 figure
    assert cpu_peak(cpu_from(masked), "bf16").tflops == pytest.approx(per_cycle(128))  # AVX-512 BF16 remains


def test_identity_is_read_from_x86_and_arm_cpuinfo():
    assert parse_cpu_identity(EPYC_9654) == ("AuthenticAMD", 25, 17)
    assert parse_cpu_identity(NEOVERSE_V1) == ("0x41", 8, 0xD40)
    missing = parse_cpu_identity("processor : 0\nmodel name : something\n")
    assert all(is_na(part) for part in missing)
    row = find_cpu_row(probe_cpu("processor : 0\nmodel name : something\nflags : avx2\n"))
    assert is_na(row) and "identity unreadable" in row.reason


def test_every_row_is_sourced_and_no_two_rows_claim_the_same_cpu():
    rows = load_cpu_table()
    assert len(rows) >= 12
    for row in rows:
        assert row.sources and all(source.url.startswith("http") for source in row.sources)
        assert row.flops_per_cycle.get("fp32"), row.name
    unnamed = [(row.vendor, row.family, low, high)
               for row in rows if row.name_match is None for low, high in row.models]
    for index, (vendor, family, low, high) in enumerate(unnamed):
        for other in unnamed[index + 1:]:
            assert (vendor, family) != other[:2] or high < other[2] or other[3] < low, (vendor, family, low, high)


def test_a_malformed_table_is_an_error_naming_the_row(tmp_path: Path):
    path = tmp_path / "cpus.json"
    document = json.loads((Path(__file__).parents[2] / "src/gpufeed/hardware/cpus.json").read_text())
    document["cpus"][0]["sources"] = []
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="row 0 .*sources"):
        load_cpu_table(path)
