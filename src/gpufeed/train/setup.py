"""Resolving `auto` settings before training: precision (measured on the CPU) and batch size (OOM back-off)."""

from __future__ import annotations

import torch

from gpufeed.measure.thresholds import MIN_STEPS_PER_EPOCH
from gpufeed.train.batch_size import AUTO_BATCH_CEILING, find_batch_size
from gpufeed.train.precision import resolve_precision, step_timer, time_training_step
from gpufeed.train.step import Precision


def _cpu_has_bf16() -> bool:
    from gpufeed.hardware.probe import probe_cpu

    cpu = probe_cpu()
    return bool(getattr(cpu, "amx_bf16", False) or getattr(cpu, "avx512_bf16", False))


def choose_precision(name: str, model: torch.nn.Module, device: torch.device, sample_shape, classes: int,
                     batch_size: int = 128) -> Precision:
    """`auto` on a CPU with bf16 instructions times steps of each precision, interleaved, on copies of the model
    (train/precision.py's probe); the global RNG is left as it was."""
    has_bf16 = device.type == "cpu" and name == "auto" and _cpu_has_bf16()

    def timer(precision: Precision):
        return step_timer(model, precision, device, batch_size, sample_shape, classes)

    with torch.random.fork_rng(devices=[]):
        return resolve_precision(name, device, cpu_has_bf16=has_bf16, step_timer=timer)


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



def fit_batch_to_data(batch_size: int, samples_per_rank: int, set_by_user: bool) -> tuple[int, str | None]:
    """(batch size, note or None). With fewer than MIN_STEPS_PER_EPOCH steps an epoch, a batch size the user did
    not set is lowered to the largest power of two that gives at least that many (1 at the least); one the user
    set is kept, and the note says how few steps an epoch has."""
    steps = samples_per_rank // batch_size
    if steps >= MIN_STEPS_PER_EPOCH:
        return batch_size, None
    lowered = 1
    while lowered * 2 * MIN_STEPS_PER_EPOCH <= samples_per_rank and lowered * 2 < batch_size:
        lowered *= 2
    if set_by_user or lowered >= batch_size:
        return batch_size, (f"an epoch has only {steps} step{'s' if steps != 1 else ''} at batch {batch_size} "
                            f"({samples_per_rank} samples): too few for the model to learn much; lower "
                            f"--batch-size or add data")
    return lowered, (f"batch size lowered from {batch_size} to {lowered} so that an epoch has "
                     f"{samples_per_rank // lowered} steps ({samples_per_rank} samples); set --batch-size to keep "
                     f"yours")
