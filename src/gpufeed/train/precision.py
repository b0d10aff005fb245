"""Which precision a run trains in: the user's choice checked, and what `auto` picks on this device (on a CPU
with bf16 instructions, by timing the training step in both, interleaved, until the difference is told apart)."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.errors import ConfigError
from gpufeed.measure.difference import Samples, bootstrap_interval, clear_of
from gpufeed.train.step import TRAIN_PRECISIONS, Precision, TrainStep, make_optimizer, prepare_model, random_batch

PRECISIONS = ("auto", *TRAIN_PRECISIONS)


PROBE_MARGIN = 0.10  # auto picks bf16 on a CPU only when it is at least this much faster than fp32
PROBE_MIN_ROUNDS = 3  # interleaved rounds (one step of each) before the first judgement
PROBE_MAX_ROUNDS = 12  # then more, one at a time, until the interval is clear of the margin


@dataclass(frozen=True)
class PrecisionProbe:
    """bf16 against fp32 on this CPU: each one's step times from interleaved rounds (fp32 bf16, bf16 fp32, ...),
    the speedup (median fp32 / median bf16) with its 95% interval (measure/difference.py's bootstrap of the
    medians), and the outcome: "bf16" (the interval clears 1 + PROBE_MARGIN), "fp32" (it stays below), or
    "not told apart" (it still straddles the margin after PROBE_MAX_ROUNDS)."""

    fp32_s: tuple[float, ...]
    bf16_s: tuple[float, ...]
    speedup: float
    speedup_low: float | None
    speedup_high: float | None
    outcome: str

    def words(self) -> str:
        spread = "" if self.speedup_low is None else f" ({self.speedup_low:.2f}-{self.speedup_high:.2f}x)"
        measured = (f"bf16 measured {self.speedup:.2f}x fp32's speed{spread} over {len(self.bf16_s)} interleaved "
                    f"rounds on this CPU")
        needed = f"the {1 + PROBE_MARGIN:.1f}x needed"
        if self.outcome == "bf16":
            return f"auto: {measured}, above {needed}"
        if self.outcome == "fp32":
            return f"auto: {measured}, below {needed}: kept fp32"
        return f"auto: {measured}: not told apart from {needed}, kept fp32"


def probe_bf16(time_fp32: Callable[[], float], time_bf16: Callable[[], float],
               max_rounds: int = PROBE_MAX_ROUNDS) -> PrecisionProbe:
    """Time one training step of each in interleaved rounds (after one warm-up step each) until the speedup's
    interval is clear of 1 + PROBE_MARGIN on one side (measure/difference.py's `clear_of`), at least
    PROBE_MIN_ROUNDS rounds and at most `max_rounds`. A moment of noise lands in both precisions' times alike."""
    time_fp32(), time_bf16()
    fp32: list[float] = []
    bf16: list[float] = []
    side, interval = None, None
    for round_ in range(max_rounds):
        pair = ((time_fp32, fp32), (time_bf16, bf16))
        for timer, times in (pair if round_ % 2 == 0 else pair[::-1]):
            times.append(timer())
        if round_ + 1 < PROBE_MIN_ROUNDS:
            continue
        interval = bootstrap_interval(Samples(np.array(fp32), median=True), Samples(np.array(bf16), median=True))
        side = clear_of(interval, 1.0 / (1.0 + PROBE_MARGIN))  # bf16 / fp32 against the margin
        if side is not None:
            break
    speedup = statistics.median(fp32) / statistics.median(bf16)
    low = high = None
    if interval is not None and interval.ratio_low is not None and interval.ratio_high is not None:
        low, high = 1.0 / (1.0 + interval.ratio_high), 1.0 / (1.0 + interval.ratio_low)
    outcome = {-1: "bf16", 1: "fp32", None: "not told apart"}[side]
    return PrecisionProbe(tuple(fp32), tuple(bf16), speedup, low, high, outcome)


def resolve_precision(name: str, device: torch.device, cpu_has_bf16: bool = False,
                      step_timer: Callable[[Precision], Callable[[], float]] | None = None) -> Precision:
    """Turn the user's choice into a Precision. `auto`: bf16 on GPUs that have it, else fp16; fp32 on the CPU
    unless the CPU has bf16 instructions (AMX / avx512_bf16) and `probe_bf16`, with `step_timer(precision)` giving a
    function that times one step, finds bf16 faster by more than PROBE_MARGIN."""
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
    if device.type != "cpu" or not cpu_has_bf16 or step_timer is None:
        return Precision("fp32", "auto: fp32 on this device")
    probe = probe_bf16(step_timer(Precision("fp32", "")), step_timer(Precision("bf16", "")))
    return Precision("bf16" if probe.outcome == "bf16" else "fp32", probe.words())


def step_timer(model: torch.nn.Module, precision: Precision, device: torch.device, batch_size: int,
               sample_shape: tuple[int, int, int], num_classes: int, optimizer: str = "adamw") -> Callable[[], float]:
    """A function that runs and times one training step (train/step.py) on random data, on its own copy of the
    model with its own optimizer; the model is left as it was."""
    model = prepare_model(copy.deepcopy(model), precision, device)
    step = TrainStep(model, make_optimizer(optimizer, model.parameters()), precision, device.type,
                     scaler=precision.scaler(device.type))
    images, labels = random_batch(batch_size, sample_shape, num_classes, device, precision.input_dtype)

    def timed() -> float:
        start = time.perf_counter()
        step(images, labels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return timed


def time_training_step(model: torch.nn.Module, precision: Precision, device: torch.device, batch_size: int,
                       sample_shape: tuple[int, int, int], num_classes: int, optimizer: str = "adamw",
                       repeats: int = 3) -> float:
    """Median seconds of the training step over `repeats` steps after a first one (which pays one-time costs), on
    a copy of the model (`step_timer`); the model and the global RNG are left as they were."""
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        timed = step_timer(model, precision, device, batch_size, sample_shape, num_classes, optimizer)
        times = [timed() for _ in range(repeats + 1)]
    measured = sorted(times[1:] or times)
    return measured[len(measured) // 2]
