"""The small-batch probe: how much of a step at a small batch is fixed cost, measured on the user's own model.

When the watched loop's batch is under SMALL_BATCH (doctor/observation.py), the instrumentation keeps the first
training forward's module and a copy of its inputs (`Capture`), and once the watch is done, outside the watched
steps, times a forward and backward of that module on the batch repeated 1, 2 and 4 times (`FACTORS`: every
input tensor whose first dimension is the batch, concatenated with itself), the loss the sum of the outputs that
require grad, no optimizer step. DistributedDataParallel runs its wrapped module under `no_sync()` (no
collective: no buffer broadcast, no all-reduce). Before, it
saves and after it restores the parameters' gradients, the module's buffers (BatchNorm's running statistics and
counts) and torch's RNG states (CPU and CUDA), so the script goes on as if nothing had run.

Skipped, with a note: on a rank other than 0; when the device's memory or the host's RAM is over half full
(MEMORY_LIMIT: a 4x batch must not run either out); under autocast, unless its dtype is read (the probe runs under
the same); when the outputs hold nothing that requires grad. After one warm run of each factor, rounds take the
factors in turn, REPEATS of them within BUDGET_S (fewer for a slow model); each factor's fastest run counts (the
machine's noise only adds time: another process, a page fault), on CUDA with a synchronize around each run.

What it gives (`BatchProbe`, observation.py): the seconds per forward+backward at each factor; the per-sample
cost is the slope between 1x and 4x (the widest lever arm), or, when the slope is not above zero (the growth is
below the runs' noise), at most the 4x run's time over its samples; findings/kinds/small_batch.py takes the step's
fixed cost as the model's step time less the batch times that cost: the optimizer step, the Python around the
model and every operator's dispatch, which a larger batch spreads over more samples.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from gpufeed.doctor.observation import SMALL_BATCH, BatchProbe

FACTORS = (1, 2, 4)
REPEATS = 7
# gpufeed's choice: the probe may take about as long as a few watched steps of a small model; a model that takes
# longer per forward+backward gets fewer rounds (at least 1 after the warm runs).
BUDGET_S = 3.0
# issue 20: a 4x batch is run only while the device's memory and the host's RAM are at most half full.
MEMORY_LIMIT = 0.5
SUBJECT = "batch probe"  # the notes' subject


class Capture:
    """The first training forward's module (weakly) and a detached copy of its inputs, when its batch is small;
    `autocast`: (device type, dtype) the forward ran under, None without autocast."""

    def __init__(self, module: torch.nn.Module, args: tuple, kwargs: dict, batch: int,
                 autocast: tuple[str, torch.dtype] | None) -> None:
        self.module = weakref.ref(module)
        self.args, self.kwargs = _copied(args), _copied(kwargs)
        self.batch, self.autocast = batch, autocast


def capture(module: torch.nn.Module, args: tuple, kwargs: dict, batch: int) -> Capture | str | None:
    """A Capture of a forward at a small batch; None for a batch of SMALL_BATCH or more; a note's text when the
    forward cannot be probed (autocast whose dtype cannot be read)."""
    if batch >= SMALL_BATCH or batch <= 0:
        return None
    autocast = None
    for device_type in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device_type):
            try:
                autocast = (device_type, torch.get_autocast_dtype(device_type))
            except (AttributeError, RuntimeError):
                return f"{SUBJECT}: not run, the forward ran under autocast whose dtype this torch does not tell"
    return Capture(module, args, kwargs, batch, autocast)


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(item) for item in value) if not hasattr(value, "_fields") else \
            type(value)(*(_copied(item) for item in value))
    return value


def repeated(value: Any, batch: int, factor: int) -> Any:
    """`value` with every tensor whose first dimension is `batch` concatenated `factor` times along it."""
    if isinstance(value, torch.Tensor):
        return torch.cat([value] * factor) if value.dim() > 0 and value.shape[0] == batch else value
    if isinstance(value, Mapping):
        return {key: repeated(item, batch, factor) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [repeated(item, batch, factor) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def _loss(output: Any) -> torch.Tensor | None:
    """The sum of every floating output that requires grad; None when none does."""
    found: list[torch.Tensor] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if value.requires_grad and value.is_floating_point():
                found.append(value.float().sum())
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
    walk(output)
    return torch.stack(found).sum() if found else None


def _memory_full(cuda: bool) -> str | None:
    """Why memory is too full for a 4x batch, or None."""
    import psutil

    host = psutil.virtual_memory()
    if host.percent / 100.0 > MEMORY_LIMIT:
        return f"the host's RAM is {host.percent:.0f}% used (over {MEMORY_LIMIT:.0%})"
    if cuda:
        free, total = torch.cuda.mem_get_info()
        if (total - free) / total > MEMORY_LIMIT:
            return f"the device's memory is {(total - free) / total:.0%} used (over {MEMORY_LIMIT:.0%})"
    return None


def _rank() -> int:
    available = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_rank() if available else 0


def run(captured: Capture) -> tuple[BatchProbe | None, str]:
    """Time the captured forward+backward at each factor (the module docstring); (the probe or None, the note
    that says what was done or why not)."""
    module = captured.module()
    if module is None:
        return None, f"{SUBJECT}: not run, the model was gone by the end of the watch"
    if _rank() != 0:
        return None, f"{SUBJECT}: not run on rank {_rank()} (rank 0 probes)"
    parameter = next(module.parameters(), None)
    cuda = parameter is not None and parameter.is_cuda
    full = _memory_full(cuda)
    if full is not None:
        return None, f"{SUBJECT}: not run, {full}"
    saved = _save(module, cuda)
    try:
        seconds, repeats = _time_factors(module, captured, cuda)
    except torch.OutOfMemoryError:
        return None, f"{SUBJECT}: not run to the end, a {FACTORS[-1]}x batch ran out of memory"
    except _NoLoss:
        return None, f"{SUBJECT}: not run, the model's outputs hold nothing that requires grad"
    except Exception as raised:  # the user's forward on a repeated batch: report it, never lose the run
        return None, f"{SUBJECT}: not run to the end, the forward on a repeated batch raised " \
                     f"{type(raised).__name__}: {raised}"
    finally:
        _restore(module, saved, cuda)
    probe = BatchProbe(captured.batch, tuple(zip(FACTORS, seconds, strict=True)), repeats)
    timed = ", ".join(f"{factor}x {1000 * s:.2f} ms" for factor, s in probe.seconds)
    return probe, (f"{SUBJECT}: after the watch, a forward and backward of the model (no optimizer step; "
                   f"gradients, buffers and RNG restored after) at {captured.batch} samples repeated 1x, 2x and "
                   f"4x, the fastest of {repeats}: {timed}")


class _NoLoss(Exception):
    pass


def _time_factors(module: torch.nn.Module, captured: Capture, cuda: bool) -> tuple[list[float], int]:
    """The fastest seconds at each factor and the rounds run: one warm run of each factor, then rounds that
    take the factors in turn (so that a drift of the machine's speed falls on all of them alike), as many as
    BUDGET_S allows, at most REPEATS and at least 1. A DistributedDataParallel module runs its own module, under
    its no_sync(): DDP's forward may broadcast buffers to the other ranks, which are not probing."""
    ddp = isinstance(module, torch.nn.parallel.DistributedDataParallel)
    wrapper, module = (module, module.module) if ddp else (None, module)
    with wrapper.no_sync() if wrapper is not None else contextlib.nullcontext():
        inputs = [(repeated(captured.args, captured.batch, factor), repeated(captured.kwargs, captured.batch, factor))
                  for factor in FACTORS]
        warm = [_one(module, args, kwargs, captured.autocast, cuda) for args, kwargs in inputs]
        rounds = max(1, min(REPEATS, int((BUDGET_S - sum(warm)) / sum(warm)) if sum(warm) > 0 else REPEATS))
        times: list[list[float]] = [[] for _ in FACTORS]
        for _ in range(rounds):
            for index, (args, kwargs) in enumerate(inputs):
                times[index].append(_one(module, args, kwargs, captured.autocast, cuda))
    return [min(seconds) for seconds in times], rounds


def _one(module, args, kwargs, autocast, cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.enable_grad():
        if autocast is not None:
            with torch.autocast(autocast[0], dtype=autocast[1]):
                output = module(*args, **kwargs)
        else:
            output = module(*args, **kwargs)
        loss = _loss(output)
        if loss is None:
            raise _NoLoss
        loss.backward()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _save(module: torch.nn.Module, cuda: bool) -> dict:
    return {"grads": [(p, None if p.grad is None else p.grad.detach().clone()) for p in module.parameters()],
            "buffers": [(b, b.detach().clone()) for b in module.buffers()],
            "rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state_all() if cuda else None}


def _restore(module: torch.nn.Module, saved: dict, cuda: bool) -> None:
    with torch.no_grad():
        for parameter, grad in saved["grads"]:
            parameter.grad = grad
        for buffer, value in saved["buffers"]:
            buffer.copy_(value)
    torch.set_rng_state(saved["rng"])
    if cuda and saved["cuda_rng"] is not None:
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
