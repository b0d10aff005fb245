"""Device memory of one training step, itemized, traced with fake tensors: nothing is allocated.

The model is built on the meta device and its weights become `FakeTensorMode` tensors (shape, dtype, device, no
data). The steady state is traced: gradients as the last step left them and an optimizer.step() on them make the
optimizer's state (what a first step leaves), then one training step runs: zero_grad(set_to_none=True) ->
forward (autocast for bf16/fp16) -> cross-entropy -> backward -> optimizer.step(). `LiveBytes` (live_bytes.py)
counts each storage an operation creates, once, until its last reference is gone, and keeps the peak. Scratch a
kernel allocates and frees inside itself (im2col buffers, cuBLAS/cuDNN workspaces) is not seen: up to 3% of the
peak on the CPU (benchmarks/plan_accuracy.py).

On a CUDA target `overhead_bytes` is CUDA_CONTEXT_BYTES plus the caching allocator's rounding of every block up
to 512 bytes (so peak_bytes - CUDA_CONTEXT_BYTES models `torch.cuda.max_memory_allocated`); the 2 MiB and
20 MiB segments blocks are cut from (reserved minus allocated) are not modeled. Without CUDA here, a CUDA target
is traced with CPU kernels and CPU autocast rules. On the CPU the overhead is 0.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses import FakeTensorMode

from gpufeed.errors import ConfigError
from gpufeed.plan.live_bytes import LiveBytes

OPTIMIZERS = ("adamw", "adam", "sgd")
PRECISIONS = ("fp32", "bf16", "fp16", "fp64")
DEVICE_TYPES = ("cuda", "cpu")
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
    peak_bytes: the most bytes live at once in the step, plus the overhead: weights + activations + overhead +
    the gradients and optimizer state live at the peak (a peak in the backward sees only part of the gradients;
    `notes` says how much).
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


@dataclass(frozen=True)
class _Setup:
    input_shape: tuple[int, ...]
    num_classes: int
    optimizer: str
    precision: str
    device_type: str
    input_dtype: torch.dtype
    channels_last: bool
    zero_grad_after_forward: bool


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())[:300]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
           zero_grad_after_forward) -> _Setup:
    for name, value, choices in (("optimizer", optimizer, OPTIMIZERS), ("precision", precision, PRECISIONS),
                                 ("device type", device_type, DEVICE_TYPES)):
        if value not in choices:
            raise ConfigError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
    shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else ()
    if not shape or not all(_positive_int(size) for size in shape):
        raise ConfigError(f"the input shape of one sample must be positive ints, e.g. (3, 32, 32); got {input_shape}")
    if not _positive_int(num_classes) or num_classes < 2:
        raise ConfigError(f"a classifier needs at least 2 classes, got {num_classes!r}")
    default_dtype = torch.float64 if precision == "fp64" else torch.float32
    return _Setup(shape, num_classes, optimizer, precision, device_type, input_dtype or default_dtype, channels_last,
                  zero_grad_after_forward)


def _meta_model(model_or_factory: nn.Module | Callable[[], nn.Module]) -> nn.Module:
    """The model with parameters and buffers on the meta device: built there, or a copy of the module."""
    if isinstance(model_or_factory, nn.Module):
        memo: dict[int, torch.Tensor] = {}
        for tensor in itertools.chain(model_or_factory.parameters(), model_or_factory.buffers()):
            meta = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
            memo[id(tensor)] = nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else meta
        return copy.deepcopy(model_or_factory, memo)
    try:
        with torch.device("meta"):
            model = model_or_factory()
    except Exception as error:
        raise ConfigError(f"the model factory raised {_one_line(error)}; fix it, or pass an nn.Module") from error
    if not isinstance(model, nn.Module):
        raise ConfigError(f"the model factory returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _fake_weights(model: nn.Module, device: torch.device, dtype: torch.dtype, channels_last: bool) -> None:
    """Under FakeTensorMode: model.to(device, dtype, memory format), in place (nn.Module.to cannot swap fakes)."""
    made: dict[int, torch.Tensor] = {}  # tied weights stay tied
    for module in model.modules():
        for table, is_parameter in ((module._parameters, True), (module._buffers, False)):
            for name, old in [(name, old) for name, old in table.items() if old is not None]:
                if id(old) not in made:
                    kind = dtype if old.is_floating_point() else old.dtype
                    if channels_last and old.dim() == 4:
                        new = torch.empty(old.shape, dtype=kind, device=device, memory_format=torch.channels_last)
                    else:
                        new = torch.empty_strided(old.shape, old.stride(), dtype=kind, device=device)
                    made[id(old)] = nn.Parameter(new, old.requires_grad) if is_parameter else new
                table[name] = made[id(old)]


def _make_optimizer(name: str, parameters, foreach: bool) -> torch.optim.Optimizer:
    """Torch's defaults, foreach (multi-tensor, with its temporaries) as torch picks it for real CUDA tensors."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.1, momentum=0.9, foreach=foreach)
    return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(parameters, lr=1e-3, foreach=foreach)


def _one_step(model: nn.Module, optimizer, inputs, labels, setup: _Setup, tracker: LiveBytes) -> None:
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(setup.precision)
    autocast = (torch.autocast(inputs.device.type, dtype=autocast_dtype) if autocast_dtype is not None
                else contextlib.nullcontext())
    if not setup.zero_grad_after_forward:
        optimizer.zero_grad(set_to_none=True)
    tracker.phase = "forward"
    with autocast:
        logits = model(inputs)  # (B, classes), held through the step as most loops do
        if tuple(logits.shape) != (len(inputs), setup.num_classes):
            raise ConfigError(f"the model returns {tuple(logits.shape)} for a batch of {len(inputs)}, not "
                              f"({len(inputs)}, {setup.num_classes}) logits (batch, classes)")
        loss = F.cross_entropy(logits, labels)
    if setup.zero_grad_after_forward:
        optimizer.zero_grad(set_to_none=True)
    tracker.phase = "backward"
    loss.backward()
    tracker.phase = "optimizer step"
    optimizer.step()


def _trace(model_or_factory, setup: _Setup, batch_size: int) -> MemoryEstimate:
    device = torch.device("cuda" if setup.device_type == "cuda" and torch.cuda.is_available() else "cpu")
    model, shape = _meta_model(model_or_factory), (batch_size, *setup.input_shape)
    channels_last = setup.channels_last and len(shape) == 4
    tracker = LiveBytes(device.type, CUDA_BLOCK_BYTES if setup.device_type == "cuda" else 1)
    try:
        with FakeTensorMode():
            _fake_weights(model.train(), device, torch.float64 if setup.precision == "fp64" else torch.float32,
                          channels_last)
            for tensor in itertools.chain(model.parameters(), model.buffers()):
                tracker.add(tensor)
            with tracker:
                optimizer = _make_optimizer(setup.optimizer, model.parameters(), setup.device_type == "cuda")
                inputs = torch.empty(shape, dtype=setup.input_dtype, device=device,
                                     memory_format=torch.channels_last if channels_last else torch.contiguous_format)
                labels = torch.zeros(batch_size, dtype=torch.long, device=device)
                for parameter in model.parameters():  # last step's gradients, laid out as autograd lays them
                    parameter.grad = torch.empty_like(parameter) if parameter.requires_grad else None
                optimizer.step()  # makes the optimizer's state, as a first step would: the steady state follows
                first_gradients = tracker.serials_of(p.grad for p in model.parameters())
                tracker.reset_peak()
                _one_step(model, optimizer, inputs, labels, setup, tracker)
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"could not trace a training step on a batch of shape {shape}: {_one_line(error)}") from error
    return _summarize(tracker, model, optimizer, setup, batch_size, first_gradients)


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
    return MemoryEstimate(
        parameters=sum(p.numel() for p in model.parameters()), weights_bytes=total(weights, tracker.live),
        gradients_bytes=total(gradients, tracker.live), optimizer_bytes=total(state, tracker.live),
        activations_bytes=peak - total(weights | state, at_peak) - gradients_at_peak,
        overhead_bytes=context + tracker.peak_rounded - peak, peak_bytes=context + tracker.peak_rounded,
        batch_size=batch_size, precision=setup.precision, optimizer=setup.optimizer,
        method=f"fake-tensor trace of a steady-state training step (torch {torch.__version__}, "
               f"{tracker.device_type} kernels)",
        notes=tuple(notes))


def estimate_memory(model: nn.Module | Callable[[], nn.Module], input_shape: tuple[int, ...], batch_size: int,
                    num_classes: int, optimizer: str = "adamw", precision: str = "fp32", device_type: str = "cuda",
                    *, input_dtype: torch.dtype | None = None, channels_last: bool = False,
                    zero_grad_after_forward: bool = False) -> MemoryEstimate:
    """Device bytes of a training step on `batch_size` samples of `input_shape`, traced (see the module's docstring).

    model: a factory (`lambda: build_model(...)`, run on the meta device: nothing allocated) or a module (copied
    with meta weights). optimizer: adamw | adam | sgd (momentum 0.9); foreach on CUDA as torch defaults there.
    precision: fp32 | fp64 (weights in that type) | bf16 | fp16 (fp32 weights, forward under autocast).
    input_dtype: the batch's dtype, float32 (float64 for fp64) unless given (token ids: torch.long; gpufeed's feed
    gives bfloat16 under bf16). channels_last: 4-D batch and weights in that format, as gpufeed train.
    zero_grad_after_forward: the loop zeroes gradients after the forward, as gpufeed train does, so the last
    step's gradients are held through the forward. Raises ConfigError for bad arguments, a factory that raises,
    or a model that cannot train on such a batch.
    """
    if not _positive_int(batch_size):
        raise ConfigError(f"the batch size must be a positive int, got {batch_size!r}")
    setup = _setup(input_shape, num_classes, optimizer, precision, device_type, input_dtype, channels_last,
                   zero_grad_after_forward)
    return _trace(model, setup, batch_size)


def max_batch_size(model_or_factory: nn.Module | Callable[[], nn.Module], input_shape: tuple[int, ...],
                   num_classes: int, capacity_bytes: int, optimizer: str = "adamw", precision: str = "fp32",
                   device_type: str = "cuda", *, input_dtype: torch.dtype | None = None, channels_last: bool = False,
                   zero_grad_after_forward: bool = False) -> int:
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
                   zero_grad_after_forward)
    known: dict[tuple[_Setup, int], int] = {}
    with contextlib.suppress(TypeError):  # a module, or a factory without weak references: no memory across calls
        if not isinstance(model_or_factory, nn.Module):
            known = _TRACED_PEAKS.setdefault(model_or_factory, known)

    def peak(batch: int) -> int:
        if (setup, batch) not in known:
            known[(setup, batch)] = _trace(model_or_factory, setup, batch).peak_bytes
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
