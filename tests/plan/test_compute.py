"""FLOPs per step against hand arithmetic, hours by hand, and a real (short) calibration of the efficiencies on
the CPU against a catalog row."""

import dataclasses

import pytest
import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import match_gpu
from gpufeed.plan.compute import (
    ComputeEstimate,
    calibrate_efficiency,
    efficiency_of,
    estimate_compute,
    flops_per_step,
    hours_for,
)
from gpufeed.plan.roofline import DEFAULT_EFFICIENCY, Efficiency, StepTime, step_time
from gpufeed.plan.traffic import trace_traffic
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


def made_up(steps_per_epoch=100, epochs=10):
    return ComputeEstimate(flops_per_step=10**15, flops_per_sample=1.0, steps_per_epoch=steps_per_epoch,
                           total_steps=steps_per_epoch * epochs, bytes_per_step=0, compute_efficiency=0.5,
                           memory_efficiency=0.5, efficiency_low=0.5, efficiency_high=2.0, efficiency_source="test",
                           method="test")


def test_hours_by_hand():
    # 1,000 steps of 20 s = 20,000 s = 5.56 h; the band's steps of 10 s and 40 s: 2.78 h and 11.1 h
    step = StepTime(seconds=20.0, seconds_fast=10.0, seconds_slow=40.0, compute_bound_s=20.0, memory_bound_s=0.0,
                    layout_s=0.0, rates={})
    hours, fast, slow = hours_for(step, made_up())
    assert hours == pytest.approx(20_000 / 3600) == pytest.approx(5.5556, abs=1e-4)
    assert (fast, slow) == (pytest.approx(hours / 2), pytest.approx(hours * 2))
    assert hours_for(step, made_up(), gpus=4)[0] == pytest.approx(hours / 4)
    assert hours_for(step, made_up(), per_epoch=True)[0] == pytest.approx(hours / 10)
    with pytest.raises(ConfigError):
        hours_for(step, made_up(), gpus=0)


def test_estimate_compute_steps_bytes_and_default_efficiency():
    model = build_model("mlp", SHAPE, 10, hidden=())
    traffic = trace_traffic(model, SHAPE, 100, 10, "fp32", "sgd")
    estimate = estimate_compute(model, SHAPE, batch_size=100, num_classes=10, samples=50_050, epochs=3,
                                traffic=traffic)
    assert estimate.steps_per_epoch == 500 and estimate.total_steps == 1500  # the partial step is dropped
    assert estimate.flops_per_step == 2 * linear(PIXELS, 10, 100) == traffic.flops
    assert estimate.flops_per_sample == pytest.approx(2 * linear(PIXELS, 10, 1))
    assert estimate.bytes_per_step == traffic.bytes + traffic.optimizer_bytes
    assert efficiency_of(estimate) == DEFAULT_EFFICIENCY
    twice = estimate_compute(model, SHAPE, 100, 10, 50_050, 3, traffic, grad_accumulation=2)
    assert twice.bytes_per_step == 2 * traffic.bytes + traffic.optimizer_bytes  # one optimizer step for two
    with pytest.raises(ConfigError, match="band"):
        estimate_compute(model, SHAPE, 100, 10, 1000, 1, traffic, Efficiency(0.5, 0.5, 1.2, 2.0, "bad"))


def test_calibrating_makes_the_roofline_time_the_measured_one():
    """On the CPU against a catalog row (the arithmetic is the same as on that GPU): the efficiencies scaled so
    that the roofline step on the row is the measured median."""
    model = build_model("mlp", SHAPE, 10, hidden=(256,))
    spec = match_gpu("4090")
    traffic = trace_traffic(model, SHAPE, 64, 10, "fp32", "adamw", device_type="cpu")
    efficiency = calibrate_efficiency(model, SHAPE, 64, 10, "cpu", "fp32", spec, traffic, warmup=1, repeats=3)
    assert efficiency.compute / efficiency.memory == pytest.approx(DEFAULT_EFFICIENCY.compute /
                                                                   DEFAULT_EFFICIENCY.memory)
    median_ms = float(efficiency.source.split("median ")[1].split(" ms")[0])
    assert step_time(traffic, spec, efficiency).seconds * 1e3 == pytest.approx(median_ms, rel=0.01)
    assert efficiency.low <= 1 <= efficiency.high and efficiency.source.startswith("measured on cpu")
    fp64 = trace_traffic(model, SHAPE, 8, 10, "fp64", "adamw")  # a GeForce card has no fp64 figure: the default
    unknown = calibrate_efficiency(model, SHAPE, 8, 10, "cpu", "fp64", spec, fp64)
    assert dataclasses.replace(unknown, source="") == dataclasses.replace(DEFAULT_EFFICIENCY, source="")
    assert "not measured here" in unknown.source and "no dense fp64" in unknown.source
