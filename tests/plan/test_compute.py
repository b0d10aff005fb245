"""FLOPs per step against hand arithmetic, hours by hand, and a real (short) MFU calibration on the CPU."""

import pytest
import torch
from torch import nn

from gpufeed.bench.peak import cpu_peak
from gpufeed.errors import ConfigError
from gpufeed.hardware.na import NA
from gpufeed.hardware.probe import probe_cpu
from gpufeed.plan.compute import (
    DEFAULT_MFU,
    DEFAULT_MFU_BAND,
    ComputeEstimate,
    calibrate_mfu,
    estimate_compute,
    flops_per_step,
    hours_on,
    samples_per_second,
)
from gpufeed.train.models import build_model

SHAPE = (3, 32, 32)
PIXELS = 3 * 32 * 32


def linear(features_in, features_out, batch):
    """Forward FLOPs of a Linear layer: one multiply-add (2 FLOPs) per input, output and sample."""
    return 2 * batch * features_in * features_out


def test_single_linear_counts_forward_plus_weight_gradient():
    # The batch needs no gradient, so backward is only the weight gradient (1x forward): 2x forward in all.
    model = nn.Sequential(nn.Flatten(), nn.Linear(PIXELS, 10))
    assert flops_per_step(model, SHAPE, 8, 10) == 2 * linear(PIXELS, 10, 8)


def test_mlp_layers_after_the_first_count_three_times_forward():
    batch = 16
    model = build_model("mlp", SHAPE, 10, hidden=(512, 256))
    first = linear(PIXELS, 512, batch)
    later = linear(512, 256, batch) + linear(256, 10, batch)
    assert flops_per_step(model, SHAPE, batch, 10) == 2 * first + 3 * later


def test_conv_then_linear():
    batch = 4
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Flatten(), nn.Linear(16 * 32 * 32, 10))
    conv = 2 * batch * 16 * 32 * 32 * (3 * 3 * 3)  # per output element: 3 channels x 3x3 kernel multiply-adds
    assert flops_per_step(model, SHAPE, batch, 10) == 2 * conv + 3 * linear(16 * 32 * 32, 10, batch)


def test_counting_leaves_the_model_untouched_and_scales_with_batch():
    model = build_model("cnn", SHAPE, 10)
    before = {name: p.clone() for name, p in model.state_dict().items()}
    assert flops_per_step(model, SHAPE, 64, 10) == 64 * flops_per_step(model, SHAPE, 1, 10) != 0
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())


def test_a_model_that_reads_values_is_a_config_error():
    class Reads(nn.Linear):
        def forward(self, x):
            return super().forward(x) * float(x.sum().item() > 0)

    with pytest.raises(ConfigError, match="meta tensors"):
        flops_per_step(nn.Sequential(nn.Flatten(), Reads(PIXELS, 10)), SHAPE, 2, 10)


def made_up(flops_total=1e18, mfu=0.5, band=(0.25, 1.0)):
    return ComputeEstimate(flops_per_step=int(flops_total // 1000), flops_per_sample=1.0, steps_per_epoch=100,
                           total_steps=1000, mfu=mfu, mfu_low=band[0], mfu_high=band[1], mfu_source="test")


def test_hours_by_hand():
    # 1e18 FLOPs / (100e12 FLOP/s x 0.5) = 20,000 s = 5.56 h; the band: MFU 1.0 -> 2.78 h, 0.25 -> 11.1 h
    hours, low, high = hours_on(100.0, made_up())
    assert hours == pytest.approx(20_000 / 3600)
    assert hours == pytest.approx(5.5556, abs=1e-4)
    assert (low, high) == (pytest.approx(hours / 2), pytest.approx(hours * 2))
    assert hours_on(100.0, made_up(), gpus=4)[0] == pytest.approx(hours / 4)
    assert hours_on(100.0, made_up(), per_epoch=True)[0] == pytest.approx(hours / 10)
    with pytest.raises(ConfigError):
        hours_on(0.0, made_up())


def test_samples_per_second_uses_the_fast_end():
    compute = made_up()  # 1 FLOP a sample, MFU high 1.0
    assert samples_per_second(2.0, compute, gpus=3) == pytest.approx(6e12)


def test_estimate_compute_steps_and_default_mfu():
    model = build_model("mlp", SHAPE, 10, hidden=())
    estimate = estimate_compute(model, SHAPE, batch_size=100, num_classes=10, samples=50_050, epochs=3)
    assert estimate.steps_per_epoch == 500 and estimate.total_steps == 1500  # the partial step is dropped
    assert estimate.flops_per_step == 2 * linear(PIXELS, 10, 100)
    assert estimate.flops_per_sample == pytest.approx(2 * linear(PIXELS, 10, 1))
    assert (estimate.mfu, (estimate.mfu_low, estimate.mfu_high)) == (DEFAULT_MFU, DEFAULT_MFU_BAND)
    assert "rule of thumb" in estimate.mfu_source
    with pytest.raises(ConfigError, match="MFU band"):
        estimate_compute(model, SHAPE, 100, 10, 1000, 1, mfu=(0.9, (0.1, 0.5), "bad"))


def test_calibrate_on_cpu_measures_a_fraction():
    peak = cpu_peak(probe_cpu(), "fp32").tflops
    if peak is None:
        pytest.skip("this CPU's fp32 peak is unknown")
    model = build_model("mlp", SHAPE, 10, hidden=(256,))
    mfu, (low, high), source = calibrate_mfu(model, SHAPE, 64, 10, "cpu", "fp32", peak, warmup=1, repeats=3)
    assert 0 < low <= mfu <= high and 0 < mfu < 1.5
    assert source.startswith("measured on cpu")


def test_calibrate_without_a_peak_falls_back_to_the_default():
    model = build_model("mlp", SHAPE, 10, hidden=())
    mfu, band, source = calibrate_mfu(model, SHAPE, 8, 10, "cpu", "tf32", NA("no TF32 on CPUs"))
    assert (mfu, band) == (DEFAULT_MFU, DEFAULT_MFU_BAND)
    assert "no TF32 on CPUs" in source and "not measured" in source
