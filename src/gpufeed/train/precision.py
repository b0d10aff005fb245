"""Numeric precision of training: fp64, fp32, bf16 or fp16 (autocast), and what `auto` picks on this device."""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass

import torch

from gpufeed.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "fp64")


@dataclass(frozen=True)
class Precision:
    """`name` is fp32|bf16|fp16|fp64; `reason` says why it was chosen (for the config and the summary)."""

    name: str
    reason: str

    @property
    def parameter_dtype(self) -> torch.dtype:
        return torch.float64 if self.name == "fp64" else torch.float32

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.name)

    @property
    def input_dtype(self) -> torch.dtype:
        """What the feed delivers: bf16 batches under bf16 autocast halve the bytes; fp16 stays fp32 input."""
        return {"bf16": torch.bfloat16, "fp64": torch.float64}.get(self.name, torch.float32)

    def autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def scaler(self, device: torch.device) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(device.type) if self.name == "fp16" else None


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
                       sample_shape: tuple[int, int, int], num_classes: int, repeats: int = 3) -> float:
    """Median seconds of a forward+backward step on random data, run on a copy of the model."""
    model = copy.deepcopy(model)
    images = torch.randn(batch_size, *sample_shape, device=device, dtype=precision.input_dtype)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, num_classes, (batch_size,), device=device)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with precision.autocast(device):
            loss = torch.nn.functional.cross_entropy(model(images.to(precision.parameter_dtype)
                                                           if precision.autocast_dtype is None else images), labels)
        loss.backward()
        times.append(time.perf_counter() - start)
    measured = sorted(times[1:] or times)  # the first step pays one-time costs
    return measured[len(measured) // 2]
