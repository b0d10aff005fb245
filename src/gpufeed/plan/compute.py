"""Compute: FLOPs of one training step, its steps, and how long a run takes on a GPU from the step's roofline.

FLOPs come from `torch.utils.flop_counter.FlopCounterMode` (a multiply-add counts 2; it counts matmuls,
convolutions and attention, not elementwise ops, norms or pooling, which are memory-bound and small in FLOPs).
The step is traced on meta tensors (shapes only, no memory, no arithmetic) at the full batch: forward,
cross-entropy, backward. The optimizer step is left out: a few FLOPs per parameter (AdamW about 10), which is
negligible next to the forward and backward (about 6 FLOPs per parameter per *sample* for a dense layer).
Backward costs about 2x forward for a layer whose input needs a gradient (input grad + weight grad), but only
1x for the first layer, whose input (the batch) needs none, so a one-layer model counts 2x forward in all.

Time per step is roofline.py's: each operator's FLOPs at the card's peak and its bytes (traffic.py) at the
card's bandwidth, each at an efficiency, the longer of the two, summed. The efficiencies are either the fitted
default (roofline.DEFAULT_EFFICIENCY) or scaled by `calibrate_efficiency` to a step measured on this machine's
GPU, always with a band. Hours = seconds per step x steps / GPUs: several GPUs are assumed to scale linearly
(data parallel, communication hidden behind compute), which is optimistic for small models on a slow link.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import GpuSpec
from gpufeed.hardware.devices import device_label
from gpufeed.hardware.na import is_na
from gpufeed.hardware.tf32 import tf32_flags
from gpufeed.measure.timing import time_call
from gpufeed.plan.fake_model import meta_model
from gpufeed.plan.roofline import DEFAULT_EFFICIENCY, Efficiency, StepTime, step_time
from gpufeed.plan.traffic import PLAN_PRECISIONS, StepTraffic
from gpufeed.train.step import Precision, TrainStep, make_optimizer, prepare_model, random_batch

# A factor measured on one device carries over to another only roughly: different kernels, a different balance
# of memory bandwidth to FLOP/s. Rule of thumb, as the band around a measured step.
TRANSFER_BAND = (0.7, 1.3)


@dataclass(frozen=True)
class ComputeEstimate:
    """FLOPs per step (forward + backward, meta-traced), steps, the bytes a step moves (traced in the planned
    precision) and the efficiencies the times use, with their band and where they came from."""

    flops_per_step: int
    flops_per_sample: float
    steps_per_epoch: int
    total_steps: int
    bytes_per_step: int
    compute_efficiency: float
    memory_efficiency: float
    efficiency_low: float
    efficiency_high: float
    efficiency_source: str
    method: str


def flops_per_step(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, num_classes: int) -> int:
    """FLOPs of forward + cross-entropy + backward (train/step.py's, in fp32) for a batch of `batch_size` samples
    of `input_shape` (C, H, W), traced on a meta copy of the model (its own parameters are untouched). Raises
    ConfigError when the model cannot run on meta tensors (it reads values, e.g. `.item()`)."""
    if batch_size < 1 or num_classes < 1:
        raise ConfigError(f"batch size and classes must be positive, got {batch_size} and {num_classes}")
    step = TrainStep(meta_model(model).train(), None, Precision("fp32", "counted"), "cpu")
    inputs = torch.empty((batch_size, *input_shape), device="meta")  # (B, C, H, W)
    labels = torch.zeros(batch_size, dtype=torch.long, device="meta")
    try:
        with FlopCounterMode(display=False) as counter:
            step.forward_backward(inputs, labels)
    except (NotImplementedError, RuntimeError) as error:
        raise ConfigError(f"cannot count FLOPs: the model does not run on meta tensors "
                          f"({str(error).splitlines()[0]})") from None
    return int(counter.get_total_flops())


def estimate_compute(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, num_classes: int,
                     samples: int, epochs: int, traffic: StepTraffic, efficiency: Efficiency | None = None,
                     grad_accumulation: int = 1) -> ComputeEstimate:
    """FLOPs per optimizer step of one GPU (`grad_accumulation` micro-batches of `batch_size`), `samples //
    (batch_size x grad_accumulation)` steps an epoch on one GPU (the last partial step dropped, as `gpufeed
    train` does; N GPUs each run about 1/N of them), the traced bytes, and the efficiencies (default when None)."""
    if samples < 1 or epochs < 1 or grad_accumulation < 1:
        raise ConfigError(f"samples, epochs and gradient accumulation must be positive, got {samples}, {epochs} "
                          f"and {grad_accumulation}")
    chosen = efficiency or DEFAULT_EFFICIENCY
    if not 0 < chosen.low <= 1 <= chosen.high or chosen.compute <= 0 or chosen.memory <= 0:
        raise ConfigError(f"efficiencies must be positive with a band low <= 1 <= high, got {chosen}")
    per_step = flops_per_step(model, input_shape, batch_size, num_classes) * grad_accumulation
    batch_size *= grad_accumulation
    steps = max(samples // batch_size, 1)
    return ComputeEstimate(flops_per_step=per_step, flops_per_sample=per_step / batch_size,
                           steps_per_epoch=steps, total_steps=steps * epochs,
                           bytes_per_step=traffic.bytes * grad_accumulation + traffic.optimizer_bytes,
                           compute_efficiency=chosen.compute, memory_efficiency=chosen.memory,
                           efficiency_low=chosen.low, efficiency_high=chosen.high, efficiency_source=chosen.source,
                           method=traffic.method)


def efficiency_of(compute: ComputeEstimate) -> Efficiency:
    return Efficiency(compute.compute_efficiency, compute.memory_efficiency, compute.efficiency_low,
                      compute.efficiency_high, compute.efficiency_source)


def hours_for(step: StepTime, compute: ComputeEstimate, gpus: int = 1,
              per_epoch: bool = False) -> tuple[float, float, float]:
    """(hours, fast end, slow end) for the whole run (or one epoch) on `gpus` cards taking `step` per optimizer
    step, assuming linear scaling (N cards do the one-card work in 1/N of the time)."""
    if gpus < 1:
        raise ConfigError(f"GPUs must be positive, got {gpus}")
    steps = compute.steps_per_epoch if per_epoch else compute.total_steps
    return tuple(seconds * steps / gpus / 3600 for seconds in (step.seconds, step.seconds_fast, step.seconds_slow))


def calibrate_efficiency(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, num_classes: int,
                         device: torch.device | str, precision: str, spec: GpuSpec, traffic: StepTraffic,
                         warmup: int = 2, repeats: int = 5, optimizer: str = "adamw",
                         channels_last: bool = True) -> Efficiency:
    """The default efficiencies scaled so that the roofline time of `traffic` on `spec` (this device's catalog
    row) equals a short real run on `device`: `warmup` untimed then `repeats` timed training steps
    (train/step.py's, with the plan's optimizer and precision, TF32 on under tf32, batches as the feed gives
    them) of a copy of `model`. The band: the fastest and slowest step, widened by TRANSFER_BAND for other cards."""
    if precision not in PLAN_PRECISIONS:
        raise ConfigError(f"cannot calibrate {precision!r}; choose one of {', '.join(PLAN_PRECISIONS)}")
    predicted = step_time(traffic, spec, DEFAULT_EFFICIENCY)
    if is_na(predicted):
        return dataclasses.replace(DEFAULT_EFFICIENCY, source=f"{DEFAULT_EFFICIENCY.source}; not measured here "
                                                              f"({predicted.reason})")
    device = torch.device(device)
    chosen = Precision(precision, "calibration")
    copied = prepare_model(copy.deepcopy(model), chosen, device, channels_last).train()
    step = TrainStep(copied, make_optimizer(optimizer, copied.parameters()), chosen, device.type,
                     scaler=chosen.scaler(device.type))
    inputs, labels = random_batch(batch_size, input_shape, num_classes, device,
                                  chosen.input_dtype if channels_last else chosen.parameter_dtype, channels_last)
    with tf32_flags(device, precision):
        timing = time_call(lambda: step(inputs, labels), device, warmup=warmup, repeats=repeats)
    scale = predicted.seconds / timing.median_s
    low = predicted.seconds / timing.max_s / scale * TRANSFER_BAND[0]
    high = predicted.seconds / timing.min_s / scale * TRANSFER_BAND[1]
    source = (f"measured on {device_label(device)}: a step (batch {batch_size}, {precision}, {optimizer}) in a "
              f"median {timing.median_s * 1e3:.3g} ms over {timing.runs} steps after {warmup} warm-up "
              f"({timing.method}) against {predicted.seconds * 1e3:.3g} ms from the default efficiencies on "
              f"{spec.name}: both scaled by {scale:.3g}; band x{low:.2g}-x{high:.2g} (the steps' spread widened "
              f"x{TRANSFER_BAND[0]}-x{TRANSFER_BAND[1]} for other cards, a rule of thumb)")
    return Efficiency(compute=DEFAULT_EFFICIENCY.compute * scale, memory=DEFAULT_EFFICIENCY.memory * scale,
                      low=min(low, 1.0), high=max(high, 1.0), source=source)
