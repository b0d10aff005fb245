"""CPU peaks against hand arithmetic for known flag sets; clock fallbacks; unknown GPUs."""

import dataclasses

import pytest

from gpufeed.hardware.na import NA
from gpufeed.hardware.peak import cpu_peak, cpu_peaks, gpu_peaks, peak_table, proven_peaks
from gpufeed.hardware.precisions import PRECISIONS
from gpufeed.hardware.probe import CpuInfo, probe_cpu

UNREAD = NA("not readable in this fake")


def fake_cpu(flags, cores=4, max_mhz=3000.0, base_mhz=UNREAD, current_mhz=UNREAD, model="fake", vendor=UNREAD,
             family=UNREAD, model_number=UNREAD):
    return CpuInfo(model=model, vendor=vendor, family=family, model_number=model_number,
                   physical_cores=cores, logical_cores=cores, usable_cores=cores,
                   avx2="avx2" in flags, avx512f="avx512f" in flags, avx512_bf16="avx512_bf16" in flags,
                   amx_tile="amx_tile" in flags, amx_bf16="amx_bf16" in flags, max_clock_mhz=max_mhz,
                   base_clock_mhz=base_mhz, current_clock_mhz=current_mhz, flags=tuple(flags))


def tflops(cpu, precision):
    return cpu_peak(cpu, precision).tflops


def test_avx2_only():
    cpu = fake_cpu(["fma", "avx2"])
    assert tflops(cpu, "fp32") == pytest.approx(4 * 3.0e9 * 32 / 1e12)  # 0.384
    assert tflops(cpu, "fp64") == pytest.approx(4 * 3.0e9 * 16 / 1e12)
    bf16, fp16 = cpu_peak(cpu, "bf16"), cpu_peak(cpu, "fp16")
    assert bf16.tflops is None and "avx512_bf16" in bf16.derivation and "amx_bf16" in bf16.derivation
    assert fp16.tflops is None and "avx512_fp16" in fp16.derivation


def test_avx512f_and_its_derivation_text():
    peak = cpu_peak(fake_cpu(["avx2", "avx512f"]), "fp32")
    assert peak.tflops == pytest.approx(4 * 3.0e9 * 64 / 1e12)  # 0.768
    for factor in ("4 cores", "3.00 GHz", "max clock", "64 fp32 FLOPs/cycle", "AVX-512", "2 FMA units", "16 lanes",
                   "= 0.768 TFLOP/s"):
        assert factor in peak.derivation
    assert tflops(fake_cpu(["avx2", "avx512f"]), "fp64") == pytest.approx(4 * 3.0e9 * 32 / 1e12)


def test_avx512_bf16_without_amx():
    peak = cpu_peak(fake_cpu(["avx2", "avx512f", "avx512_bf16"]), "bf16")
    assert peak.tflops == pytest.approx(4 * 3.0e9 * 128 / 1e12)  # 16 fp32 lanes × 2 products × 2 × 2 units
    assert "VDPBF16PS" in peak.derivation and "128 bf16 FLOPs/cycle" in peak.derivation


def test_amx_bf16_and_amx_fp16():
    cpu = fake_cpu(["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "avx512_fp16"])
    peak = cpu_peak(cpu, "bf16")
    assert peak.tflops == pytest.approx(4 * 3.0e9 * (16 * 16 * 32 * 2 / 16) / 1e12)  # 12.288
    assert "AMX-BF16" in peak.derivation and "1024 bf16 FLOPs/cycle" in peak.derivation
    assert tflops(cpu, "fp16") == pytest.approx(4 * 3.0e9 * 128 / 1e12)  # AVX512-FP16
    assert tflops(fake_cpu([*cpu.flags, "amx_fp16"]), "fp16") == pytest.approx(12.288)


def test_clock_fallbacks_say_which_clock():
    base = cpu_peak(fake_cpu(["avx512f"], cores=2, max_mhz=NA("vm"), base_mhz=2000.0), "fp32")
    assert base.tflops == pytest.approx(2 * 2.0e9 * 64 / 1e12)
    assert "base clock; max unknown" in base.derivation
    current = cpu_peak(fake_cpu(["avx512f"], cores=2, max_mhz=NA("vm"), current_mhz=2100.0), "fp32")
    assert current.tflops == pytest.approx(0.2688)
    assert "current clock; max and base unknown" in current.derivation and "= 0.269 TFLOP/s" in current.derivation
    none = cpu_peak(fake_cpu(["avx512f"], max_mhz=NA("vm")), "fp32")
    assert none.tflops is None and "no CPU clock" in none.derivation


def test_a_figure_above_the_peak_at_the_clock_read_proves_a_faster_clock():
    """2 cores at the current clock 2.0 GHz, AVX-512 (64 fp32, 32 fp64 FLOPs/cycle): fp32 0.256, fp64 0.128
    TFLOP/s. An fp32 matmul at 0.300 TFLOP/s is 117% of it: the cores ran at 2.0 x 0.300 / 0.256 = 2.34375 GHz
    at least, so every CPU peak is taken there: fp32 0.300 (the figure itself), fp64 0.150, "at least"."""
    cpu = fake_cpu(["avx512f"], cores=2, max_mhz=NA("vm"), current_mhz=2000.0)
    peaks = [cpu_peak(cpu, "fp32"), cpu_peak(cpu, "fp64"), cpu_peak(cpu, "tf32")]
    assert [peak.clock for peak in peaks[:2]] == ["current", "current"] and peaks[0].upper_bound  # no cpus.json row
    both = proven_peaks(peaks, [("cpu", "fp32", 0.300, "matmul 1024")])[0]
    assert both.lower_bound and both.bound_word() == ""  # FLOPs/cycle a ceiling, clock a floor: neither bound
    peaks = [dataclasses.replace(peak, upper_bound=False) for peak in peaks]  # as for a CPU with a row
    raised = proven_peaks(peaks, [("cpu", "fp32", 0.300, "matmul 1024"), ("cpu", "fp64", 0.120, "matmul 1024")])
    fp32, fp64, tf32 = raised
    assert fp32.tflops == pytest.approx(0.300) and fp64.tflops == pytest.approx(0.150) and tf32 == peaks[2]
    assert fp32.clock_mhz == pytest.approx(2343.75) and fp32.clock == "proven" and fp32.lower_bound
    assert fp32.bound_word() == "at least " and fp32.bound_word(of_peak=True) == "at most "
    assert "2.34 GHz, the clock the measurements prove (matmul 1024 ran at 0.300 TFLOP/s, 117% of its peak" \
        in fp32.derivation and "at the current clock 2.00 GHz" in fp32.derivation
    shares = [tflops / peak.tflops for peak, tflops in zip(raised[:2], (0.300, 0.120), strict=True)]
    assert max(shares) == pytest.approx(1.0)
    # no figure above its peak: nothing changes
    assert proven_peaks(peaks, [("cpu", "fp32", 0.200, "matmul 1024")]) == peaks


def test_unknowns_are_reasons_not_crashes():
    assert cpu_peak(fake_cpu(["avx512f"], cores=NA("hidden")), "fp32").tflops is None
    unreadable = dataclasses.replace(fake_cpu([]), avx2=NA("no flags"), avx512f=NA("no flags"), flags=NA("no flags"))
    peak = cpu_peak(unreadable, "fp32")
    assert peak.tflops is None and "flags unreadable" in peak.derivation
    assert cpu_peak(fake_cpu(["avx512f"]), "tf32").derivation == "no TF32 on CPUs"


def test_cpu_peaks_cover_every_precision_on_this_machine():
    peaks = cpu_peaks(probe_cpu())
    assert [peak.precision for peak in peaks] == list(PRECISIONS)
    assert all(peak.derivation for peak in peaks)
    assert all(peak.tflops is None or 0 < peak.tflops < 1000 for peak in peaks)
    assert peak_table(peaks)[("cpu", "tf32")] is None


def test_an_unknown_gpu_has_no_peaks_and_says_why():
    peaks = gpu_peaks("Imaginary Accelerator 9000", device="cuda:3")
    assert [peak.precision for peak in peaks] == list(PRECISIONS)
    assert all(peak.tflops is None and peak.derivation and peak.device == "cuda:3" for peak in peaks)


def test_a_catalogued_gpu_takes_its_row_and_names_the_source():
    catalog = pytest.importorskip("gpufeed.hardware.catalog")
    spec = catalog.find_gpu("NVIDIA H200")
    if not isinstance(spec, catalog.GpuSpec):
        pytest.skip("the catalog has no H200 row")
    peaks = {peak.precision: peak for peak in gpu_peaks("NVIDIA H200", device="cuda:1")}
    bf16 = peaks["bf16"]
    assert bf16.tflops == catalog.peak_tflops(spec, "bf16") and bf16.device == "cuda:1"
    assert spec.source in bf16.derivation and spec.source_date in bf16.derivation
