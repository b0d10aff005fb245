"""Resolving `auto` settings before training: precision (measured on the CPU) and batch size (OOM back-off)."""

from __future__ import annotations

import torch

from gpufeed.train.batch_size import AUTO_BATCH_CEILING, find_batch_size
from gpufeed.train.precision import resolve_precision, time_training_step
from gpufeed.train.step import Precision


def _cpu_has_bf16() -> bool:
    from gpufeed.hardware.probe import probe_cpu

    cpu = probe_cpu()
    return bool(getattr(cpu, "amx_bf16", False) or getattr(cpu, "avx512_bf16", False))


def choose_precision(name: str, model: torch.nn.Module, device: torch.device, sample_shape, classes: int,
                     batch_size: int = 128) -> Precision:
    """`auto` on a CPU with bf16 instructions times a few steps of each precision on a copy of the model."""
    has_bf16 = device.type == "cpu" and name == "auto" and _cpu_has_bf16()

    def time_step(precision: Precision) -> float:
        return time_training_step(model, precision, device, batch_size, sample_shape, classes)

    return resolve_precision(name, device, cpu_has_bf16=has_bf16, time_step=time_step)


def choose_batch_size(requested, model: torch.nn.Module, precision: Precision, device: torch.device, sample_shape,
                      classes: int, limit: int) -> int:
    """A number is taken as is; `auto` is the largest power of two up to 1024 (and the data) that fits."""
    if requested != "auto":
        return int(requested)
    start = 1
    while start * 2 <= min(AUTO_BATCH_CEILING, max(1, limit)):
        start *= 2
    release = torch.cuda.empty_cache if device.type == "cuda" else None

    def try_step(batch: int) -> None:
        time_training_step(model, precision, device, batch, sample_shape, classes, repeats=0)

    batch, _failed = find_batch_size(try_step, start=start, release=release)
    return batch
