"""`make_plan`: for a model and a dataset, the device memory, compute, host and the GPUs ranked, as one `Plan`."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.hardware.catalog import find_gpu, load_catalog, match_gpu
from gpufeed.hardware.na import is_na
from gpufeed.plan.compute import ComputeEstimate, calibrate_efficiency, efficiency_of, estimate_compute
from gpufeed.plan.fake_model import user_function
from gpufeed.plan.hosts import system_to_buy
from gpufeed.plan.input_cost import measure_input_cost
from gpufeed.plan.memory import MemoryEstimate, estimate_memory, max_batch_size
from gpufeed.plan.rank import GpuOption, PrecisionPlan, best_to_buy, planned_precision, rank_gpus, recommend
from gpufeed.plan.roofline import Efficiency, step_time
from gpufeed.plan.system import Feeding, HostPlan, plan_host
from gpufeed.plan.traffic import PLAN_PRECISIONS, trace_traffic
from gpufeed.train.models import MODELS, build_model
from gpufeed.train.step import OPTIMIZERS


@dataclass(frozen=True)
class PlanRequest:
    model: str  # a name from train.models, or path/to/file.py:factory
    input_shape: tuple[int, ...]  # one sample, e.g. (3, 224, 224)
    num_classes: int = 10
    batch_size: int = 256  # per GPU
    optimizer: str = "adamw"
    precision: str = "bf16"
    dataset_size: int = 50_000
    epochs: int = 10
    gpus: int = 1
    target_hours: float | None = None
    bytes_per_sample: int | None = None  # stored (uint8) bytes; default: the input's element count
    cache_dataset: bool = True
    host_gpu: str | None = None  # plan the host around this catalog GPU (default: the best value to buy)
    grad_accumulation: int = 1  # micro-batches of batch_size per optimizer step
    source_bytes: int | None = None  # the files the dataset is packed from (default: as large as the dataset)
    data: str | None = None  # a packed dataset: its bytes per sample, and the decode rate measured on a sample of it
    encoding: str | None = None  # without `data`: "jpeg" or "raw", at `max_side` (plan/input_cost.py)
    max_side: int | None = None
    decode: str = "cpu"  # where the planned machine decodes JPEG samples: "cpu" or "gpu" (nvImageCodec)
    channels_last: bool | None = None  # plan the model channels_last; None: ours yes, a user's file no

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        if self.precision not in PLAN_PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}; choose one of {', '.join(PLAN_PRECISIONS)}")
        if self.source_bytes is not None and self.source_bytes < 0:
            raise ConfigError(f"--source-gib must not be negative, got {self.source_bytes / 2**30:g}")
        for name in ("batch_size", "dataset_size", "epochs", "gpus", "num_classes", "grad_accumulation"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    params: int
    memory: MemoryEstimate
    flops_per_step: int
    compute: ComputeEstimate
    host: HostPlan
    host_gpu: str
    gpus: list[GpuOption]
    recommendation: str
    unmeasured: list[str]


def parse_input_shape(text: str) -> tuple[int, ...]:
    """'3x224x224' -> (3, 224, 224); '784' -> (784,)."""
    try:
        shape = tuple(int(part) for part in text.lower().replace("×", "x").split("x"))
    except ValueError:
        raise ConfigError(f"cannot read --input {text!r}; write it as CxHxW, e.g. 3x224x224") from None
    if not 1 <= len(shape) <= 3 or min(shape) <= 0:
        raise ConfigError(f"--input {text!r} must be 1 to 3 positive sizes, e.g. 3x224x224")
    return shape


def model_factory(spec: str, input_shape: tuple[int, ...], num_classes: int) -> Callable[[], nn.Module]:
    """A name from `gpufeed train`'s models, or `path/to/file.py:factory` (a function of no arguments, or of
    `num_classes`, that returns an nn.Module)."""
    if spec in MODELS:
        if len(input_shape) != 3:
            raise ConfigError(f"model {spec} takes images: give --input as CxHxW, got {input_shape}")
        return lambda: build_model(spec, input_shape, num_classes)
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise ConfigError(f"unknown model {spec!r}; choose one of {', '.join(MODELS)} or give path/to/file.py:factory")
    factory = user_function(path, name, "a torch.nn.Module")
    takes_classes = len(inspect.signature(factory).parameters) >= 1

    def build() -> nn.Module:
        try:
            model = factory(num_classes) if takes_classes else factory()
        except Exception as error:  # noqa: BLE001
            raise ConfigError(f"{spec} raised {type(error).__name__}: {error}") from None
        if not isinstance(model, nn.Module):
            raise ConfigError(f"{spec} returned {type(model).__name__}, not a torch.nn.Module")
        return model

    return build


def _calibration(factory, request: PlanRequest, plan_for, unmeasured: list[str]) -> Efficiency | None:
    """Efficiencies scaled to a step measured on this machine's GPU when there is one in the catalog, else None
    (the default)."""
    if not torch.cuda.is_available():
        unmeasured.append("efficiencies: no GPU here to measure a step on; the fitted default is used")
        return None
    spec = find_gpu(torch.cuda.get_device_name())
    if is_na(spec):
        unmeasured.append(f"efficiencies: {spec.reason}; the fitted default is used")
        return None
    precision, _ = planned_precision(spec, request.precision)
    return calibrate_efficiency(factory(), request.input_shape, request.batch_size, request.num_classes,
                                torch.device("cuda"), precision, spec, plan_for(precision).traffic,
                                optimizer=request.optimizer,
                                channels_last=bool(trace_options(request, precision).get("channels_last")))


def _plans(factory, request: PlanRequest):
    """plan_for(precision): memory, traffic and the largest batch per capacity in that precision, each traced
    once (tf32 has fp32's memory)."""
    made: dict[str, PrecisionPlan] = {}

    def plan_for(precision: str) -> PrecisionPlan:
        if precision not in made:
            trace = trace_options(request, precision)
            memory_precision = "fp32" if precision == "tf32" else precision
            memory = estimate_memory(factory, request.input_shape, request.batch_size, request.num_classes,
                                     optimizer=request.optimizer, precision=memory_precision, device_type="cuda",
                                     grad_accumulation=request.grad_accumulation, **trace)
            traffic = trace_traffic(factory, request.input_shape, request.batch_size, request.num_classes,
                                    precision, request.optimizer, **trace)

            def max_batch_for(capacity_bytes: int) -> int:
                return max_batch_size(factory, request.input_shape, request.num_classes, capacity_bytes,
                                      request.optimizer, memory_precision,
                                      grad_accumulation=request.grad_accumulation, **trace)

            made[precision] = PrecisionPlan(memory, traffic, max_batch_for)
        return made[precision]

    return plan_for


def make_plan(request: PlanRequest, calibrate: bool = True) -> Plan:
    unmeasured: list[str] = []
    factory = model_factory(request.model, request.input_shape, request.num_classes)
    model = factory()
    params = sum(parameter.numel() for parameter in model.parameters())
    plan_for = _plans(factory, request)
    asked = plan_for(request.precision)
    efficiency = _calibration(factory, request, plan_for, unmeasured) if calibrate else None
    compute = estimate_compute(model, request.input_shape, request.batch_size, request.num_classes,
                               request.dataset_size, request.epochs, asked.traffic, efficiency,
                               request.grad_accumulation)
    catalog = load_catalog()
    options = rank_gpus(catalog, plan_for, compute, request.precision, request.gpus, request.grad_accumulation)
    host_spec = _host_spec(request, options, catalog)
    planned, _ = planned_precision(host_spec, request.precision)
    step = step_time(plan_for(planned).traffic, host_spec, efficiency_of(compute), request.grad_accumulation)
    rate = 0.0 if is_na(step) else request.batch_size * request.grad_accumulation / step.seconds_fast
    feeding = _feeding(request, step)
    dataset_bytes = request.dataset_size * feeding.bytes_per_sample
    source = dataset_bytes if request.source_bytes is None else request.source_bytes
    system = system_to_buy(host_spec, request.gpus)
    host = plan_host(host_spec, system, dataset_bytes, request.cache_dataset, params, request.optimizer, rate,
                     feeding, source_bytes=source, gpus_used=math.ceil(request.gpus / system.systems))
    if request.source_bytes is None:
        unmeasured.append("source files: not given (--source-gib); the disk counts them as large as the dataset")
    return Plan(request=request, params=params, memory=asked.memory, flops_per_step=compute.flops_per_step,
                compute=compute, host=host, host_gpu=host_spec.name, gpus=options,
                recommendation=recommend(options, request.target_hours), unmeasured=unmeasured)


def _feeding(request: PlanRequest, step) -> Feeding:
    """The input's bytes and per-core staging rate (measured on the pack, or on generated JPEGs for a stated
    encoding), what crosses the link (decoded uint8 crops, or the JPEG bytes when the GPU decodes), and the
    table's rate a GPU (the band's middle; the host is sized for its fast end, so the cores never starve it)."""
    table = None if is_na(step) else request.batch_size * request.grad_accumulation / step.seconds
    decoded = int(torch.Size(request.input_shape).numel())
    cost = None
    if len(request.input_shape) == 3 and (request.data or request.encoding):
        cost = measure_input_cost(request.data, request.encoding, request.max_side, request.input_shape[1:],
                                  request.decode)
    if cost is None:
        reason = "as given" if request.bytes_per_sample else "the input's element count in uint8 (a fixed-size pack)"
        return Feeding(request.bytes_per_sample or decoded, reason, table_samples_per_s=table)
    other = None if cost.other_per_core_rate is None else (cost.other_per_core_rate, cost.other_per_core_reason)
    crossing = cost.bytes_per_sample if cost.decode == "gpu" else decoded
    return Feeding(cost.bytes_per_sample, cost.bytes_reason, cost.decode, (cost.per_core_rate, cost.per_core_reason),
                   other, crossing, table)


def trace_options(request: PlanRequest, precision: str | None = None) -> dict:
    """Our own models are planned as `gpufeed train` runs them: channels_last images, bf16 batches under bf16
    (the feed delivers them so); a user's model as a plain loop would feed it, NCHW unless `channels_last`."""
    ours = request.model in MODELS
    channels_last = ours if request.channels_last is None else request.channels_last
    if not ours:
        return {"channels_last": True} if channels_last else {}
    precision = precision or request.precision
    return {"channels_last": channels_last, "input_dtype": torch.bfloat16 if precision == "bf16" else None}


def layout_of(request: PlanRequest) -> str:
    """The memory layout a plan assumed for the model's images, in words."""
    return "channels_last" if trace_options(request).get("channels_last") else "NCHW (contiguous)"


def _host_spec(request: PlanRequest, options: list[GpuOption], catalog):
    """--gpu matched loosely (catalog.match_gpu), else the best value to buy, else the top-ranked that fits."""
    if request.host_gpu:
        spec = match_gpu(request.host_gpu, catalog)
        if is_na(spec):
            raise ConfigError(f"--gpu {request.host_gpu!r}: {spec.reason}")
        return spec
    by_name = {spec.name: spec for spec in catalog}
    value = best_to_buy(options, request.target_hours) or best_to_buy(options)
    if value is not None:
        return by_name[value.name]
    fitting = [option for option in options if option.fits]
    return by_name[(fitting or options)[0].name]


def plan_json(plan: Plan) -> dict:
    """The documented JSON: params, memory, flops_per_step, host, gpus (ranked, each with its cost)."""
    document = {"params": plan.params, "memory": dataclasses.asdict(plan.memory),
                "flops_per_step": plan.flops_per_step, "compute": dataclasses.asdict(plan.compute),
                "host": dataclasses.asdict(plan.host), "host_gpu": plan.host_gpu,
                "gpus": [], "recommendation": plan.recommendation, "request": dataclasses.asdict(plan.request),
                "unmeasured": plan.unmeasured}
    for option in plan.gpus:
        row = dataclasses.asdict(option)
        row["cost"] = {"buy_usd": option.cost_buy_usd, "rent_usd": option.cost_rent_usd,
                       "price_date": option.price_date}
        document["gpus"].append(row)
    return document
