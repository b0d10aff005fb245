"""`make_language_plan`: the device memory of training or fine-tuning a language model, traced from its own
modeling code, on one GPU or sharded over several; what fits on each of the catalog's GPUs, how fast, and what it
costs, as one `LanguagePlan`.

The model is built on the meta device (model.py) with the method applied; its training step, the one
`TrainStep` with the model's own loss, is traced on fake tensors (memory.py). For each card, the largest
micro-batch at the sequence length and the longest sequence at the batch are found by bisection on traced peaks
(`memory.language_fits`); sharded (sharding.py), at the card's memory plus what sharding saves at the planned
batch. Time per card: throughput.py; rent: the dated on-demand rate x the run's GPUs x hours; buy: the list price x
the GPUs of the system(s) they are sold in (hosts.py); energy: every card at its TDP the whole run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import load_catalog, match_gpu
from gpufeed.hardware.na import is_na
from gpufeed.measure.transformer_flops import attention_shape, multiplied_parameters, training_flops_per_token
from gpufeed.plan.hosts import buy_note, system_to_buy
from gpufeed.plan.language.host import LanguageHost, plan_language_host
from gpufeed.plan.language.model import (
    FineTune,
    LanguageModel,
    build_language_model,
    resolve_language_model,
    transformers_quiet,
)
from gpufeed.plan.language.nf4 import parameter_elements
from gpufeed.plan.language.sharding import ShardedMemory, Sharding, shard_memory, shard_units
from gpufeed.plan.language.throughput import LANGUAGE_EFFICIENCY_SOURCE, LanguageTime, language_time
from gpufeed.plan.memory import PRECISIONS, MemoryEstimate, estimate_language_memory, language_fits
from gpufeed.plan.optimizers import PLAN_OPTIMIZERS
from gpufeed.plan.rank import recommend
from gpufeed.units import bytes_text

DEFAULT_SEQUENCE = 2048  # the default --seq-len, or the model's positions when fewer
DEFAULT_TOKENS = 10**9  # the job's tokens when --tokens is not given
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
    sharding: Sharding = field(default_factory=Sharding)
    tokens: int | None = None  # the job's tokens, all GPUs together (None: DEFAULT_TOKENS)
    host_gpu: str | None = None  # plan the node around this catalog GPU (None: the cheapest to rent that fits)
    dataset_sequences: int | None = None  # with `epochs`, the job's tokens: sequences x epochs x sequence length
    epochs: int = 1

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
        if self.tokens is not None and self.tokens <= 0:
            raise ConfigError(f"--tokens must be a positive number of tokens to train on, got {self.tokens}")
        for name, value in (("--dataset-size", self.dataset_sequences), ("--epochs", self.epochs)):
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive, got {value}")


@dataclass(frozen=True)
class GpuFit:
    """One catalog GPU (times the run's GPUs): whether the planned step fits its memory (per GPU when sharded), the
    largest micro-batch at the sequence length and the longest sequence at the batch that do (0: not even one), in
    the precision planned on it; where it fits, the time (throughput.LanguageTime), hours for the job's tokens
    with the band, rent (the run's GPUs) and buy (as sold) and energy. None where unknown or the job does not fit."""

    name: str
    memory_bytes: int
    fits: bool
    max_batch_size: int
    max_sequence_length: int
    precision: str
    notes: str
    time: LanguageTime | None = None
    hours: float | None = None
    hours_low: float | None = None
    hours_high: float | None = None
    rent_usd_per_hour: float | None = None
    cost_rent_usd: float | None = None
    cost_buy_usd: float | None = None
    price_date: str | None = None
    buy_gpus: int = 0
    buy_system: str = ""
    energy_kwh: float | None = None


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
    sharded: ShardedMemory | None = None  # per GPU, when --shard is given
    tokens: int = DEFAULT_TOKENS
    recommendation: str = ""
    host: LanguageHost | None = None  # None: no GPU fits, and none was named


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


@transformers_quiet()
def make_language_plan(request: LanguagePlanRequest) -> LanguagePlan:
    language_model = resolve_language_model(request.model)
    sequence_length = _sequence_length(request, language_model)
    frozen = FROZEN_DTYPES[request.frozen_dtype] if request.tune.method != "full" else None
    built: dict[str, tuple[str, ...]] = {}

    def factory() -> nn.Module:
        model, notes = build_language_model(language_model, request.tune)
        built["notes"] = notes
        return model

    options = dict(optimizer=request.optimizer, precision=request.precision, device_type="cuda",
                   frozen_dtype=frozen, grad_accumulation=request.grad_accumulation)
    memory = estimate_language_memory(factory, sequence_length, request.batch_size, **options)
    with torch.device("meta"):
        model = factory()
    sharding = request.sharding
    units = shard_units(model, parameter_elements(model))
    sharded = shard_memory(memory, units, sharding) if sharding.strategy is not None else None
    needed = sharded.peak_bytes if sharded is not None else memory.peak_bytes
    saved = memory.peak_bytes - needed  # what sharding takes off one GPU at the planned batch
    catalog = load_catalog()
    capacities = sorted({max(spec.memory_bytes + saved, 1) for spec in catalog})
    fitting = language_fits(factory, capacities, sequence_length, request.batch_size,
                            max_positions=language_model.max_positions, **options)
    tokens = request.tokens or (request.dataset_sequences * request.epochs * sequence_length
                                if request.dataset_sequences else DEFAULT_TOKENS)
    gpus = [_gpu_fit(spec, memory, units, sharding, needed, fitting[max(spec.memory_bytes + saved, 1)],
                     language_model, sequence_length, tokens) for spec in catalog]
    gpus.sort(key=lambda gpu: (not gpu.fits, gpu.hours is None, gpu.hours or 0.0, -gpu.memory_bytes, gpu.name))
    unmeasured = []
    if language_model.layers is None:
        unmeasured.append("FLOPs per token: the model's layers and width are not known (a factory)")
    if request.tokens is None and request.dataset_sequences is None:
        unmeasured.append(f"the job's size: --tokens not given; hours and cost are for {DEFAULT_TOKENS:,} tokens")
    if sharding.offload != "none":
        unmeasured.append(f"the time of --offload {sharding.offload}: the copies between host and GPU each step and "
                          f"the optimizer step on the CPU are not in it (they can take longer than the GPU's step)")
    notes = list(built.get("notes", ()))
    if request.tokens is None and request.dataset_sequences:
        notes.append(f"the job: {request.dataset_sequences:,} sequences x {request.epochs} epochs x "
                     f"{sequence_length:,} tokens = {tokens:,} tokens")
    notes.append(f"time: {LANGUAGE_EFFICIENCY_SOURCE}")
    if sharded is not None and saved:
        notes.append("largest batch and sequence when sharded: the one-GPU fit at the card's memory plus what "
                     "sharding saves at the planned batch")
    host = _host(request, gpus, catalog, memory, sharded, tokens, language_model, notes)
    return LanguagePlan(request=request, source=language_model.source, model_type=language_model.model_type,
                        parameters=memory.parameters, trainable_parameters=memory.trainable_parameters,
                        sequence_length=sequence_length, max_positions=language_model.max_positions, memory=memory,
                        flops_per_token=plan_flops_per_token(model, language_model, sequence_length), gpus=gpus,
                        notes=notes, unmeasured=unmeasured, sharded=sharded, tokens=tokens,
                        recommendation=recommend(gpus), host=host)


def _host(request: LanguagePlanRequest, gpus: list[GpuFit], catalog, memory: MemoryEstimate,
          sharded: ShardedMemory | None, tokens: int, language_model: LanguageModel,
          notes: list[str]) -> LanguageHost | None:
    """The node around --gpu (matched loosely), else the card that fits with the lowest rent for the job, else the
    fastest that fits; None when none fits."""
    if request.host_gpu:
        spec = match_gpu(request.host_gpu, catalog)
        if is_na(spec):
            raise ConfigError(f"--gpu {request.host_gpu!r}: {spec.reason}")
    else:
        rented = [gpu for gpu in gpus if gpu.fits and gpu.cost_rent_usd is not None]
        fitting = [gpu for gpu in gpus if gpu.fits]
        chosen = min(rented, key=lambda gpu: gpu.cost_rent_usd) if rented else (fitting[0] if fitting else None)
        if chosen is None:
            return None
        spec = next(spec for spec in catalog if spec.name == chosen.name)
        notes.append(f"host: planned around {spec.name}, the cheapest to rent that fits (--gpu to choose)")
    vocabulary = getattr(language_model.config, "vocab_size", None) or 2**32
    sharding = request.sharding
    return plan_language_host(spec, memory, sharded, sharding.gpus, sharding.per_node, tokens, vocabulary,
                              request.tune.method)


def _gpu_fit(spec, memory: MemoryEstimate, units, sharding: Sharding, needed: int, fit: tuple[int, int],
             language_model: LanguageModel, sequence_length: int, tokens: int) -> GpuFit:
    """One card for the run: fit, time, hours for `tokens`, rent, buy, energy (None where unknown or not fitting)."""
    planned, note = _planned_precision(spec, memory.precision)
    if planned is None:
        return GpuFit(spec.name, spec.memory_bytes, False, 0, 0, memory.precision, note)
    fits = needed <= spec.memory_bytes
    batch, length = fit
    notes = [note] if note else []
    if language_model.max_positions is not None and length == language_model.max_positions:
        notes.append(f"max tokens: the model's {length:,} positions, not the memory")
    per_gpu = " a GPU" if sharding.strategy is not None else ""
    if not fits:
        notes.append(f"needs {bytes_text(needed, grouped=False)}{per_gpu} at batch {memory.batch_size} x "
                     f"{sequence_length} tokens, has {bytes_text(spec.memory_bytes, digits=0, grouped=False)}")
        return GpuFit(spec.name, spec.memory_bytes, False, batch, length, planned, "; ".join(notes))
    time = language_time(memory, units, sharding, spec, planned)
    system = system_to_buy(spec, sharding.gpus)
    buy = None if spec.price_usd is None else spec.price_usd * system.gpus
    if buy_note(spec, system, sharding.gpus):
        notes.append(buy_note(spec, system, sharding.gpus))
    if is_na(time):
        notes.append(f"time unknown: {time.reason}")
        return GpuFit(spec.name, spec.memory_bytes, True, batch, length, planned, "; ".join(notes),
                      cost_buy_usd=buy, price_date=spec.price_date, buy_gpus=system.gpus, buy_system=system.text)
    hours = tokens / time.tokens_per_s / 3600
    low, high = (hours * time.step_fast_s / time.step_s, hours * time.step_slow_s / time.step_s)
    per_hour = None if spec.rent_usd_per_hour is None else spec.rent_usd_per_hour * sharding.gpus
    return GpuFit(spec.name, spec.memory_bytes, True, batch, length, planned, "; ".join(notes), time=time,
                  hours=hours, hours_low=low, hours_high=high, rent_usd_per_hour=per_hour,
                  cost_rent_usd=None if per_hour is None else per_hour * hours, cost_buy_usd=buy,
                  price_date=spec.price_date, buy_gpus=system.gpus, buy_system=system.text,
                  energy_kwh=spec.tdp_w * sharding.gpus * hours / 1000)


def language_plan_json(plan: LanguagePlan) -> dict:
    """The documented JSON of a language-model plan (docs/design.md, `plan` for language models)."""
    request = dataclasses.asdict(plan.request)
    request["tune"] = dataclasses.asdict(plan.request.tune)
    request["sharding"] = dataclasses.asdict(plan.request.sharding)
    return {"kind": "language_model", "request": request, "source": plan.source, "model_type": plan.model_type,
            "params": plan.parameters, "trainable_params": plan.trainable_parameters,
            "sequence_length": plan.sequence_length, "max_positions": plan.max_positions,
            "memory": dataclasses.asdict(plan.memory), "flops_per_token": plan.flops_per_token,
            "gpus": [dataclasses.asdict(gpu) for gpu in plan.gpus], "notes": plan.notes,
            "unmeasured": plan.unmeasured,
            "sharded": None if plan.sharded is None else dataclasses.asdict(plan.sharded), "tokens": plan.tokens,
            "recommendation": plan.recommendation,
            "host": None if plan.host is None else dataclasses.asdict(plan.host)}
