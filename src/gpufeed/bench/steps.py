"""Whole training steps (forward, backward, AdamW) of the `gpufeed train` models per device and precision, and
short real training runs per precision: how fast each is, and what it does to accuracy.

Precisions (`hardware.precisions.PRECISIONS`): fp64 (model and inputs in float64), fp32 (TF32 off on CUDA), tf32
(fp32 with TF32 tensor-core matmuls and convolutions, CUDA only), bf16 and fp16 (autocast as `gpufeed train` runs
them, bf16 inputs under bf16, a gradient scaler for fp16).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import torch
from torch import nn

from gpufeed.bench.budget import NO_BUDGET, Budget, OverBudget, budgeted_timing
from gpufeed.bench.results import PrecisionRun, TrainStepResult
from gpufeed.errors import ConfigError, DeviceUnavailable
from gpufeed.hardware.devices import resolve_device
from gpufeed.hardware.precisions import PRECISIONS
from gpufeed.hardware.tf32 import tf32_flags
from gpufeed.train.batch_size import is_out_of_memory
from gpufeed.train.config import TrainConfig
from gpufeed.train.loop import train
from gpufeed.train.models import build_model
from gpufeed.train.step import TRAIN_PRECISIONS, Precision, TrainStep, make_optimizer, prepare_model, random_batch

SAMPLE_SHAPE = (3, 32, 32)  # (C, H, W), the built-in data's
CLASSES = 10
CPU_PRECISIONS = ("fp32", "bf16")  # what the step benchmark runs on a CPU unless told
CUDA_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def _check_precisions(precisions: Sequence[str] | None) -> None:
    for name in precisions or ():
        if name not in PRECISIONS:
            raise ConfigError(f"unknown precision {name!r}; choose from {', '.join(PRECISIONS)}")


def _cuda_has_bf16() -> bool:
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch before 2.3 has no emulation flag
        return bool(torch.cuda.is_bf16_supported())


def unsupported_reason(device: torch.device, precision: str) -> str | None:
    """Why `precision` cannot be measured on `device`, known before trying; None when it may be tried. This is the
    only way a precision is left out: once tried, anything but running out of memory is an error that propagates."""
    if precision == "tf32" and device.type != "cuda":
        return "tf32 is a mode of NVIDIA tensor cores (compute capability 8.0 and later)"
    if precision == "fp64" and device.type == "mps":
        return "Apple's MPS backend has no float64"
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    if precision == "tf32" and major < 8:
        return f"tf32 needs compute capability 8.0 or later; this GPU is {major}.{minor}"
    if precision == "bf16" and not _cuda_has_bf16():
        return f"{torch.cuda.get_device_name(device)} has no native bf16"
    return None


@contextlib.contextmanager
def tf32_mode(device: torch.device, enabled: bool) -> Iterator[None]:
    """TF32 for CUDA matmuls and cuDNN convolutions on (tf32) or off (everything else), restored afterwards
    (through the kernels' switch, which copes with both of torch's ways of setting it)."""
    with tf32_flags(device, "tf32" if enabled else "fp32"):
        yield


def make_train_step(model_name: str, device: torch.device, precision: str,
                    batch_size: int) -> tuple[Callable[[], None], nn.Module]:
    """The training step of `gpufeed train` (train/step.py, AdamW at its defaults) for `model_name` on one fixed
    random batch, with the model it trains. tf32 runs the fp32 step; the caller switches TF32 on (`tf32_mode`).
    Random inputs are drawn from the global RNG (seed it, or fork it, first)."""
    _check_precisions([precision])
    train_precision = Precision(precision, "benchmark")
    model = prepare_model(build_model(model_name, SAMPLE_SHAPE, CLASSES), train_precision, device)
    step = TrainStep(model, make_optimizer("adamw", model.parameters()), train_precision, device.type,
                     scaler=train_precision.scaler(device.type))
    images, labels = random_batch(batch_size, SAMPLE_SHAPE, CLASSES, device, train_precision.input_dtype)
    return (lambda: step(images, labels)), model


def _time_step(model_name: str, device: torch.device, precision: str, batch_size: int, repeats: int,
               warmup: int, budget: Budget = NO_BUDGET) -> TrainStepResult:
    with torch.random.fork_rng(devices=[device.index] if device.type == "cuda" else []):
        torch.manual_seed(0)
        step, _ = make_train_step(model_name, device, precision, batch_size)
    with tf32_mode(device, precision == "tf32"):
        timing = budgeted_timing(step, device, budget, warmup=warmup, repeats=repeats)
    return TrainStepResult(model=model_name, device=str(device), precision=precision, batch_size=batch_size,
                           samples_per_s=batch_size / timing.median_s, seconds_median=timing.median_s,
                           seconds_min=timing.min_s, seconds_max=timing.max_s, runs=timing.runs,
                           speedup_vs_cpu_fp32=None, spread=timing.spread, seconds=timing.seconds)


def _out_of_memory_line(what: str, error: BaseException) -> str:
    """The unmeasured line of a measurement that ran out of memory (`is_out_of_memory`): its error's first line."""
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return f"{what}: {first_line}"


def _with_speedups(results: list[TrainStepResult]) -> list[TrainStepResult]:
    """Each figure divided by the CPU's fp32 figure for the same model and batch (None when there is none)."""
    baseline = {(r.model, r.batch_size): r.samples_per_s for r in results if r.device == "cpu"
                and r.precision == "fp32"}
    return [replace(r, speedup_vs_cpu_fp32=r.samples_per_s / baseline[(r.model, r.batch_size)]
                    if (r.model, r.batch_size) in baseline else None) for r in results]


def _resolve_devices(devices: Sequence[str | torch.device] | None) -> tuple[list[torch.device], list[str]]:
    if devices is None:
        return [torch.device("cpu")] + ([resolve_device("cuda")] if torch.cuda.is_available() else []), []
    found, unmeasured = [], []
    for name in devices:
        try:
            found.append(resolve_device(name))
        except DeviceUnavailable as error:
            unmeasured.append(f"train steps on {name}: {error}")
    return found, unmeasured


def train_step_benchmark(models: Sequence[str] = ("mlp", "cnn"),
                         devices: Sequence[str | torch.device] | None = None,
                         precisions: Sequence[str] | None = None, batch_sizes: Sequence[int] = (64, 256),
                         repeats: int = 10, warmup: int = 3,
                         budget: Budget = NO_BUDGET) -> tuple[list[TrainStepResult], list[str]]:
    """Median seconds and samples/s of whole training steps for every model x device x precision x batch size.

    `devices` None: the CPU and the first CUDA GPU if there is one. `precisions` None: fp32 and bf16 on a CPU,
    fp32, tf32, bf16 and fp16 on a GPU. Combinations a device cannot run are left out and named in the second
    list with the reason (`unsupported_reason`), as is a measurement that runs out of memory; any other error
    propagates. Defaults take about 10 s on 2 cores of a Xeon (mlp and cnn, batches 64 and 256).
    fp16 on a CPU runs (autocast) but can be hundreds of times slower than fp32 where the CPU lacks fp16 kernels.
    `budget` (bench/budget.py) bounds each step's measurement and all of them; what it leaves out is named.
    """
    _check_precisions(precisions)
    found, unmeasured = _resolve_devices(devices)
    results: list[TrainStepResult] = []
    for device in found:
        default = CUDA_PRECISIONS if device.type == "cuda" else CPU_PRECISIONS
        for precision in precisions or default:
            reason = unsupported_reason(device, precision)
            if reason is not None:
                unmeasured.append(f"train steps, {device} {precision}: {reason}")
                continue
            for model_name in models:
                for batch_size in batch_sizes:
                    what = f"train steps, {model_name} on {device} {precision} batch {batch_size}"
                    if budget.spent():
                        unmeasured.append(f"{what}: {budget.spent_reason()}")
                        continue
                    try:
                        results.append(_time_step(model_name, device, precision, batch_size, repeats, warmup,
                                                  budget))
                    except OverBudget as skipped:
                        unmeasured.append(f"{what}: {skipped}")
                    except (RuntimeError, MemoryError) as error:
                        if not is_out_of_memory(error):
                            raise  # a step that fails is a bug to see, not a line in the report
                        unmeasured.append(_out_of_memory_line(what, error))
                    finally:
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
    return _with_speedups(results), unmeasured


def precision_runs(device: torch.device | str, precisions: Sequence[str] = ("fp64", "fp32", "bf16"),
                   count: int = 2000, epochs: int = 2, seed: int = 0) -> tuple[list[PrecisionRun], list[str]]:
    """A short real `gpufeed train` run per precision from the same seed (the built-in data, the cnn at width 16,
    batch 64): test accuracy and loss, seconds and steps. What a precision does to accuracy, beside its speed.
    A precision the device lacks (or `gpufeed train` has not) and a run out of memory are named in the second
    list; any other error propagates. Writes the built-in data's cache under $GPUFEED_CACHE (default
    ~/.cache/gpufeed)."""
    _check_precisions(precisions)
    device = resolve_device(device)
    runs: list[PrecisionRun] = []
    unmeasured: list[str] = []
    for precision in precisions:
        reason = unsupported_reason(device, precision)
        if reason is None and precision not in TRAIN_PRECISIONS:
            reason = f"gpufeed train has no {precision} precision (it takes {', '.join(TRAIN_PRECISIONS)})"
        if reason is not None:
            unmeasured.append(f"precision run, {device} {precision}: {reason}")
            continue
        config = TrainConfig(count=count, epochs=epochs, model="cnn", width=16, batch_size=64, device=str(device),
                             precision=precision, seed=seed)
        try:
            result = train(config)
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise  # as from `gpufeed train`, and so is a GpufeedError (a NaN loss)
            unmeasured.append(_out_of_memory_line(f"precision run, {device} {precision}", error))
            continue
        runs.append(PrecisionRun(precision=precision, device=str(device),
                                 validation_accuracy=result.validation_accuracy,
                                 validation_loss=result.validation_loss, seconds=result.seconds, steps=result.steps))
    return runs, unmeasured
