"""Device memory of one training step, itemized, traced with fake tensors: nothing is allocated.

The model is built on the meta device and its weights become `FakeTensorMode` tensors (fake_model.py: shape,
dtype, device, no data). The steady state is traced: gradients as the last step left them and an
optimizer.step() on them make the optimizer's state (what a first step leaves), then the training step of
train/step.py runs, the one `gpufeed train` runs, in one of two orders (`STEP_ORDERS`):
- "grads_freed": zero_grad(set_to_none=True) -> forward (autocast for bf16/fp16) -> cross-entropy -> backward ->
  optimizer step: gpufeed train's loop, and any loop that zeroes gradients before the forward;
- "grads_live": forward -> cross-entropy -> backward into the gradients already there -> optimizer step: a
  micro-batch after the first of a gradient-accumulating loop, whose earlier micro-batches' gradients are live
  through its forward and backward. (It also bounds, from above, a loop that zeroes gradients after the
  forward: the two are equal when the peak is in the forward.)
`LiveBytes` (live_bytes.py) counts each storage an operation creates, once, until its last reference is gone,
and keeps the peak. Scratch a kernel allocates and frees inside itself (im2col buffers, cuBLAS/cuDNN
workspaces) is not seen. On a CPU target the scratch of oneDNN's bf16/fp16 matrix products, which comes from
torch's allocator and varies with the CPU's instruction set, is bounded instead (kernel_scratch.py):
`kernel_scratch_bound_bytes` is how far above `peak_bytes` the allocator's peak can be because of it.

A plan with `grad_accumulation` K = 1 is the "grads_freed" loop; with K > 1 it runs one "grads_freed"
micro-batch and K - 1 "grads_live" ones, so its peak is the larger of the two. Both are always reported.

On a CUDA target `overhead_bytes` is CUDA_CONTEXT_BYTES plus the caching allocator's rounding of every block up
to 512 bytes (so peak_bytes - CUDA_CONTEXT_BYTES models `torch.cuda.max_memory_allocated`); the 2 MiB and
20 MiB segments blocks are cut from (reserved minus allocated) are not modeled. Without CUDA here, a CUDA target
is traced with CPU kernels and CPU autocast rules. On the CPU the overhead is 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses import FakeTensorMode

from gpufeed.errors import ConfigError
from gpufeed.plan.fake_model import fake_weights, meta_model, one_line
from gpufeed.plan.live_bytes import LiveBytes
from gpufeed.train.step import OPTIMIZERS, TRAIN_PRECISIONS, Precision, TrainStep, make_optimizer

DEVICE_TYPES = ("cuda", "cpu")
STEP_ORDERS = ("grads_freed", "grads_live")
# What a process holds on the GPU before its first tensor: CUDA context, cuBLAS/cuDNN handles. 300-600 MiB with
# CUDA 12's lazy loading, by card and libraries: a round default, not a measurement of any card.
CUDA_CONTEXT_BYTES = 500 * 2**20
CUDA_BLOCK_BYTES = 512  # the CUDA caching allocator rounds every allocation up to a multiple of this
FIRST_GUESS_BATCH = 16  # max_batch_size's second traced batch
_TRACED_PEAKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # factory -> {(setup, batch): peak_bytes}


@dataclass(frozen=True)
class MemoryEstimate:
    """Device bytes of one training step in the steady state (the optimizer's state exists), on one GPU or the CPU.

    weights_bytes: parameters and buffers (BatchNorm's running statistics). gradients_bytes: one per parameter.
    optimizer_bytes: SGD's momentum buffers; Adam's exp_avg and exp_avg_sq and a 4-byte step per parameter tensor.
    activations_bytes: what else is held at the peak moment: the peak minus the weights, gradients and optimizer
    state live then; that is the batch and labels, tensors saved for the backward, autocast's bf16/fp16 copies of
    weights, gradients in flight, optimizer temporaries.
    overhead_bytes: CUDA context + allocator rounding at the peak; 0 on the CPU.
    peak_bytes: the most bytes live at once in the loop planned (`step_order`), plus the overhead: weights +
    activations + overhead + the gradients and optimizer state live at the peak (a peak in the backward sees only
    part of the gradients; `notes` says how much). The parts above are those of the order that peaks.
    batch_size: per micro-batch; grad_accumulation: micro-batches per optimizer step.
    step_order: the loop planned, in words. peak_bytes_by_order: the peak of each order of STEP_ORDERS.
    kernel_scratch_bound_bytes: on a CPU target, the most the allocator's peak can exceed peak_bytes by the
    untraced scratch of bf16/fp16 matrix-product kernels (kernel_scratch.py; 0 for fp32 and CUDA targets).
    """

    parameters: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    overhead_bytes: int
    peak_bytes: int
    batch_size: int
    precision: str
    optimizer: str
    method: str
    notes: tuple[str, ...]
    grad_accumulation: int = 1
    step_order: str = ""
    peak_bytes_by_order: dict[str, int] = field(default_factory=dict)
    kernel_scratch_bound_bytes: int = 0


@dataclass(frozen=True)
class _Setup:
    input_shape: tuple[int, ...]
    num_classes: int
    optimizer: str
    precision: str
    device_type: str
    input_dtype: torch.dtype
    channels_last: bool
    grad_accumulation: int


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
           grad_accumulation) -> _Setup:
    for name, value, choices in (("optimizer", optimizer, OPTIMIZERS), ("precision", precision, TRAIN_PRECISIONS),
                                 ("device type", device_type, DEVICE_TYPES)):
        if value not in choices:
            raise ConfigError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
    shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else ()
    if not shape or not all(_positive_int(size) for size in shape):
        raise ConfigError(f"the input shape of one sample must be positive ints, e.g. (3, 32, 32); got {input_shape}")
    if not _positive_int(num_classes) or num_classes < 2:
        raise ConfigError(f"a classifier needs at least 2 classes, got {num_classes!r}")
    if not _positive_int(grad_accumulation):
        raise ConfigError(f"gradient accumulation must be a positive number of micro-batches, got "
                          f"{grad_accumulation!r}")
    default_dtype = Precision(precision, "planned").parameter_dtype
    return _Setup(shape, num_classes, optimizer, precision, device_type, input_dtype or default_dtype, channels_last,
                  grad_accumulation)


def step_order_text(grad_accumulation: int) -> str:
    """The loop a plan assumes, in words (printed by the plan and saved in its JSON)."""
    if grad_accumulation == 1:
        return ("zero_grad(set_to_none=True) before each forward, then forward, backward, optimizer step "
                "(gpufeed train's loop; gradients freed through the forward)")
    return (f"gradient accumulation over {grad_accumulation} micro-batches: zero_grad once, then forward and "
            f"backward of each (the gradients live through every forward after the first), then one optimizer step")


def _trace(model_or_factory, setup: _Setup, batch_size: int, order: str) -> MemoryEstimate:
    device = torch.device("cuda" if setup.device_type == "cuda" and torch.cuda.is_available() else "cpu")
    model, shape = meta_model(model_or_factory), (batch_size, *setup.input_shape)
    channels_last = setup.channels_last and len(shape) == 4
    tracker = LiveBytes(device.type, CUDA_BLOCK_BYTES if setup.device_type == "cuda" else 1,
                        scratch_threads=torch.get_num_threads() if setup.device_type == "cpu" else 0)
    precision = Precision(setup.precision, "planned")
    try:
        with FakeTensorMode():
            fake_weights(model.train(), device, precision.parameter_dtype, channels_last)
            for tensor in itertools.chain(model.parameters(), model.buffers()):
                tracker.add(tensor)
            with tracker:
                optimizer = make_optimizer(setup.optimizer, model.parameters(), foreach=setup.device_type == "cuda")
                inputs = torch.empty(shape, dtype=setup.input_dtype, device=device,
                                     memory_format=torch.channels_last if channels_last else torch.contiguous_format)
                labels = torch.zeros(batch_size, dtype=torch.long, device=device)
                for parameter in model.parameters():  # last step's gradients, laid out as autograd lays them
                    parameter.grad = torch.empty_like(parameter) if parameter.requires_grad else None
                optimizer.step()  # makes the optimizer's state, as a first step would: the steady state follows
                first_gradients = tracker.serials_of(p.grad for p in model.parameters())
                tracker.reset_peak()
                # no scaler: its step reads a value, which fake tensors do not have (it unscales in place)
                step = TrainStep(model, optimizer, precision, device.type, num_classes=setup.num_classes,
                                 on_phase=lambda phase: setattr(tracker, "phase", phase))
                if order == "grads_freed":
                    step.zero_grad()
                step.forward_backward(inputs, labels, loss_scale=1.0 / setup.grad_accumulation)
                step.optimizer_step()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"could not trace a training step on a batch of shape {shape}: {one_line(error)}") from error
    return _summarize(tracker, model, optimizer, setup, batch_size, first_gradients)


def _planned(model_or_factory, setup: _Setup, batch_size: int) -> MemoryEstimate:
    """Both orders traced; the estimate of the loop planned (with K > 1, the larger), carrying both peaks."""
    traced = {order: _trace(model_or_factory, setup, batch_size, order) for order in STEP_ORDERS}
    planned = traced["grads_freed"]
    if setup.grad_accumulation > 1 and traced["grads_live"].peak_bytes > planned.peak_bytes:
        planned = traced["grads_live"]
    return dataclasses.replace(planned, grad_accumulation=setup.grad_accumulation,
                               step_order=step_order_text(setup.grad_accumulation),
                               peak_bytes_by_order={order: traced[order].peak_bytes for order in STEP_ORDERS})


def _summarize(tracker: LiveBytes, model: nn.Module, optimizer, setup: _Setup, batch_size: int,
               first_gradients: set[int]) -> MemoryEstimate:
    def total(serials: set[int], live: dict[int, int]) -> int:
        return sum(live.get(serial, 0) for serial in serials)

    weights = tracker.serials_of(itertools.chain(model.parameters(), model.buffers()))
    gradients = tracker.serials_of(p.grad for p in model.parameters())
    state = tracker.serials_of(t for per_parameter in optimizer.state.values() for t in per_parameter.values())
    peak, at_peak = sum(tracker.peak_live.values()), tracker.peak_live
    gradients_at_peak = total(gradients | first_gradients, at_peak)  # the first step's are live until zero_grad
    context = CUDA_CONTEXT_BYTES if setup.device_type == "cuda" else 0
    notes = [f"peak in the {tracker.peak_phase}; live then: {gradients_at_peak:,} gradient "
             f"bytes, {total(state, at_peak):,} of {total(state, tracker.live):,} optimizer bytes"]
    if tracker.weight_copy_bytes:
        notes.append(f"autocast's {setup.precision} copies of the weights: {tracker.weight_copy_bytes:,} bytes, "
                     "counted in activations while they are held")
    if setup.device_type == "cuda":
        notes.append(f"overhead: CUDA context {context:,} bytes (a default) + rounding to {CUDA_BLOCK_BYTES}-byte "
                     f"blocks {tracker.peak_rounded - peak:,} bytes; segments and cuBLAS/cuDNN workspaces not modeled")
        if tracker.device_type != "cuda":
            notes.append("no CUDA here: traced with CPU kernels and CPU autocast rules")
    if setup.precision == "fp16":
        notes.append("fp16: the gradient scaler's scalars are not traced (it unscales in place)")
    scratch = max(0, tracker.peak_with_scratch - tracker.peak_rounded)
    if scratch:
        notes.append(f"scratch of {setup.precision} matrix-product kernels (oneDNN, {torch.get_num_threads()} "
                     f"threads) is not traced: at most {scratch:,} bytes more at the peak (a stated bound)")
    return MemoryEstimate(
        parameters=sum(p.numel() for p in model.parameters()), weights_bytes=total(weights, tracker.live),
        gradients_bytes=total(gradients, tracker.live), optimizer_bytes=total(state, tracker.live),
        activations_bytes=peak - total(weights | state, at_peak) - gradients_at_peak,
        overhead_bytes=context + tracker.peak_rounded - peak, peak_bytes=context + tracker.peak_rounded,
        batch_size=batch_size, precision=setup.precision, optimizer=setup.optimizer, kernel_scratch_bound_bytes=scratch,
        method=f"fake-tensor trace of a steady-state training step (torch {torch.__version__}, "
               f"{tracker.device_type} kernels)",
        notes=tuple(notes))


def estimate_memory(model: nn.Module | Callable[[], nn.Module], input_shape: tuple[int, ...], batch_size: int,
                    num_classes: int, optimizer: str = "adamw", precision: str = "fp32", device_type: str = "cuda",
                    *, input_dtype: torch.dtype | None = None, channels_last: bool = False,
                    grad_accumulation: int = 1) -> MemoryEstimate:
    """Device bytes of a training step on `batch_size` samples of `input_shape`, traced (see the module's docstring).

    model: a factory (`lambda: build_model(...)`, run on the meta device: nothing allocated) or a module (copied
    with meta weights). optimizer: adamw | adam | sgd (momentum 0.9); foreach on CUDA as torch defaults there.
    precision: fp32 | fp64 (weights in that type) | bf16 | fp16 (fp32 weights, forward under autocast).
    input_dtype: the batch's dtype, float32 (float64 for fp64) unless given (token ids: torch.long; gpufeed's feed
    gives bfloat16 under bf16). channels_last: 4-D batch and weights in that format, as gpufeed train.
    grad_accumulation: micro-batches of `batch_size` per optimizer step (both step orders are traced; with more
    than 1, `peak_bytes` is the larger). Raises ConfigError for bad arguments, a factory that raises, or a model
    that cannot train on such a batch.
    """
    if not _positive_int(batch_size):
        raise ConfigError(f"the batch size must be a positive int, got {batch_size!r}")
    setup = _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
                   grad_accumulation)
    return _planned(model, setup, batch_size)


def max_batch_size(model_or_factory: nn.Module | Callable[[], nn.Module], input_shape: tuple[int, ...],
                   num_classes: int, capacity_bytes: int, optimizer: str = "adamw", precision: str = "fp32",
                   device_type: str = "cuda", *, input_dtype: torch.dtype | None = None, channels_last: bool = False,
                   grad_accumulation: int = 1) -> int:
    """The largest batch whose traced peak_bytes (overhead included) is at most capacity_bytes; 0 if 1 is not.

    Each moment of the step holds bytes affine in the batch, so the peak is the largest of a few lines: convex.
    A line through two traced batches guesses; each guess is traced; a secant between the largest batch that
    fits and the smallest that does not never overshoots, and the search ends when they are adjacent. Peaks are
    remembered per factory (weakly) and setting, so asking for many capacities, as ranking the catalog's cards
    does, reuses them: a factory must build the same model every time.
    """
    if not _positive_int(capacity_bytes):
        raise ConfigError(f"the memory capacity must be a positive int of bytes, got {capacity_bytes!r}")
    setup = _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
                   grad_accumulation)
    orders = STEP_ORDERS if grad_accumulation > 1 else ("grads_freed",)
    known: dict[tuple[_Setup, int], int] = {}
    with contextlib.suppress(TypeError):  # a module, or a factory without weak references: no memory across calls
        if not isinstance(model_or_factory, nn.Module):
            known = _TRACED_PEAKS.setdefault(model_or_factory, known)

    def peak(batch: int) -> int:
        if (setup, batch) not in known:
            known[(setup, batch)] = max(_trace(model_or_factory, setup, batch, order).peak_bytes for order in orders)
        return known[(setup, batch)]

    def bracket() -> tuple[int, int | None, int | None]:  # largest fitting, smallest failing, next traced below
        traced = {batch: bytes_ for (at, batch), bytes_ in known.items() if at == setup}
        fits = max(batch for batch, bytes_ in traced.items() if bytes_ <= capacity_bytes)
        fails = min((batch for batch, bytes_ in traced.items() if bytes_ > capacity_bytes), default=None)
        return fits, fails, max((batch for batch in traced if batch < fits), default=None)

    if peak(1) > capacity_bytes:
        return 0
    for attempt in range(64):
        fits, fails, previous = bracket()
        if fails == fits + 1:
            return fits
        guess = FIRST_GUESS_BATCH
        if fails is not None or previous is not None:
            low, high = (previous, fits) if fails is None else (fits, fails)
            rise = peak(high) - peak(low)
            guess = fits + (capacity_bytes - peak(fits)) * (high - low) // rise if rise > 0 else 2 * fits
        if fails is not None:  # between the two; bisect if 12 secants have not closed the gap
            guess = min(guess, fails - 1) if attempt < 12 else (fits + fails) // 2
        peak(max(guess, fits + 1))
    return bracket()[0]
