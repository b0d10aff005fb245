"""Roofline step times on hand-made operators and catalog rows, each against arithmetic done by hand."""

import dataclasses

import pytest

from gpufeed.hardware.catalog import load_catalog, match_gpu
from gpufeed.hardware.na import is_na
from gpufeed.plan.roofline import DEFAULT_EFFICIENCY, Efficiency, model_flops_utilisation, rate_for, step_time
from gpufeed.plan.traffic import OperatorCost, StepTraffic

TEMPLATE = load_catalog()[0]
# 100 TFLOP/s bf16 and fp32-through-TF32, 10 TFLOP/s fp32, 1,000 GB/s; efficiencies 0.5 and 0.5, no band
CARD = dataclasses.replace(TEMPLATE, name="card", memory_bandwidth_gb_per_s=1000.0,
                           dense_tflops={**dict.fromkeys(TEMPLATE.dense_tflops), "bf16": 100.0, "fp16": 100.0,
                                         "tf32": 100.0, "fp32": 10.0})
HALF = Efficiency(compute=0.5, memory=0.5, low=0.5, high=2.0, source="test")


def op(name="convolution", kind="convolution", dtype="bfloat16", flops=0, nbytes=0, nchw=0, optimizer=False,
       count=1):
    return OperatorCost(name, kind, dtype, flops, nbytes, nchw, optimizer, count)


def traffic(*operators, precision="bf16"):
    return StepTraffic(precision=precision, batch_size=32, operators=operators, method="test")


def test_each_operator_takes_the_longer_of_its_flops_and_its_bytes():
    step = traffic(op(flops=10**12, nbytes=10**9),  # 1e12 / 50e12 = 20 ms compute; 1e9 / 500e9 = 2 ms memory
                   op("relu_", "other", nbytes=5 * 10**9, count=2),  # 2 x 5e9 / 500e9 = 20 ms memory
                   op("add_", "other", "float32", nbytes=10**9, optimizer=True))  # 2 ms, once per step
    timed = step_time(step, CARD, HALF)
    assert timed.seconds == pytest.approx(0.020 + 0.020 + 0.002)
    assert (timed.compute_bound_s, timed.memory_bound_s) == (pytest.approx(0.020), pytest.approx(0.022))
    # the sum of maxima, not the maximum of sums: max(20 ms, 2 + 20 + 2 ms) = 24 ms would hide the convolution
    assert timed.seconds > max(0.020, 0.024)
    # two micro-batches: the forward-backward twice, the optimizer once
    assert step_time(step, CARD, HALF, grad_accumulation=2).seconds == pytest.approx(2 * 0.040 + 0.002)
    # the band: efficiencies x2 (capped at 1) and x0.5
    assert timed.seconds_fast == pytest.approx(0.010 + 0.010 + 0.001)
    assert timed.seconds_slow == pytest.approx(0.040 + 0.040 + 0.004)


def test_rates_by_dtype_and_precision():
    a100, mi300x, v100 = match_gpu("a100 80gb sxm"), match_gpu("mi300x"), match_gpu("v100 sxm2 16")
    conv, matmul = op(dtype="float32"), op("mm", "matmul", "float32")
    assert rate_for(a100, conv, "fp32") == ("tf32", 156.0)  # torch's default: cuDNN convolutions in TF32
    assert rate_for(a100, matmul, "fp32") == ("fp32", 19.5)  # ... and matrix products in FP32
    assert rate_for(a100, matmul, "tf32") == ("tf32", 156.0)
    assert rate_for(mi300x, conv, "fp32") == ("fp32", 163.4)  # ROCm torch does not use TF32 by default
    assert rate_for(v100, conv, "fp32") == ("fp32", 15.7)  # no TF32 on Volta
    assert rate_for(v100, op(dtype="float16"), "fp16") == ("fp16", 125.0)
    assert rate_for(a100, op(dtype="float64"), "fp64") == ("fp64", 19.5)  # the FP64 tensor cores


def test_nchw_convolutions_on_tensor_cores_pay_for_transposes():
    # 1e9 activation bytes of an NCHW convolution: read and write each once more, 2e9 / 500e9 = 4 ms
    nchw = op(flops=10**12, nbytes=10**9, nchw=10**9)
    assert step_time(traffic(nchw), CARD, HALF).seconds == pytest.approx(0.020 + 0.004)
    assert step_time(traffic(nchw), CARD, HALF).layout_s == pytest.approx(0.004)
    # fp32 without TF32 (no tensor cores): no transposes; 1e12 / (10e12 x 0.5) = 200 ms
    no_tf32 = dataclasses.replace(CARD, dense_tflops={**CARD.dense_tflops, "tf32": None})
    fp32 = op(dtype="float32", flops=10**12, nbytes=10**9, nchw=10**9)
    assert step_time(traffic(fp32, precision="fp32"), no_tf32, HALF).seconds == pytest.approx(0.200)
    # fp32 with torch's default TF32 convolutions: tensor cores, so the transposes again
    assert step_time(traffic(fp32, precision="fp32"), CARD, HALF).seconds == pytest.approx(0.020 + 0.004)


def test_an_unknown_rate_is_na_and_mfu_by_hand():
    rtx4090 = match_gpu("4090")
    timed = step_time(traffic(op("mm", "matmul", "float64", flops=10**9), precision="fp64"), rtx4090)
    assert is_na(timed) and "no dense fp64 figure" in timed.reason
    # 1e12 FLOPs in 0.1 s on a 312 TFLOP/s card: 10 TFLOP/s, 3.2%
    assert model_flops_utilisation(1e12, 0.1, match_gpu("a100 80gb sxm"), "bf16") == pytest.approx(10 / 312)
    assert model_flops_utilisation(1e12, 0.1, rtx4090, "fp64") is None


def test_the_default_band_holds_the_central_time():
    timed = step_time(traffic(op(flops=10**12, nbytes=10**10)), CARD)
    assert timed.seconds_fast < timed.seconds < timed.seconds_slow
    compute = 1e12 / (100e12 * DEFAULT_EFFICIENCY.compute)
    memory = 1e10 / (1000e9 * DEFAULT_EFFICIENCY.memory)
    assert timed.seconds == pytest.approx(max(compute, memory))
