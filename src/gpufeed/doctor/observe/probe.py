"""The small-batch probe: how much of a step at a small batch is fixed cost, measured on the user's own model.

When the watched loop's batch is under SMALL_BATCH (doctor/observation.py), the instrumentation keeps the first
training forward's module and a copy of its inputs (`Capture`), and once the watch is done, between two steps (the
clock's hook: after an optimizer step, the gradients it used still set), times a forward and backward of that
module on the batch repeated 1, 2 and 4 times (`FACTORS`: every input tensor whose first dimension is the batch,
concatenated with itself), no optimizer step. The loss is the script's own where the output carries one (a
`loss` attribute or key, or a scalar among a tuple's outputs: transformers' models given labels, nanoGPT's
`logits, loss`); else the sum of the first output that requires grad (a criterion's reduction costs about that; no
float copy of a (B, T, V) output). DistributedDataParallel runs its wrapped module under `no_sync()` (no
collective: no buffer broadcast, no all-reduce). Before, it saves and after it restores the parameters' gradients,
the module's buffers (BatchNorm's running statistics and counts) and torch's RNG states (CPU and CUDA), so the
script goes on as if nothing had run; while it runs the gradients are unset before each backward (as after
`zero_grad()`), so each backward writes them as the step's does, rather than adding to the step's.

Skipped, with a note: on a rank other than 0; when the device's memory or the host's RAM is over half full
(MEMORY_LIMIT: a 4x batch must not run either out); under autocast, unless its dtype is read (the probe runs under
the same); when the outputs hold nothing that requires grad. After one warm run of each input, rounds take the
inputs in turn (a drift of the machine's speed falls on all alike), as many as BUDGET_S allows and at least
MIN_ROUNDS whatever the model's speed (the budget scales with the step: one round of a slow model would be one
sample of the machine's noise), at most REPEATS, and more (up to UNSETTLED_S and UNSETTLED_ROUNDS) while the 1x
run's fastest is slower than the slowest watched step's forward and backward or a larger batch's fastest is faster
than a smaller one's, or (the batch probe, the padding trial) while an input's fastest run waited for a core (the
process's threads' scheduler wait, scheduler.process_run_delay_s, over observation.py's WAIT_ALLOWED_S and
WAIT_ALLOWED_SHARE of the run: torch's intra-op threads wait for cores another process holds, and each operator
for its slowest thread, a cost per operator that a larger batch would seem to spread) (`settled`); each input's
fastest run counts (the machine's noise only adds time: another
process, a page fault), on CUDA with a synchronize around each run. `time_inputs` is the same timing for any list of
inputs (observe/padding.py's, say).

What it gives (`BatchProbe`, observation.py): the seconds per forward+backward at each factor; the per-sample
cost is the slope between 1x and 4x (the widest lever arm), or, when the slope is not above zero (the growth is
below the runs' noise), at most the 4x run's time over its samples; findings/kinds/small_batch.py takes the step's
fixed cost as the model's step time less the batch times that cost: the optimizer step, the Python around the
model and every operator's dispatch, which a larger batch spreads over more samples. It checks the probe first
against the watched steps (`probe_disagrees`): a probe much slower than the steps it probes (grading.DRIFT) is not
used.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from gpufeed.doctor.observation import SMALL_BATCH, BatchProbe, waited_too_long
from gpufeed.doctor.observe.scheduler import process_run_delay_s

FACTORS = (1, 2, 4)
REPEATS = 7
# gpufeed's choice: the probe may take about as long as a few watched steps of a small model; a model that takes
# longer per forward+backward gets fewer rounds, but never under MIN_ROUNDS: the fastest of 3 interleaved runs is
# what the busy-machine case needed (a single round on a loaded 2-core machine ran 5x the watched step).
BUDGET_S = 3.0
MIN_ROUNDS = 3
# gpufeed's choice: rounds go on while the fastest runs are not what the work allows (`settled`), for up to 15 s more
# and 60 rounds in all: another process's burst lasts seconds. In CI, 7 more rounds (1.6 s) ended inside one: the
# padding trial's batch cut from 128 to 37 positions ran slower than the batch as it came (62.9 ms against 57.7 ms;
# 9.8 against 30.6 on a quiet machine), and padding_waste was not found.
UNSETTLED_S = 15.0
UNSETTLED_ROUNDS = 60
# issue 20: a 4x batch is run only while the device's memory and the host's RAM are at most half full.
MEMORY_LIMIT = 0.5
SUBJECT = "batch probe"  # the notes' subject


class Capture:
    """The first training forward's module (weakly) and a detached copy of its inputs, when its batch is small;
    `autocast`: (device type, dtype) the forward ran under, None without autocast."""

    def __init__(self, module: torch.nn.Module, args: tuple, kwargs: dict, batch: int,
                 autocast: tuple[str, torch.dtype] | None) -> None:
        self.module = weakref.ref(module)
        self.args, self.kwargs = copied(args), copied(kwargs)
        self.batch, self.autocast = batch, autocast


def capture(module: torch.nn.Module, args: tuple, kwargs: dict, batch: int) -> Capture | str | None:
    """A Capture of a forward at a small batch; None for a batch of SMALL_BATCH or more; a note's text when the
    forward cannot be probed (autocast whose dtype cannot be read)."""
    if batch >= SMALL_BATCH or batch <= 0:
        return None
    autocast = autocast_now()
    if isinstance(autocast, str):
        return f"{SUBJECT}: not run, {autocast}"
    return Capture(module, args, kwargs, batch, autocast)


def autocast_now() -> tuple[str, torch.dtype] | str | None:
    """(device type, dtype) of the autocast the code runs under now, None without autocast, or why it is not
    known (the text of a note)."""
    for device_type in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device_type):
            try:
                return device_type, torch.get_autocast_dtype(device_type)
            except (AttributeError, RuntimeError):
                return "the forward ran under autocast whose dtype this torch does not tell"
    return None


def copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {key: copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(item) for item in value) if not hasattr(value, "_fields") else \
            type(value)(*(copied(item) for item in value))
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
    """The loss the backward starts from (the module docstring): the script's own when the output carries one, else
    the sum of the first floating output that requires grad; None when none does."""
    def scalar(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.dim() == 0 and value.requires_grad and \
            value.is_floating_point()

    own = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if scalar(own):
        return own
    if isinstance(output, (list, tuple)) and (found := next((item for item in output if scalar(item)), None)):
        return found
    first = _first_grad_tensor(output)
    return None if first is None else first.sum()


def _first_grad_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad and value.is_floating_point() else None
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    return next((found for item in items if (found := _first_grad_tensor(item)) is not None), None)


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


def run(captured: Capture, watched_s: float | None = None) -> tuple[BatchProbe | None, str]:
    """Time the captured forward+backward at each factor (the module docstring); (the probe or None, the note
    that says what was done or why not). `watched_s`: the slowest watched step's forward and backward
    (`time_inputs`' target for the 1x batch)."""
    module = captured.module()
    if module is None:
        return None, f"{SUBJECT}: not run, the model was gone by the end of the watch"
    inputs = [(repeated(captured.args, captured.batch, factor), repeated(captured.kwargs, captured.batch, factor))
              for factor in FACTORS]
    timed = attempt(module, inputs, captured.autocast, SUBJECT, f"a {FACTORS[-1]}x batch", watched_s,
                    tuple(range(len(FACTORS))), unwaited=True)
    if isinstance(timed, str):
        return None, timed
    seconds, repeats, waited = timed
    probe = BatchProbe(captured.batch, tuple(zip(FACTORS, seconds, strict=True)), repeats, tuple(waited))
    times = ", ".join(f"{factor}x {1000 * s:.2f} ms" for factor, s in probe.seconds)
    waits = "" if not any(waited) else \
        f" (waiting for cores: {', '.join(f'{1000 * w:.2f}' for w in waited)} ms)"
    return probe, (f"{SUBJECT}: after the watch, a forward and backward of the model (no optimizer step; "
                   f"gradients, buffers and RNG restored after) at {captured.batch} samples repeated 1x, 2x and "
                   f"4x, the fastest of {repeats}: {times}{waits}")


def attempt(module: torch.nn.Module, inputs: list[tuple[tuple, dict]], autocast: tuple[str, torch.dtype] | None,
            subject: str, largest: str, watched_s: float | None = None, order: tuple[int, ...] = (),
            unwaited: bool = False, alone: bool = False) -> tuple[list[float], int, list[float]] | str:
    """`time_inputs` where it may run (rank 0, memory at most MEMORY_LIMIT full), its state saved and restored; the
    fastest seconds per input, the rounds and the fastest runs' waits for a core, or the note's text saying why not
    (`subject` opens it; `largest` names the input that may run out of memory; `watched_s`, `order`, `unwaited`
    and `alone`, time_inputs'). With `alone`, torch's intra-op threads are set to one while it runs, then put
    back."""
    if _rank() != 0:
        return f"{subject}: not run on rank {_rank()} (rank 0 measures)"
    parameter = next(module.parameters(), None)
    cuda = parameter is not None and parameter.is_cuda
    full = _memory_full(cuda)
    if full is not None:
        return f"{subject}: not run, {full}"
    saved, threads = _save(module, cuda), torch.get_num_threads()
    try:
        if alone:
            torch.set_num_threads(1)
        return time_inputs(module, inputs, autocast, cuda, watched_s, order, unwaited, alone)
    except torch.OutOfMemoryError:
        return f"{subject}: not run to the end, {largest} ran out of memory"
    except _NoLoss:
        return f"{subject}: not run, the model's outputs hold nothing that requires grad"
    except Exception as raised:  # the user's forward on inputs of ours: report it, never lose the run
        return f"{subject}: not run to the end, a forward and backward raised {type(raised).__name__}: {raised}"
    finally:
        torch.set_num_threads(threads)
        _restore(module, saved, cuda)


class _NoLoss(Exception):
    pass


def time_inputs(module: torch.nn.Module, inputs: list[tuple[tuple, dict]],
                autocast: tuple[str, torch.dtype] | None, cuda: bool, watched_s: float | None = None,
                order: tuple[int, ...] = (), unwaited: bool = False,
                alone: bool = False) -> tuple[list[float], int, list[float]]:
    """The fastest seconds of a forward and backward on each (args, kwargs) and the rounds run: one warm run of
    each, then rounds that take them in turn, as many as BUDGET_S allows, at least MIN_ROUNDS, at most REPEATS.
    Rounds go on, up to UNSETTLED_S more and UNSETTLED_ROUNDS in all, while the fastest runs are not yet what the
    work allows (`settled`): the first input's slower than `watched_s` (the slowest watched step's forward and
    backward, which did that work and more: the machine was busier now than during the watch), or the inputs' out of
    `order` (their indices from the least work to the most: the probe's 1x, 2x, 4x; the padding trial's cut batch,
    then the batch as it came), which no model does and only another process's burst makes; with `unwaited`, also
    while an input's fastest run waited for a core (`waited_too_long`). The findings still judge what it gives
    (grading.timed_elsewhere; small_batch.probe_disagrees). Returned: the fastest seconds, the rounds, and the seconds
    each fastest run's threads waited for a core (0 where the wait cannot be read). The gradients are unset before
    each run (the caller saves and restores them: `attempt`). With `alone` (the caller has set one intra-op thread:
    on the CPU the whole forward and backward then runs on this thread), each run's seconds are this thread's CPU
    time over it (time.thread_time), to which another process holding the core adds nothing; the waits returned are
    the wall's excess over it. Not the wall less the thread's scheduler wait: a wait that began between reading the
    wait and reading the clock is credited to the run when the thread is scheduled again, and in a full suite beside
    two spinning processes it took more than a cut batch's 6 ms run (a share of 0.97 over the watched forward and
    backward's 0.90). A DistributedDataParallel module runs its own module,
    under its no_sync(): DDP's forward may broadcast buffers to the other ranks, which are not measuring."""
    ddp = isinstance(module, torch.nn.parallel.DistributedDataParallel)
    wrapper, module = (module, module.module) if ddp else (None, module)
    with wrapper.no_sync() if wrapper is not None else contextlib.nullcontext():
        warm = [one_run(module, args, kwargs, autocast, cuda, alone)[0] for args, kwargs in inputs]
        round_s = sum(warm)
        fit = int((BUDGET_S - round_s) / round_s) if round_s > 0 else REPEATS
        rounds = max(MIN_ROUNDS, min(REPEATS, fit))
        runs: list[list[tuple[float, float]]] = [[] for _ in inputs]  # (seconds, waited) of each run

        def one_round() -> None:
            for index, (args, kwargs) in enumerate(inputs):
                runs[index].append(one_run(module, args, kwargs, autocast, cuda, alone))

        def fastest() -> list[tuple[float, float]]:
            return [min(timed) for timed in runs]

        for _ in range(rounds):
            one_round()
        more_until = time.perf_counter() + UNSETTLED_S
        while len(runs[0]) < UNSETTLED_ROUNDS and time.perf_counter() <= more_until:
            best = fastest()
            if settled([seconds for seconds, _ in best], watched_s, order) and \
                    not (unwaited and any(waited_too_long(seconds, waited) for seconds, waited in best)):
                break
            one_round()
    best = fastest()
    return [seconds for seconds, _ in best], len(runs[0]), [waited for _, waited in best]


def settled(fastest: list[float], watched_s: float | None, order: tuple[int, ...]) -> bool:
    """The fastest runs are what the work allows (`time_inputs`): the first within `watched_s` (when given), and
    each input in `order` no slower than the next, which does more work."""
    within = watched_s is None or fastest[0] <= watched_s
    return within and all(fastest[low] <= fastest[high] for low, high in zip(order, order[1:], strict=False))


def one_run(module, args, kwargs, autocast, cuda: bool, alone: bool = False) -> tuple[float, float]:
    """(seconds, seconds the process's threads waited for a core) of one forward and backward; with `alone`
    (`time_inputs`), (this thread's CPU time over it, the seconds beyond that)."""
    for parameter in module.parameters():
        parameter.grad = None  # as after zero_grad(): the backward writes the gradients, as the step's does
    if cuda:
        torch.cuda.synchronize()
    delay = None if alone else process_run_delay_s()
    cpu = time.thread_time() if alone else 0.0
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
    seconds = time.perf_counter() - start
    if alone:
        ran = time.thread_time() - cpu
        return ran, max(0.0, seconds - ran)
    after = process_run_delay_s()
    return seconds, (after - delay) if delay is not None and after is not None else 0.0


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
