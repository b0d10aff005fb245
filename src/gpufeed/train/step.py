"""The training step: one implementation for every caller, the precisions a training run takes and the optimizers
(what each precision computes in is hardware/precisions.py's table).

`gpufeed train`, its precision and batch-size probes (train/setup.py), bench's step timings (bench/steps.py),
plan's memory trace on fake tensors (plan/memory.py), its FLOP count (plan/compute.py), `plan --check`
(plan/check.py) and the MFU calibration all run `TrainStep`, so what the planner traces and what `--check`
measures is what trains.

The order is the one `gpufeed train` runs, per optimizer step:

    zero_grad(set_to_none=True)           # before the forward: last step's gradients are not held through it
    for each of K micro-batches:          # K = 1 unless gradients are accumulated
        forward under autocast -> the loss -> backward of loss / K (scaled under fp16)
                                          # the loss: cross entropy (label smoothing), or a language model's own
    optimizer.step()                      # through the gradient scaler under fp16

It is two methods, `forward_backward` and `optimizer_step`, because the scaler's step reads a value (its inf
check calls `.item()`), which fake tensors cannot give: the memory trace runs both with no scaler.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.hardware.precisions import PRECISION_SPECS, PrecisionSpec

# What a whole training run can be asked for (tf32 is a mode of fp32 matrix products, measured by bench).
TRAIN_PRECISIONS = ("fp32", "bf16", "fp16", "fp64")
OPTIMIZERS = ("adamw", "adam", "sgd")
DEFAULT_LEARNING_RATES = {"adamw": 1e-3, "adam": 1e-3, "sgd": 0.1}  # torch's Adam default; SGD as for ResNets
SGD_MOMENTUM = 0.9
LOSSES = ("cross_entropy", "model")  # TrainStep.loss: a classifier's, or a language model's own


@dataclass(frozen=True)
class Precision:
    """A precision chosen for a run: `name` (a key of PRECISION_SPECS, hardware/precisions.py) and `reason` (why, for
    the config and summary)."""

    name: str
    reason: str

    def __post_init__(self):
        if self.name not in PRECISION_SPECS:
            raise ConfigError(f"unknown precision {self.name!r}; choose one of {', '.join(PRECISION_SPECS)}")

    @property
    def spec(self) -> PrecisionSpec:
        return PRECISION_SPECS[self.name]

    @property
    def parameter_dtype(self) -> torch.dtype:
        return self.spec.parameter_dtype

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return self.spec.autocast_dtype

    @property
    def input_dtype(self) -> torch.dtype:
        return self.spec.input_dtype

    def autocast(self, device_type: str):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=self.autocast_dtype)

    def scaler(self, device_type: str) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(device_type) if self.spec.scaled else None


def _takes_labels(model: nn.Module) -> bool:
    """Whether `model`'s forward takes `labels` (a transformers model: it computes its own loss)."""
    inner = getattr(model, "module", model)  # DDP
    try:
        parameters = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return False
    return "labels" in parameters


def language_model_loss(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of a language model on token ids (B, N) with labels (B, N): the model's own when its forward takes
    `labels` (a transformers model: causal models shift them inside, sequence-to-sequence models decode them),
    else next-token cross entropy on the (B, N, vocabulary) logits it returns, in float32 as transformers does."""
    if _takes_labels(model):
        output = model(input_ids=tokens, labels=labels)
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is None and isinstance(output, (tuple, list)) and output:
            loss = output[0]
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise ConfigError(f"the model was given labels but returned no scalar loss ({type(output).__name__})")
        return loss
    logits = model(tokens)
    logits = getattr(logits, "logits", logits)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(tokens.shape):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ConfigError(f"the model returns {shape} for token ids of shape {tuple(tokens.shape)}, not logits "
                          f"(batch, tokens, vocabulary); or take labels= and return a loss")
    shifted = logits[:, :-1].float()
    return F.cross_entropy(shifted.reshape(-1, shifted.shape[-1]), labels[:, 1:].reshape(-1))


def make_optimizer(name: str, parameters, learning_rate: float | None = None, weight_decay: float | None = None,
                   foreach: bool | None = None) -> torch.optim.Optimizer:
    """AdamW, Adam or SGD with momentum 0.9, at torch's defaults unless given. `foreach` None lets torch pick
    (multi-tensor on CUDA); the memory trace passes what torch would pick on the planned device."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    options: dict = {"lr": DEFAULT_LEARNING_RATES[name] if learning_rate is None else learning_rate,
                     "foreach": foreach}
    if weight_decay is not None:
        options["weight_decay"] = weight_decay
    if name == "sgd":
        return torch.optim.SGD(parameters, momentum=SGD_MOMENTUM, **options)
    return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(parameters, **options)


def prepare_model(model: nn.Module, precision: Precision, device: torch.device | str,
                  channels_last: bool = True) -> nn.Module:
    """The model on `device` in the precision's parameter dtype, in channels_last (4-D weights) as train runs it."""
    memory_format = torch.channels_last if channels_last else torch.preserve_format
    return model.to(device=device, dtype=precision.parameter_dtype, memory_format=memory_format)


def random_batch(batch_size: int, sample_shape: Sequence[int], num_classes: int, device: torch.device | str,
                 dtype: torch.dtype, channels_last: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch as the feed delivers it: inputs (B, *sample_shape) of `dtype` from the global RNG (channels_last
    when 4-D), labels (B,) int64 in 0..num_classes-1."""
    inputs = torch.randn(batch_size, *sample_shape, device=device).to(dtype)
    if channels_last and inputs.dim() == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)  # (B, C, H, W), channels_last
    labels = torch.randint(0, num_classes, (batch_size,), device=device)
    return inputs, labels


@dataclass
class TrainStep:
    """One optimizer step of `model` (what the loop calls: compiled or DDP-wrapped is fine).

    optimizer: None only to count FLOPs (forward and backward, no step). scaler: the precision's (fp16), or
    None. num_classes: when given, logits of another shape are a ConfigError (a model that is not a classifier
    of that many classes). on_phase: told "forward", "backward", "optimizer step" as each begins (the memory
    trace labels its peak with it). loss: "cross_entropy" (a classifier: logits (B, classes) against labels (B,))
    or "model" (a language model's own loss: token ids (B, N) in and labels (B, N), see `language_model_loss`).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    precision: Precision
    device_type: str
    scaler: torch.amp.GradScaler | None = None
    label_smoothing: float = 0.0
    num_classes: int | None = None
    on_phase: Callable[[str], None] | None = None
    loss: str = "cross_entropy"

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ConfigError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSSES)}")

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.model.zero_grad(set_to_none=True)

    def forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor, loss_scale: float = 1.0) -> torch.Tensor:
        """Forward, the loss (`self.loss`) and backward of one (micro-)batch; gradients add to what `.grad` holds.
        Returns the unscaled loss, detached."""
        self._phase("forward")
        with self.precision.autocast(self.device_type):
            if self.loss == "model":
                loss = language_model_loss(self.model, inputs, labels)
            else:
                loss = self._cross_entropy(inputs, labels)
        self._phase("backward")
        scaled = loss if loss_scale == 1.0 else loss * loss_scale
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        return loss.detach()

    def _cross_entropy(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.model(inputs)  # (B, classes)
        if self.num_classes is not None and tuple(logits.shape) != (len(inputs), self.num_classes):
            raise ConfigError(f"the model returns {tuple(logits.shape)} for a batch of {len(inputs)}, not "
                              f"({len(inputs)}, {self.num_classes}) logits (batch, classes)")
        return F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)  # ()

    def optimizer_step(self) -> None:
        self._phase("optimizer step")
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One plain step (no accumulation); the loss, detached."""
        self.zero_grad()
        loss = self.forward_backward(inputs, labels)
        self.optimizer_step()
        return loss

    def accumulate(self, micro_batches: Iterable[tuple[torch.Tensor, torch.Tensor]], count: int) -> torch.Tensor:
        """One step over `count` micro-batches, their gradients summed (each loss divided by `count`, so the
        gradient is the mean over all their samples); the mean loss, detached."""
        self.zero_grad()
        total = None
        for inputs, labels in micro_batches:
            loss = self.forward_backward(inputs, labels, loss_scale=1.0 / count)
            total = loss if total is None else total + loss
        self.optimizer_step()
        return total / count
