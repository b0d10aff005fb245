"""`make_language_plan`: the device memory of training or fine-tuning a language model on one GPU, traced from its
own modeling code, and what fits on each of the catalog's GPUs, as one `LanguagePlan`.

The model is built on the meta device (model.py) with the method applied; its training step, the one
`TrainStep` with the model's own loss, is traced on fake tensors (memory.py). For each card, the largest
micro-batch at the sequence length and the longest sequence at the batch are found by bisection on traced peaks
(`memory.language_fits`). Time, tokens per second and cost on each card are not planned here yet.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import load_catalog
from gpufeed.measure.transformer_flops import attention_shape, multiplied_parameters, training_flops_per_token
from gpufeed.plan.language.model import FineTune, LanguageModel, build_language_model, resolve_language_model
from gpufeed.plan.language.nf4 import parameter_elements
from gpufeed.plan.memory import PRECISIONS, MemoryEstimate, estimate_language_memory, language_fits
from gpufeed.plan.optimizers import PLAN_OPTIMIZERS
from gpufeed.units import bytes_text

DEFAULT_SEQUENCE = 2048  # the default --seq-len, or the model's positions when fewer
FROZEN_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class LanguagePlanRequest:
    model: str  # a catalog name, a config.json or folder, file.py:factory, or a cached model id
    sequence_length: int | None = None  # None: DEFAULT_SEQUENCE, or the model's positions when fewer
    batch_size: int = 1  # sequences per micro-batch
    tune: FineTune = field(default_factory=FineTune)
    optimizer: str = "adamw"
    precision: str = "bf16"
    frozen_dtype: str = "bf16"  # a LoRA or QLoRA base's weights that are not quantised
    grad_accumulation: int = 1

    def __post_init__(self):
        if self.optimizer not in PLAN_OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(PLAN_OPTIMIZERS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r} for a language model; choose one of "
                              f"{', '.join(PRECISIONS)}")
        if self.frozen_dtype not in FROZEN_DTYPES:
            raise ConfigError(f"unknown --frozen-dtype {self.frozen_dtype!r}; choose one of {', '.join(FROZEN_DTYPES)}")
        for name in ("batch_size", "grad_accumulation"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.sequence_length is not None and self.sequence_length <= 0:
            raise ConfigError(f"--seq-len must be a positive number of tokens, got {self.sequence_length}")


@dataclass(frozen=True)
class GpuFit:
    """One catalog GPU: whether the planned step fits its memory, the largest micro-batch at the sequence length
    and the longest sequence at the batch that do (0: not even one), in the precision planned on it."""

    name: str
    memory_bytes: int
    fits: bool
    max_batch_size: int
    max_sequence_length: int
    precision: str
    notes: str


@dataclass(frozen=True)
class LanguagePlan:
    request: LanguagePlanRequest
    source: str  # where the model's configuration came from
    model_type: str
    parameters: int
    trainable_parameters: int
    sequence_length: int
    max_positions: int | None
    memory: MemoryEstimate
    flops_per_token: int | None  # 6N + 12·L·h·s (measure/transformer_flops.py); None when L or h is not known
    gpus: list[GpuFit]
    notes: list[str]
    unmeasured: list[str]


def _sequence_length(request: LanguagePlanRequest, model: LanguageModel) -> int:
    positions = model.max_positions
    if request.sequence_length is None:
        return min(DEFAULT_SEQUENCE, positions) if positions else DEFAULT_SEQUENCE
    if positions is not None and request.sequence_length > positions:
        raise ConfigError(f"--seq-len {request.sequence_length} is longer than {model.name}'s {positions:,} "
                          f"positions; give at most {positions}")
    return request.sequence_length


def plan_flops_per_token(model: nn.Module, language_model: LanguageModel, sequence_length: int) -> int | None:
    """6N + 12·L·h·s of the built model (measure/transformer_flops.py), its 4-bit weights counted as the weights
    they pack; None when the config lacks L or h."""
    shape = attention_shape(language_model.config)
    if shape is None:
        return None
    elements = parameter_elements(model)
    return training_flops_per_token(multiplied_parameters(model, elements=elements), *shape, sequence_length,
                                    multiplied_parameters(model, trained=True, elements=elements))


def _planned_precision(spec, precision: str) -> tuple[str | None, str]:
    """The precision this card runs (None: it cannot) and a note."""
    if precision in ("bf16", "bf16-true") and not spec.bf16:
        if precision == "bf16-true":
            return None, f"no bf16 on {spec.architecture}: bf16-true cannot run (plan --precision fp16 or fp32)"
        return "fp16", f"no bf16 on {spec.architecture}: planned in fp16 with a gradient scaler (the same bytes)"
    return precision, ""


def make_language_plan(request: LanguagePlanRequest) -> LanguagePlan:
    language_model = resolve_language_model(request.model)
    sequence_length = _sequence_length(request, language_model)
    frozen = FROZEN_DTYPES[request.frozen_dtype] if request.tune.method != "full" else None
    built: dict[str, tuple[str, ...]] = {}

    def factory() -> nn.Module:
        model, notes = build_language_model(language_model, request.tune)
        built["notes"] = notes
        return model

    memory_precision = request.precision
    options = dict(optimizer=request.optimizer, precision=memory_precision, device_type="cuda", frozen_dtype=frozen,
                   grad_accumulation=request.grad_accumulation)
    memory = estimate_language_memory(factory, sequence_length, request.batch_size, **options)
    with torch.device("meta"):
        model = factory()
    catalog = load_catalog()
    fitting = language_fits(factory, sorted({spec.memory_bytes for spec in catalog}), sequence_length,
                            request.batch_size, max_positions=language_model.max_positions, **options)
    gpus = []
    for spec in catalog:
        planned, note = _planned_precision(spec, memory_precision)
        if planned is None:
            gpus.append(GpuFit(spec.name, spec.memory_bytes, False, 0, 0, memory_precision, note))
            continue
        fits = memory.peak_bytes <= spec.memory_bytes
        batch, length = fitting[spec.memory_bytes]
        notes = [note] if note else []
        if language_model.max_positions is not None and length == language_model.max_positions:
            notes.append(f"max tokens: the model's {length:,} positions, not the memory")
        if not fits:
            notes.append(f"needs {bytes_text(memory.peak_bytes, grouped=False)} at batch {request.batch_size} x "
                         f"{sequence_length} tokens, has {bytes_text(spec.memory_bytes, digits=0, grouped=False)}")
        gpus.append(GpuFit(spec.name, spec.memory_bytes, fits, batch, length, planned, "; ".join(notes)))
    gpus.sort(key=lambda gpu: (not gpu.fits, gpu.memory_bytes, gpu.name))
    unmeasured = ["time, tokens per second and cost per GPU: not planned for language models yet (issue 33)"]
    if language_model.layers is None:
        unmeasured.append("FLOPs per token: the model's layers and width are not known (a factory)")
    return LanguagePlan(request=request, source=language_model.source, model_type=language_model.model_type,
                        parameters=memory.parameters, trainable_parameters=memory.trainable_parameters,
                        sequence_length=sequence_length, max_positions=language_model.max_positions, memory=memory,
                        flops_per_token=plan_flops_per_token(model, language_model, sequence_length), gpus=gpus,
                        notes=list(built.get("notes", ())), unmeasured=unmeasured)


def language_plan_json(plan: LanguagePlan) -> dict:
    """The documented JSON of a language-model plan (docs/design.md, `plan` for language models)."""
    request = dataclasses.asdict(plan.request)
    request["tune"] = dataclasses.asdict(plan.request.tune)
    return {"kind": "language_model", "request": request, "source": plan.source, "model_type": plan.model_type,
            "params": plan.parameters, "trainable_params": plan.trainable_parameters,
            "sequence_length": plan.sequence_length, "max_positions": plan.max_positions,
            "memory": dataclasses.asdict(plan.memory), "flops_per_token": plan.flops_per_token,
            "gpus": [dataclasses.asdict(gpu) for gpu in plan.gpus], "notes": plan.notes,
            "unmeasured": plan.unmeasured}
