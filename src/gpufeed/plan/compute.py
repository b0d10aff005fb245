"""Compute: FLOPs of one training step, and how long a run takes on a GPU at a model-FLOPs utilisation (MFU).

FLOPs come from `torch.utils.flop_counter.FlopCounterMode` (a multiply-add counts 2; it counts matmuls,
convolutions and attention, not elementwise ops, norms or pooling, which are memory-bound and small in FLOPs).
The step is traced on meta tensors (shapes only, no memory, no arithmetic) at the full batch: forward,
cross-entropy, backward. The optimizer step is left out: a few FLOPs per parameter (AdamW about 10), which is
negligible next to the forward and backward (about 6 FLOPs per parameter per *sample* for a dense layer).
Backward costs about 2x forward for a layer whose input needs a gradient (input grad + weight grad), but only
1x for the first layer, whose input (the batch) needs none, so a one-layer model counts 2x forward in all.

Hours = total FLOPs / (peak TFLOP/s x 1e12 x MFU x GPUs). MFU is the fraction of the card's dense peak a real
training step achieves (PaLM, Chowdhery et al. 2022, appendix B, defines it this way: model FLOPs per second
over peak). It is either measured here by `calibrate_mfu` or the stated default, always with a band.
Several GPUs are assumed to scale linearly (data parallel, communication hidden behind compute), which is
optimistic for small models on a slow interconnect.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpufeed.bench.kernels import device_label
from gpufeed.errors import ConfigError
from gpufeed.hardware.na import NA, is_na
from gpufeed.measure.timing import time_call
from gpufeed.plan.fake_model import meta_model
from gpufeed.train.step import TRAIN_PRECISIONS, Precision, TrainStep, make_optimizer, prepare_model, random_batch

# Rule of thumb, not a measurement. Large dense transformer training reaches roughly 30-50% MFU on A100/H100
# (PaLM reports 46% on TPU v4; Megatron-LM and MosaicML report 35-55% for GPT-style models); small CNNs and
# MLPs at small batch sizes reach less (memory-bound norms and activations, launch overhead), often 10-30%.
DEFAULT_MFU = 0.35
DEFAULT_MFU_BAND = (0.2, 0.5)
DEFAULT_MFU_SOURCE = ("default 0.35 (band 0.2-0.5): a rule of thumb from published large-model training "
                      "(30-50% of dense peak, PaLM's MFU definition); small CNNs usually run lower")
# A fraction measured on one device carries over to another only roughly: different kernels, a different
# balance of memory bandwidth to FLOP/s (faster cards usually reach a lower fraction on small models).
TRANSFER_BAND = (0.7, 1.3)


@dataclass(frozen=True)
class ComputeEstimate:
    """FLOPs per step (forward + backward, meta-traced), steps, and the MFU with its band and where it came from."""

    flops_per_step: int
    flops_per_sample: float
    steps_per_epoch: int
    total_steps: int
    mfu: float
    mfu_low: float
    mfu_high: float
    mfu_source: str


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
                     samples: int, epochs: int, mfu: tuple[float, tuple[float, float], str] | None = None,
                     grad_accumulation: int = 1) -> ComputeEstimate:
    """FLOPs per optimizer step of one GPU (`grad_accumulation` micro-batches of `batch_size`), `samples //
    (batch_size x grad_accumulation)` steps an epoch on one GPU (the last partial step dropped, as `gpufeed
    train` does; N GPUs each run about 1/N of them), and the MFU from `calibrate_mfu` or the default when `mfu`
    is None."""
    if samples < 1 or epochs < 1 or grad_accumulation < 1:
        raise ConfigError(f"samples, epochs and gradient accumulation must be positive, got {samples}, {epochs} "
                          f"and {grad_accumulation}")
    per_step = flops_per_step(model, input_shape, batch_size, num_classes) * grad_accumulation
    batch_size *= grad_accumulation
    steps = max(samples // batch_size, 1)
    value, (low, high), source = mfu or (DEFAULT_MFU, DEFAULT_MFU_BAND, DEFAULT_MFU_SOURCE)
    if not 0 < low <= value <= high:
        raise ConfigError(f"MFU band must hold 0 < low <= MFU <= high, got {low}, {value}, {high}")
    return ComputeEstimate(flops_per_step=per_step, flops_per_sample=per_step / batch_size,
                           steps_per_epoch=steps, total_steps=steps * epochs, mfu=value, mfu_low=low,
                           mfu_high=high, mfu_source=source)


def hours_on(gpu_peak_tflops: float, compute: ComputeEstimate, gpus: int = 1,
             per_epoch: bool = False) -> tuple[float, float, float]:
    """(hours, low, high) for the whole run (or one epoch) on `gpus` cards of `gpu_peak_tflops` dense TFLOP/s,
    assuming linear scaling (N cards do the one-card work in 1/N of the time). `low` uses the high end of the
    MFU band (faster), `high` the low end."""
    if gpu_peak_tflops <= 0 or gpus < 1:
        raise ConfigError(f"peak TFLOP/s and GPUs must be positive, got {gpu_peak_tflops} and {gpus}")
    steps = compute.steps_per_epoch if per_epoch else compute.total_steps
    flops = compute.flops_per_step * steps
    rate = gpu_peak_tflops * 1e12 * gpus  # FLOP/s at 100% MFU
    hours = [flops / (rate * mfu) / 3600 for mfu in (compute.mfu, compute.mfu_high, compute.mfu_low)]
    return hours[0], hours[1], hours[2]


def samples_per_second(gpu_peak_tflops: float, compute: ComputeEstimate, gpus: int = 1) -> float:
    """Samples/s the GPUs consume at the high end of the MFU band: what the input pipeline must sustain."""
    return gpu_peak_tflops * 1e12 * gpus * compute.mfu_high / compute.flops_per_sample


def calibrate_mfu(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, num_classes: int,
                  device: torch.device | str, precision: str, peak_tflops: float | NA | None,
                  warmup: int = 2, repeats: int = 5, optimizer: str = "adamw",
                  channels_last: bool = True) -> tuple[float, tuple[float, float], str]:
    """(MFU, (low, high), source) from a short real run on `device`: `warmup` untimed then `repeats` timed
    training steps (train/step.py's, with the plan's `optimizer`, batches as the feed gives them) of a copy of
    `model`; achieved FLOP/s = counted FLOPs per step / median seconds, divided by `peak_tflops` (that device's
    dense peak for `precision`).
    The band is the fastest and slowest step widened by TRANSFER_BAND (a rule of thumb for other cards).
    With no peak known, the default and a source saying why."""
    if is_na(peak_tflops) or peak_tflops is None or peak_tflops <= 0:
        why = peak_tflops.reason if is_na(peak_tflops) else "no peak given"
        return DEFAULT_MFU, DEFAULT_MFU_BAND, f"{DEFAULT_MFU_SOURCE}; not measured here ({why})"
    if precision not in TRAIN_PRECISIONS:
        raise ConfigError(f"cannot calibrate {precision!r}; choose one of {', '.join(TRAIN_PRECISIONS)}")
    device = torch.device(device)
    chosen = Precision(precision, "calibration")
    copied = prepare_model(copy.deepcopy(model), chosen, device, channels_last).train()
    step = TrainStep(copied, make_optimizer(optimizer, copied.parameters()), chosen, device.type,
                     scaler=chosen.scaler(device.type))
    inputs, labels = random_batch(batch_size, input_shape, num_classes, device,
                                  chosen.input_dtype if channels_last else chosen.parameter_dtype, channels_last)
    flops = flops_per_step(model, input_shape, batch_size, num_classes)
    timing = time_call(lambda: step(inputs, labels), device, warmup=warmup, repeats=repeats)
    peak = peak_tflops * 1e12
    mfu = flops / timing.median_s / peak
    low, high = flops / timing.max_s / peak * TRANSFER_BAND[0], flops / timing.min_s / peak * TRANSFER_BAND[1]
    source = (f"measured on {device_label(device)}: {flops / 1e9:.3g} GFLOPs a step (batch {batch_size}, "
              f"{precision}, {optimizer}) in a median {timing.median_s * 1e3:.3g} ms over {timing.runs} steps after "
              f"{warmup} warm-up ({timing.method}) = {flops / timing.median_s / 1e12:.3g} TFLOP/s of a "
              f"{peak_tflops:.3g} TFLOP/s peak; band x{TRANSFER_BAND[0]}-x{TRANSFER_BAND[1]} for other cards "
              f"(rule of thumb)")
    return mfu, (low, high), source
