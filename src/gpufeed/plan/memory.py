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
from gpufeed.plan.language.fused_attention import fused_attention
from gpufeed.plan.language.model import rows_as_read
from gpufeed.plan.language.nf4 import parameter_elements
from gpufeed.plan.live_bytes import LiveBytes
from gpufeed.plan.optimizers import PLAN_OPTIMIZERS, make_plan_optimizer
from gpufeed.plan.traffic import TrafficCounter
from gpufeed.train.step import TRAIN_PRECISIONS, Precision, TrainStep

DEVICE_TYPES = ("cuda", "cpu")
PRECISIONS = (*TRAIN_PRECISIONS, "bf16-true")  # bf16-true: weights, gradients and optimizer state in bf16
STEP_ORDERS = ("grads_freed", "grads_live")
# What a process holds on the GPU before its first tensor: CUDA context, cuBLAS/cuDNN handles. 300-600 MiB with
# CUDA 12's lazy loading, by card and libraries: a round default, not a measurement of any card.
CUDA_CONTEXT_BYTES = 500 * 2**20
CUDA_BLOCK_BYTES = 512  # the CUDA caching allocator rounds every allocation up to a multiple of this
SEQUENCE_STEP = 128  # the longest sequence that fits is found to this many tokens
_TRACED_PEAKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # factory -> {(setup, batch): peak_bytes}


@dataclass(frozen=True)
class MemoryEstimate:
    """Device bytes of one training step in the steady state (the optimizer's state exists), on one GPU or the CPU.

    weights_bytes: parameters and buffers (BatchNorm's running statistics, rotary tables), of which
    trainable_weights_bytes are the parameters trained and frozen_weights_bytes the rest (a LoRA base, buffers).
    gradients_bytes: one per trained parameter. optimizer_bytes: SGD's momentum buffers; Adam's exp_avg and
    exp_avg_sq and a 4-byte step per parameter tensor (plan/optimizers.py for the others).
    activations_bytes: at the forward's and backward's own peak, what is held besides the weights, gradients and
    optimizer state: the batch, tensors saved for the backward, autocast's bf16/fp16 copies of weights, gradients
    in flight. optimizer_step_bytes: at the optimizer step's own peak, what it holds besides them (its
    temporaries: foreach's, an fp32 copy of a bf16 weight).
    overhead_bytes: CUDA context + allocator rounding at the peak; 0 on the CPU.
    peak_bytes: the most bytes live at once in the loop planned (`step_order`), plus the overhead, in `peak_phase`
    ("forward", "backward" or "optimizer step"); `peak_parts` is what it holds, summing to it exactly: weights,
    the gradients and optimizer state live then (a peak in the backward sees only part of the gradients),
    activations or the optimizer step's bytes, overhead. The parts above are those of the order that peaks.
    sequence_length: a language model's tokens per sample (None for other inputs).
    weight_copies_bytes: of activations_bytes (at the forward's and backward's own peak), autocast's bf16/fp16
    copies of trained weights (a sharded plan's mixed precision gathers weights in that dtype instead:
    plan/language/sharding.py); computing_gradients_bytes: the gradients live at that moment.
    step_flops: the FLOPs of one micro-batch's forward and backward as traced (traffic.py's counter, torch's
    formulas as FlopCounterMode has them: matrix products; sdpa by torch's formulas through fused_attention.py's
    stand-in on a CUDA target, while a CPU target's sdpa kernel has none and counts 0). Recomputation under
    checkpointing is in it; the gradients of frozen weights, never computed, are not.
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
    trainable_parameters: int = 0
    trainable_weights_bytes: int = 0
    frozen_weights_bytes: int = 0
    optimizer_step_bytes: int = 0
    peak_phase: str = ""
    peak_parts: dict[str, int] = field(default_factory=dict)
    sequence_length: int | None = None
    weight_copies_bytes: int = 0
    computing_gradients_bytes: int = 0
    step_flops: int = 0


@dataclass(frozen=True)
class _Setup:
    input_shape: tuple[int, ...]
    num_classes: int | None  # None: a language model (token ids in, its own loss)
    optimizer: str
    precision: str
    device_type: str
    input_dtype: torch.dtype
    channels_last: bool
    grad_accumulation: int
    frozen_dtype: torch.dtype | None = None  # a parameter not trained is held in this dtype (None: the precision's)

    @property
    def tokens(self) -> bool:
        return self.num_classes is None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
           grad_accumulation) -> _Setup:
    for name, value, choices in (("optimizer", optimizer, PLAN_OPTIMIZERS), ("precision", precision, PRECISIONS),
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
    counter = TrafficCounter()  # FLOPs by torch's formulas, per operator; it holds no tensor
    try:
        with rows_as_read() if setup.tokens else contextlib.nullcontext(), \
                fused_attention() if setup.tokens and setup.device_type == "cuda" else contextlib.nullcontext() \
                as attention, FakeTensorMode():
            fake_weights(model.train(), device, precision.parameter_dtype, channels_last, setup.frozen_dtype)
            for tensor in itertools.chain(model.parameters(), model.buffers()):
                tracker.add(tensor)
            with tracker:
                trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
                optimizer = make_plan_optimizer(setup.optimizer, trained, foreach=setup.device_type == "cuda")
                inputs = torch.empty(shape, dtype=setup.input_dtype, device=device,
                                     memory_format=torch.channels_last if channels_last else torch.contiguous_format)
                labels = torch.zeros(shape if setup.tokens else batch_size, dtype=torch.long, device=device)
                for parameter in trained:  # last step's gradients, laid out as autograd lays them
                    parameter.grad = torch.empty_like(parameter)
                optimizer.step()  # makes the optimizer's state, as a first step would: the steady state follows
                first_gradients = tracker.serials_of(p.grad for p in trained)
                tracker.reset_peak()
                # no scaler: its step reads a value, which fake tensors do not have (it unscales in place)
                step = TrainStep(model, optimizer, precision, device.type, num_classes=setup.num_classes,
                                 on_phase=lambda phase: setattr(tracker, "phase", phase),
                                 loss="model" if setup.tokens else "cross_entropy")
                if order == "grads_freed":
                    step.zero_grad()
                with counter:
                    step.forward_backward(inputs, labels, loss_scale=1.0 / setup.grad_accumulation)
                step.optimizer_step()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"could not trace a training step on a batch of shape {shape}: {one_line(error)}") from error
    flops = sum(op.flops * op.count for op in counter.operators()) + (attention.total if attention else 0)
    return dataclasses.replace(_summarize(tracker, model, optimizer, setup, batch_size, first_gradients),
                               step_flops=flops)


def _planned(model_or_factory, setup: _Setup, batch_size: int) -> MemoryEstimate:
    """Both orders traced; the estimate of the loop planned (with K > 1, the larger), carrying both peaks."""
    traced = {order: _trace(model_or_factory, setup, batch_size, order) for order in STEP_ORDERS}
    planned = traced["grads_freed"]
    if setup.grad_accumulation > 1 and traced["grads_live"].peak_bytes > planned.peak_bytes:
        planned = traced["grads_live"]
    _known_peaks(model_or_factory)[setup, batch_size] = planned.peak_bytes  # what _remembered_peaks would trace
    return dataclasses.replace(planned, grad_accumulation=setup.grad_accumulation,
                               step_order=step_order_text(setup.grad_accumulation),
                               peak_bytes_by_order={order: traced[order].peak_bytes for order in STEP_ORDERS})


def _summarize(tracker: LiveBytes, model: nn.Module, optimizer, setup: _Setup, batch_size: int,
               first_gradients: set[int]) -> MemoryEstimate:
    def total(serials: set[int], live: dict[int, int]) -> int:
        return sum(live.get(serial, 0) for serial in serials)

    trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
    weights = tracker.serials_of(itertools.chain(model.parameters(), model.buffers()))
    trainable = tracker.serials_of(trained)
    gradients = tracker.serials_of(p.grad for p in trained) | first_gradients  # the first step's live to zero_grad
    state = tracker.serials_of(t for per_parameter in optimizer.state.values() for t in per_parameter.values()
                               if isinstance(t, torch.Tensor))
    held = weights | gradients | state

    def live_at(phases: tuple[str, ...]) -> dict[int, int]:  # what was live at the largest of these phases' peaks
        peaks = [tracker.phase_peaks[phase] for phase in phases if phase in tracker.phase_peaks]
        return max(peaks, key=lambda peak: peak[0])[1] if peaks else {}

    def beyond_held(phases: tuple[str, ...]) -> int:  # at the largest of these phases' peaks, the rest
        live = live_at(phases)
        return sum(live.values()) - total(held, live)

    computing = live_at(("forward", "backward"))

    peak, at_peak = sum(tracker.peak_live.values()), tracker.peak_live
    gradients_at_peak, state_at_peak = total(gradients, at_peak), total(state, at_peak)
    context = CUDA_CONTEXT_BYTES if setup.device_type == "cuda" else 0
    in_optimizer = tracker.peak_phase == "optimizer step"
    parts = {"weights": total(weights, at_peak), "gradients": gradients_at_peak, "optimizer": state_at_peak,
             "optimizer step" if in_optimizer else "activations": peak - total(held, at_peak),
             "overhead": context + tracker.peak_rounded - peak}
    notes = [f"peak in the {tracker.peak_phase}; live then: {gradients_at_peak:,} gradient "
             f"bytes, {state_at_peak:,} of {total(state, tracker.live):,} optimizer bytes"]
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
    weights_bytes = total(weights, tracker.live)
    trainable_bytes = total(trainable, tracker.live)
    return MemoryEstimate(
        parameters=sum(parameter_elements(model).values()), weights_bytes=weights_bytes,
        gradients_bytes=total(tracker.serials_of(p.grad for p in trained), tracker.live),
        optimizer_bytes=total(state, tracker.live),
        activations_bytes=beyond_held(("forward", "backward")), overhead_bytes=parts["overhead"],
        peak_bytes=context + tracker.peak_rounded, batch_size=batch_size, precision=setup.precision,
        optimizer=setup.optimizer, kernel_scratch_bound_bytes=scratch,
        method=f"fake-tensor trace of a steady-state training step (torch {torch.__version__}, "
               f"{tracker.device_type} kernels)",
        notes=tuple(notes), trainable_parameters=sum(p.numel() for p in trained),
        trainable_weights_bytes=trainable_bytes, frozen_weights_bytes=weights_bytes - trainable_bytes,
        optimizer_step_bytes=beyond_held(("optimizer step",)), peak_phase=tracker.peak_phase, peak_parts=parts,
        sequence_length=setup.input_shape[0] if setup.tokens else None,
        weight_copies_bytes=total(tracker.weight_copies, computing),
        computing_gradients_bytes=total(gradients, computing))


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
    """The largest batch whose traced peak_bytes (overhead included) is at most capacity_bytes; 0 if 1 is not,
    found by `fits_by_capacity`. Peaks are remembered per factory (weakly) and setting, so asking for many
    capacities, as ranking the catalog's cards does, reuses them: a factory must build the same model every time.
    """
    if not _positive_int(capacity_bytes):
        raise ConfigError(f"the memory capacity must be a positive int of bytes, got {capacity_bytes!r}")
    setup = _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
                   grad_accumulation)
    return fits_by_capacity(_remembered_peaks(model_or_factory, lambda batch: (setup, batch)),
                            [capacity_bytes])[capacity_bytes]


def _known_peaks(model_or_factory) -> dict[tuple[_Setup, int], int]:
    """The peaks traced so far for this factory by setting and batch (weakly per factory; a module, or a factory
    without weak references, starts empty each time)."""
    with contextlib.suppress(TypeError):
        if not isinstance(model_or_factory, nn.Module):
            return _TRACED_PEAKS.setdefault(model_or_factory, {})
    return {}


def _remembered_peaks(model_or_factory, setup_and_batch: Callable[[int], tuple[_Setup, int]]) -> Callable[[int], int]:
    """peak(n): the traced peak of the setting `setup_and_batch(n)` gives (the larger of both orders with
    accumulation), remembered per factory (weakly) and setting."""
    known = _known_peaks(model_or_factory)

    def peak(size: int) -> int:
        setup, batch = key = setup_and_batch(size)
        if key not in known:
            orders = STEP_ORDERS if setup.grad_accumulation > 1 else ("grads_freed",)
            known[key] = max(_trace(model_or_factory, setup, batch, order).peak_bytes for order in orders)
        return known[key]

    return peak


def _language_setup(sequence_length: int, optimizer: str, precision: str, device_type: str,
                    frozen_dtype: torch.dtype | None, grad_accumulation: int) -> _Setup:
    if not _positive_int(sequence_length):
        raise ConfigError(f"the sequence length must be a positive number of tokens, got {sequence_length!r}")
    setup = _setup((sequence_length,), 2, optimizer, precision, device_type, torch.long, False, grad_accumulation)
    return dataclasses.replace(setup, num_classes=None, frozen_dtype=frozen_dtype)


def estimate_language_memory(model_factory: Callable[[], nn.Module], sequence_length: int, batch_size: int,
                             optimizer: str = "adamw", precision: str = "bf16", device_type: str = "cuda", *,
                             frozen_dtype: torch.dtype | None = None, grad_accumulation: int = 1) -> MemoryEstimate:
    """Device bytes of a language model's training step on `batch_size` sequences of `sequence_length` token ids
    (int64), its own loss on labels of the same shape (train/step.py `language_model_loss`); otherwise as
    `estimate_memory`. `model_factory` builds the model (plan/language/model.py builds it on the meta device with
    the method applied); its parameters with requires_grad False are frozen: no gradient, no optimizer state, held
    in `frozen_dtype` when given. precision also takes bf16-true (PRECISIONS)."""
    if not _positive_int(batch_size):
        raise ConfigError(f"the batch size must be a positive int, got {batch_size!r}")
    setup = _language_setup(sequence_length, optimizer, precision, device_type, frozen_dtype, grad_accumulation)
    return _planned(model_factory, setup, batch_size)


def fits_by_capacity(peak: Callable[[int], int], capacities: list[int], limit: int | None = None,
                     step: int = 1) -> dict[int, int]:
    """For each capacity, the largest size n (a multiple of `step`, at most `limit`) with peak(n) <= capacity,
    checked by tracing n and n + step (0 when `step` does not fit); every trace is shared across capacities.

    When the peak is a line (`_read_off_the_line`: three traces answer every capacity), the answers are read off it.
    Otherwise a size is first guessed, then checked: after peak(step) and peak(2 step), by the line through them,
    and once three sizes are traced, by the parabola through the three nearest the capacity (a step's bytes are
    a polynomial of degree at most 2 in the batch or the sequence within one moment of peaking: linear layers and
    sdpa are linear in both, eager attention's scores quadratic in the sequence). A guess outside the sizes known
    to fit and not to fit is replaced by their midpoint (or a doubling above), so the search always closes.
    """
    traced: dict[int, int] = {}

    def at(size: int) -> int:
        if size not in traced:
            traced[size] = peak(size)
        return traced[size]

    def on_grid(size: float) -> int:
        return max(step, int(size // step) * step)

    def guess(capacity: int) -> float | None:
        points = sorted(traced, key=lambda size: abs(traced[size] - capacity))[:3]
        if len(points) < 2:
            return None
        if len(points) == 2 or len({traced[size] for size in points}) < 3:
            (x1, y1), (x2, y2) = sorted((size, traced[size]) for size in points[:2])
            return None if y2 == y1 else x1 + (capacity - y1) * (x2 - x1) / (y2 - y1)
        (x1, y1), (x2, y2), (x3, y3) = sorted((size, traced[size]) for size in points)
        d1, d2 = (y2 - y1) / (x2 - x1), (y3 - y2) / (x3 - x2)
        a = (d2 - d1) / (x3 - x1)  # y = y1 + d1 (x - x1) + a (x - x1)(x - x2)
        b, c = d1 - a * (x1 + x2), y1 - d1 * x1 + a * x1 * x2 - capacity
        if abs(a) < 1e-12:
            return None if b == 0 else -c / b
        disc = b * b - 4 * a * c
        if disc < 0:
            return None
        roots = [(-b + sign * disc ** 0.5) / (2 * a) for sign in (1, -1)]
        above = [root for root in roots if root >= x1 / 2]
        return min(above) if above else None

    answers: dict[int, int] = {}
    if limit is not None:
        limit = (limit // step) * step  # the largest size on the grid
        if limit == 0:
            return {capacity: 0 for capacity in capacities}
    first = at(step)
    if limit is None or limit >= 2 * step:
        answers = _read_off_the_line(at, capacities, limit, step, first, at(2 * step) - first)
    for capacity in sorted(set(capacities) - set(answers)):
        for _ in range(64):
            fits = max((size for size, bytes_ in traced.items() if bytes_ <= capacity), default=0)
            fails = min((size for size, bytes_ in traced.items() if bytes_ > capacity), default=None)
            if fits == 0 or (fails is not None and fails - fits <= step) or (limit is not None and fits >= limit):
                answers[capacity] = fits if limit is None else min(fits, limit)
                break
            top = fails if fails is not None else (limit + step if limit is not None else None)
            predicted = guess(capacity)
            size = None if predicted is None else on_grid(predicted)
            if size is None or size <= fits or (top is not None and size >= top):
                size = on_grid((fits + top) // 2) if top is not None else 2 * fits
                size = max(size, fits + step)
            if top is not None and size >= top:
                size = fits + step
            if at(size) <= capacity and (top is None or size + step < top):
                at(size + step)
    return answers


def _read_off_the_line(at: Callable[[int], int], capacities: list[int], limit: int | None, step: int, first: int,
                       rise: int) -> dict[int, int]:
    """Every capacity's answer from the line through peak(step) and peak(2 step), when peak(far), one step past the
    line's answer for the largest capacity, is on it too: a convex peak (the largest of the moments' bytes, each
    affine in the batch) that meets a line at step, 2 step and far is that line on all of [step, far], since it
    lies above the line's extension beyond 2 step and below its chord. Answers below far are then exact; none
    are given otherwise."""
    if rise <= 0:
        return {}

    def on_line(capacity: int) -> int:
        n = 0 if capacity < first else ((capacity - first) // rise + 1) * step
        return n if limit is None else min(n, limit)

    far = on_line(max(capacities)) + step
    far = far if limit is None else min(far, limit)
    if far > 2 * step and at(far) != first + rise * (far // step - 1):
        return {}
    return {capacity: on_line(capacity) for capacity in capacities
            if on_line(capacity) < far or on_line(capacity) == limit}


def language_fits(model_factory: Callable[[], nn.Module], capacities: list[int], sequence_length: int,
                  batch_size: int, optimizer: str = "adamw", precision: str = "bf16", device_type: str = "cuda", *,
                  frozen_dtype: torch.dtype | None = None, grad_accumulation: int = 1,
                  max_positions: int | None = None) -> dict[int, tuple[int, int]]:
    """For each capacity in bytes: (the largest micro-batch of `sequence_length` tokens, the longest sequence at
    `batch_size`, a multiple of SEQUENCE_STEP tokens at most `max_positions`) whose traced peak fits it; 0 for one
    that does not fit at 1 (`fits_by_capacity`). Peaks are remembered per factory, so asking again reuses the traces."""
    if not capacities or not all(_positive_int(capacity) for capacity in capacities):
        raise ConfigError(f"the memory capacities must be positive ints of bytes, got {capacities!r}")

    def setting(tokens: int, batch: int) -> tuple[_Setup, int]:
        return _language_setup(tokens, optimizer, precision, device_type, frozen_dtype, grad_accumulation), batch

    by_batch = fits_by_capacity(_remembered_peaks(model_factory, lambda batch: setting(sequence_length, batch)),
                                capacities)
    by_length = fits_by_capacity(_remembered_peaks(model_factory, lambda tokens: setting(tokens, batch_size)),
                                 capacities, limit=max_positions, step=SEQUENCE_STEP)
    return {capacity: (by_batch[capacity], by_length[capacity]) for capacity in capacities}
