"""Kernel FLOPs against hand arithmetic, the CPU sweep's results and its `unmeasured` lines."""

import statistics

import pytest
import torch

from gpufeed.bench.kernels import (
    cap_sizes_for_memory,
    conv_benchmark,
    count_flops,
    matmul_sweep,
)
from gpufeed.hardware.devices import device_label
from gpufeed.hardware.na import NA
from gpufeed.hardware.precisions import PRECISIONS

QUICK = {"repeats": 3, "warmup": 1, "min_seconds": 0.0}


@pytest.mark.parametrize("m, n, k", [(3, 5, 7), (64, 32, 16), (128, 256, 512)])
def test_matmul_flops_are_two_m_n_k(m, n, k):
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert count_flops(lambda: torch.mm(a, b)) == 2 * m * n * k


@pytest.mark.parametrize("batch, cin, cout, hw, k", [(2, 3, 8, 8, 3), (4, 16, 32, 12, 5)])
def test_conv_flops_are_two_b_cout_h_w_cin_k_k(batch, cin, cout, hw, k):
    results, unmeasured = conv_benchmark("cpu", ["fp32"], batch=batch, in_channels=cin, out_channels=cout,
                                         height_width=hw, kernel=k, **QUICK)
    assert unmeasured == [] and len(results) == 1
    result = results[0]
    assert result.flops == 2 * batch * cout * hw * hw * cin * k * k
    assert (result.op, result.size) == ("conv2d", f"{batch}, {cin}->{cout} channels, {hw}x{hw}, {k}x{k}")


@pytest.mark.timing
def test_cpu_sweep_results_and_unmeasured():
    sizes = (64, 128)
    # max_call_s: no size skipped for its predicted time on a loaded machine (test_slow_sizes_are_skipped_and_named)
    results, unmeasured = matmul_sweep("cpu", PRECISIONS, sizes, peaks={("cpu", "fp32"): 1.0}, max_call_s=60.0,
                                       **QUICK)
    # every precision but tf32 runs on a CPU (torch 2.13): each is measured at every size, and an error in one
    # is a failure here, not a line that could stand for it
    assert unmeasured == ["matmul tf32 on cpu: no TF32 on CPUs"]
    assert sorted((r.precision, r.size) for r in results) == sorted(
        (precision, f"{n} x {n} x {n}") for precision in PRECISIONS if precision != "tf32" for n in sizes)
    for result in results:
        n = int(result.size.split(" x ")[0])
        assert result.flops == 2 * n**3 and result.size == f"{n} x {n} x {n}"
        assert (result.op, result.device, result.runs, result.tf32_matmul, result.tf32_cudnn) == (
            "matmul", "cpu", 3, None, None)
        assert 0 < result.seconds_min <= result.seconds_median <= result.seconds_max
        assert len(result.seconds) == result.runs  # every repeat, the figures computed from them
        assert (statistics.median(result.seconds), min(result.seconds), max(result.seconds)) == (
            result.seconds_median, result.seconds_min, result.seconds_max)
        assert 0 < result.tflops < 1000  # a lower bound on the time: no CPU does a petaflop
        assert result.tflops == pytest.approx(result.flops / result.seconds_median / 1e12)
        expected_fraction = result.tflops / 1.0 if result.precision == "fp32" else None
        assert result.fraction_of_peak == expected_fraction


@pytest.mark.timing
def test_a_known_size_matmul_has_sane_throughput():
    results, unmeasured = matmul_sweep("cpu", ["fp32"], [256], **QUICK)
    assert unmeasured == [] and results[0].flops == 2 * 256**3
    assert 0 < results[0].tflops < 1000  # a lower bound on the time


def test_a_kernel_the_device_cannot_run_is_reported_not_raised(monkeypatch):
    def not_for_half(*args, **kwargs):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'\nmore detail")

    monkeypatch.setattr(torch, "mm", not_for_half)
    results, unmeasured = matmul_sweep("cpu", ["fp16", "int8"], [32, 64], **QUICK)
    assert results == []
    assert unmeasured == ["matmul fp16 on cpu at 32 x 32 x 32: RuntimeError: \"addmm_impl_cpu_\" not implemented "
                          "for 'Half'", "matmul int8 on cpu: unknown precision 'int8' (known: fp64, fp32, tf32, "
                          "bf16, fp16)"]


@pytest.mark.timing
def test_slow_sizes_are_skipped_and_named():
    # a first call of more than 0 s predicts more than 0 s for the next size: no margin needed
    results, unmeasured = matmul_sweep("cpu", ["fp32"], [32, 64, 128], max_call_s=0.0, **QUICK)
    assert [r.size for r in results] == ["32 x 32 x 32"]
    assert len(unmeasured) == 1 and unmeasured[0].startswith("matmul fp32 on cpu at 64, 128: skipped, 64 would take")


def test_sizes_are_capped_by_memory():
    kept, dropped = cap_sizes_for_memory([4096, 8192], "fp32", free_bytes=2**30, fraction=0.25)
    assert kept == [4096]  # 3 × 4096² × 4 bytes = 192 MiB <= 256 MiB; 8192 needs 768 MiB
    assert dropped == ["8192 x 8192 x 8192: needs 0.75 GiB, over 25% of the 1.00 GiB free"]
    assert cap_sizes_for_memory([4096, 8192], "bf16", NA("unknown")) == ([4096, 8192], [])


def test_cpu_conv_names_tf32_as_unmeasured():
    results, unmeasured = conv_benchmark("cpu", ["tf32", "fp32"], batch=1, in_channels=4, out_channels=4,
                                         height_width=8, **QUICK)
    assert [r.precision for r in results] == ["fp32"]
    assert unmeasured == ["conv2d tf32 on cpu: no TF32 on CPUs"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tf32_flags_are_set_per_precision_and_restored():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    try:
        matmul.allow_tf32, cudnn.allow_tf32 = True, False  # a state neither precision sets
        results, unmeasured = matmul_sweep("cuda", ["fp32", "tf32"], [1024], **QUICK)
        flags = {r.precision: (r.tf32_matmul, r.tf32_cudnn) for r in results}
        if "tf32" in flags:
            assert flags == {"fp32": (False, False), "tf32": (True, True)}
        else:
            assert any("TF32 needs compute capability" in line for line in unmeasured)
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, False)
        conv_benchmark("cuda", ["tf32"], batch=2, **QUICK)
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, False)
        assert all(r.device.startswith("cuda:") and r.flops == 2 * 1024**3 for r in results)
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_conv_flops_and_fraction_of_peak():
    label = device_label("cuda")
    results, _ = conv_benchmark("cuda", ["fp32", "bf16", "fp16"], peaks={(label, "fp16"): 1e6}, **QUICK)
    assert all(r.flops == 2 * 64 * 64 * 32 * 32 * 64 * 9 for r in results)
    assert all((r.fraction_of_peak is not None) == (r.precision == "fp16") for r in results)
