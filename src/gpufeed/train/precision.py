"""Which precision a run trains in: the user's choice checked, and what `auto` picks on this device (on a CPU
with bf16 instructions, by timing the training step in both)."""

from __future__ import annotations

import copy
import time

import torch

from gpufeed.errors import ConfigError
from gpufeed.train.step import TRAIN_PRECISIONS, Precision, TrainStep, make_optimizer, prepare_model, random_batch

PRECISIONS = ("auto", *TRAIN_PRECISIONS)


def resolve_precision(name: str, device: torch.device, cpu_has_bf16: bool = False, time_step=None) -> Precision:
    """Turn the user's choice into a Precision. `auto`: bf16 on GPUs that have it, else fp16; fp32 on the CPU
    unless the CPU has bf16 instructions (AMX / avx512_bf16) and `time_step(precision) -> seconds` measures bf16
    faster by at least 10%."""
    if name not in PRECISIONS:
        raise ConfigError(f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    if name != "auto":
        if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"{torch.cuda.get_device_name(device)} has no bf16; use --precision fp16 or fp32")
        return Precision(name, "asked for")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision("bf16", "auto: the GPU supports bf16")
        return Precision("fp16", "auto: the GPU lacks bf16, fp16 with a gradient scaler")
    if device.type != "cpu" or not cpu_has_bf16 or time_step is None:
        return Precision("fp32", "auto: fp32 on this device")
    fp32_s, bf16_s = time_step(Precision("fp32", "")), time_step(Precision("bf16", ""))
    if bf16_s * 1.1 < fp32_s:
        return Precision("bf16", f"auto: bf16 measured {fp32_s / bf16_s:.2f}x faster than fp32 on this CPU")
    return Precision("fp32", f"auto: bf16 measured {fp32_s / bf16_s:.2f}x of fp32 speed on this CPU; kept fp32")


def time_training_step(model: torch.nn.Module, precision: Precision, device: torch.device, batch_size: int,
                       sample_shape: tuple[int, int, int], num_classes: int, optimizer: str = "adamw",
                       repeats: int = 3) -> float:
    """Median seconds of the training step (train/step.py: forward, backward, optimizer step) on random data,
    run on a copy of the model with its own optimizer; the model and the global RNG are left as they were."""
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        return _time_steps(copy.deepcopy(model), precision, device, batch_size, sample_shape, num_classes,
                           optimizer, repeats)


def _time_steps(model, precision, device, batch_size, sample_shape, num_classes, optimizer, repeats) -> float:
    model = prepare_model(model, precision, device)
    step = TrainStep(model, make_optimizer(optimizer, model.parameters()), precision, device.type,
                     scaler=precision.scaler(device.type))
    images, labels = random_batch(batch_size, sample_shape, num_classes, device, precision.input_dtype)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        step(images, labels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    measured = sorted(times[1:] or times)  # the first step pays one-time costs
    return measured[len(measured) // 2]
