"""FLOPs and memory traffic of one training step, per operator, traced on fake tensors (nothing is allocated).

The step is train/step.py's, in the steady state memory.py traces (the optimizer's state exists): zero_grad,
forward (autocast under bf16/fp16), cross-entropy, backward, optimizer step. `TrafficCounter`, a dispatch mode,
sees every aten operator the step runs and records, per operator:
- its FLOPs, from torch's own formulas (`torch.utils.flop_counter.flop_registry`, the ones FlopCounterMode and so
  compute.flops_per_step use: matrix products and convolutions; elementwise operators, norms and pooling count 0);
- its memory traffic: the bytes of its tensor inputs plus its tensor outputs (each read or written once from
  device memory: the usual roofline approximation). Views move nothing and count 0; a broadcast input counts
  its storage, not its expanded size. Real traffic is lower where kernels are fused or operands stay in L2 and
  shared memory, and higher where a kernel reads an operand more than once (im2col, tiles); the memory
  efficiency in roofline.py absorbs both;
- for a convolution whose activations are NCHW (not channels_last), their bytes: cuDNN's tensor-core kernels
  work in NHWC, so such a convolution runs between transposes (nchwToNhwcKernel / nhwcToNchwKernel in a
  profile); roofline.py charges them where the convolution runs on tensor cores.
The optimizer's operators are kept apart (`phase`), so K accumulated micro-batches cost K forward-backward
passes and one optimizer step. Without CUDA here a CUDA target is traced with CPU kernels and CPU autocast
rules (for convnets and MLPs the same dtypes). Under fp16 the gradient scaler is not traced (its step reads a
value); its unscale reads the gradients once more, a few per cent of an optimizer step.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch._subclasses import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from gpufeed.errors import ConfigError
from gpufeed.plan.fake_model import fake_weights, meta_model, one_line
from gpufeed.train.step import OPTIMIZERS, Precision, TrainStep, make_optimizer

PLAN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp64")  # tf32: fp32 tensors, TF32 matrix products
CONVOLUTIONS = {"convolution", "convolution_backward", "_convolution"}
# operators that allocate or describe a tensor without reading or writing its bytes
NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "device", "lift_fresh",
              "detach", "alias", "_record_function_enter_new", "_record_function_exit"}
OPTIMIZER_PHASE = "optimizer step"


@dataclass(frozen=True)
class OperatorCost:
    """`count` operators alike in all the rest: aten name, kind (convolution, matmul, other), the dtype of their
    first tensor input, FLOPs, bytes read and written, bytes of NCHW convolution activations, phase."""

    name: str
    kind: str
    dtype: str
    flops: int
    bytes: int
    nchw_bytes: int
    optimizer: bool
    count: int = 1


@dataclass(frozen=True)
class StepTraffic:
    """One step of `batch_size` samples in `precision`, its operators aggregated. flops and bytes: the forward
    and backward of one micro-batch; optimizer_bytes: the optimizer step's traffic (its FLOPs are left out, as
    compute.flops_per_step leaves them out)."""

    precision: str
    batch_size: int
    operators: tuple[OperatorCost, ...]
    method: str

    @property
    def flops(self) -> int:
        return sum(op.flops * op.count for op in self.operators if not op.optimizer)

    @property
    def bytes(self) -> int:
        return sum(op.bytes * op.count for op in self.operators if not op.optimizer)

    @property
    def optimizer_bytes(self) -> int:
        return sum(op.bytes * op.count for op in self.operators if op.optimizer)


def _tensor_bytes(tensor: torch.Tensor) -> int:
    """The bytes an operator touches of `tensor`: its elements, at most its storage (a broadcast reads less)."""
    return min(tensor.numel() * tensor.element_size(), tensor.untyped_storage().nbytes())


def _nchw_bytes(name: str, args: tuple, out) -> int:
    """Bytes of the activations of a convolution whose input is 4-D and not channels_last, else 0."""
    if name not in CONVOLUTIONS or not args or args[0].dim() != 4:
        return 0
    if name == "convolution_backward":  # (grad_output, input, weight, ...) -> (grad_input, grad_weight, grad_bias)
        grad_output, inputs = args[0], args[1]
        tensors = [grad_output, inputs] + ([out[0]] if out[0] is not None else [])
    else:
        inputs, tensors = args[0], [args[0], out]
    if inputs.is_contiguous(memory_format=torch.channels_last):
        return 0
    return sum(_tensor_bytes(tensor) for tensor in tensors)


class TrafficCounter(TorchDispatchMode):
    """Counts FLOPs and bytes per aten operator; `phase` is set by the caller (TrainStep's on_phase)."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "setup"
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if func.is_view or name in NO_TRAFFIC:
            return out
        inputs = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        outputs = [leaf for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor)]
        counter = flop_registry.get(func._overloadpacket)
        flops = int(counter(*args, **kwargs, out_val=out)) if counter is not None else 0
        kind = "convolution" if name in CONVOLUTIONS else ("matmul" if flops else "other")
        dtype = str(inputs[0].dtype if inputs else outputs[0].dtype).removeprefix("torch.") if inputs or outputs \
            else "none"
        traffic = sum(_tensor_bytes(tensor) for tensor in itertools.chain(inputs, outputs))
        key = OperatorCost(name, kind, dtype, flops, traffic, _nchw_bytes(name, args, out),
                           self.phase == OPTIMIZER_PHASE)
        self.counts[key] += 1
        return out

    def operators(self) -> tuple[OperatorCost, ...]:
        return tuple(OperatorCost(op.name, op.kind, op.dtype, op.flops, op.bytes, op.nchw_bytes, op.optimizer,
                                  count) for op, count in self.counts.items())


def trace_traffic(model: nn.Module | Callable[[], nn.Module], input_shape: tuple[int, ...], batch_size: int,
                  num_classes: int, precision: str = "fp32", optimizer: str = "adamw", device_type: str = "cuda",
                  *, input_dtype: torch.dtype | None = None, channels_last: bool = False) -> StepTraffic:
    """FLOPs and bytes of each operator of one steady-state training step on `batch_size` samples of
    `input_shape`, traced on fake tensors. precision: fp32 | tf32 (traced as fp32) | bf16 | fp16 | fp64.
    input_dtype and channels_last: the batch as memory.estimate_memory takes them. Raises ConfigError for a
    model that cannot run a training step on fake tensors."""
    if precision not in PLAN_PRECISIONS or optimizer not in OPTIMIZERS:
        raise ConfigError(f"cannot trace precision {precision!r} with optimizer {optimizer!r}; choose one of "
                          f"{', '.join(PLAN_PRECISIONS)} and one of {', '.join(OPTIMIZERS)}")
    if batch_size < 1:
        raise ConfigError(f"the batch size must be positive, got {batch_size}")
    device = torch.device("cuda" if device_type == "cuda" and torch.cuda.is_available() else "cpu")
    chosen = Precision("fp32" if precision == "tf32" else precision, "planned")
    shape = (batch_size, *input_shape)
    layout = torch.channels_last if channels_last and len(shape) == 4 else torch.contiguous_format
    fake = meta_model(model)
    counter = TrafficCounter()
    try:
        with FakeTensorMode():
            fake_weights(fake.train(), device, chosen.parameter_dtype, layout == torch.channels_last)
            steps = make_optimizer(optimizer, fake.parameters(), foreach=device_type == "cuda")
            inputs = torch.empty(shape, dtype=input_dtype or chosen.parameter_dtype, device=device,
                                 memory_format=layout)
            labels = torch.zeros(batch_size, dtype=torch.long, device=device)
            for parameter in fake.parameters():
                parameter.grad = torch.empty_like(parameter) if parameter.requires_grad else None
            steps.step()  # the optimizer's state, as a first step leaves it
            step = TrainStep(fake, steps, chosen, device.type, num_classes=num_classes,
                             on_phase=lambda phase: setattr(counter, "phase", phase))
            with counter:
                step.zero_grad()
                step.forward_backward(inputs, labels)
                step.optimizer_step()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"could not trace the memory traffic of a training step on a batch of shape {shape}: "
                          f"{one_line(error)}") from error
    laid_out = ", channels_last" if layout == torch.channels_last else ""
    method = (f"fake-tensor trace of one training step, bytes of every operator's inputs and outputs (torch "
              f"{torch.__version__}, {device.type} kernels{laid_out})")
    return StepTraffic(precision=precision, batch_size=batch_size, operators=counter.operators(), method=method)
