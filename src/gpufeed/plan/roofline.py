"""Time of a training step on a catalog GPU: a roofline of its operators (Williams, Waterman and Patterson 2009).

Each operator of the traced step (traffic.py) takes the longer of its FLOPs at the GPU's dense peak for its
dtype and its bytes at the GPU's memory bandwidth, each scaled by an efficiency:

    t_op = max(flops / (peak x compute_efficiency), bytes / (bandwidth x memory_efficiency))

and the step is the sum over operators (K forward-backward passes and one optimizer step). The sum of
per-operator maxima, not max(total FLOPs / peak, total bytes / bandwidth): a GPU runs a training step's kernels
one after another, and in a convnet the convolutions are compute-bound while the norms, activations and adds
between them are memory-bound, so the two do not overlap; the totals' maximum would hide one behind the other
(ResNet-50 in FP32 at batch 112 on a V100, default efficiencies: 193 ms a step, 582 img/s, against 322 ms and
348 img/s summed per operator; NVIDIA publishes 367 img/s). Refitted, the totals' maximum matches the ResNet-50
figures as well but misses the held-out ResNeXt-101 ones by up to 27% (benchmarks/RESULTS.md).

Peaks: a float16 or bfloat16 operator runs at the card's fp16 or bf16 tensor rate; float32 at the TF32 rate
under `tf32`, and also for convolutions under `fp32` on NVIDIA cards that have TF32 (torch's default,
`torch.backends.cudnn.allow_tf32 = True`; matrix products stay FP32); float64 at the fp64 rate. A convolution on
tensor cores (fp16, bf16, TF32) with NCHW activations also pays for the transposes around it: a read and a write
of those activations at the memory rate.

The efficiencies are constants fitted once (DEFAULT_EFFICIENCY, see its source) or scaled by a step measured on
this machine's GPU (compute.calibrate_efficiency), with a band for everything the model leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufeed.hardware.catalog import GpuSpec, peak_tflops
from gpufeed.hardware.na import NA, is_na
from gpufeed.plan.traffic import OperatorCost, StepTraffic

TENSOR_CORE_RATES = ("fp16", "bf16", "tf32")


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the dense peak (`compute`) and of the memory bandwidth (`memory`) an operator reaches, and
    the band: both multiplied by `low` (slow end) or `high` (fast end, capped at 1 or the value if above)."""

    compute: float
    memory: float
    low: float
    high: float
    source: str


# Fitted to NVIDIA's published single-GPU ResNet-50 v1.5 training throughput (plan/published.py: A100 80GB TF32
# and AMP, V100 16GB FP32 and AMP, PyTorch 21.03): the pair (compute, memory) on a 0.01 grid whose largest error
# on those four is smallest is (0.96, 0.55), largest error 6.7%; compute rounded down to 0.9 (largest error still
# 6.7%). On the held-out ResNeXt-101 32x4d figures of the same tables (not used to fit) the largest error is
# 10.9%. The band, x0.8 to x1.25 of both, is about twice that (benchmarks/plan_published.py, RESULTS.md).
DEFAULT_EFFICIENCY = Efficiency(
    compute=0.9, memory=0.55, low=0.8, high=1.25,
    source="default: compute 0.9 of the dense peak, memory 0.55 of the bandwidth, band x0.8-x1.25; fitted to "
           "NVIDIA DeepLearningExamples' single-GPU ResNet-50 v1.5 training throughput (A100 80GB, V100 16GB; "
           "largest error 6.7%; 11% on the held-out ResNeXt-101 figures)")


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on one GPU, with the band; how the central time splits between operators
    limited by FLOP/s, by bytes, and the transposes of NCHW convolutions; the rate each dtype ran at."""

    seconds: float
    seconds_fast: float
    seconds_slow: float
    compute_bound_s: float
    memory_bound_s: float
    layout_s: float
    rates: dict[str, str]  # dtype -> "fp16 tensor rate 312 TFLOP/s" etc.


def rate_for(spec: GpuSpec, op: OperatorCost, precision: str) -> tuple[str, float | NA]:
    """(catalog rate name, dense TFLOP/s or NA) an operator of `op.dtype` runs at on `spec` under `precision`."""
    if op.dtype == "float16":
        name = "fp16"
    elif op.dtype == "bfloat16":
        name = "bf16"
    elif op.dtype == "float64":
        name = "fp64"
    else:
        default_tf32 = precision == "fp32" and op.kind == "convolution" and spec.vendor == "NVIDIA"
        wants_tf32 = precision == "tf32" or default_tf32
        name = "tf32" if wants_tf32 and spec.dense_tflops["tf32"] is not None else "fp32"
    return name, peak_tflops(spec, name)


def _operator_seconds(op: OperatorCost, spec: GpuSpec, precision: str, compute: float,
                      memory: float) -> tuple[float, float, float] | NA:
    """(compute-bound s, memory-bound s, transpose s) of `op.count` operators; one of the first two is 0."""
    bandwidth = spec.memory_bandwidth_bytes_per_s * memory
    memory_s = op.bytes / bandwidth
    compute_s, layout_s = 0.0, 0.0
    if op.flops:
        name, peak = rate_for(spec, op, precision)
        if is_na(peak):
            return NA(f"{spec.name}: no dense {name} figure for its {op.dtype} {op.kind} operators")
        compute_s = op.flops / (peak * 1e12 * compute)
        if name in TENSOR_CORE_RATES and op.nchw_bytes:
            layout_s = 2 * op.nchw_bytes / bandwidth
    if compute_s >= memory_s:
        return compute_s * op.count, 0.0, layout_s * op.count
    return 0.0, memory_s * op.count, layout_s * op.count


def _total(traffic: StepTraffic, spec: GpuSpec, compute: float, memory: float,
           grad_accumulation: int) -> tuple[float, float, float] | NA:
    sums = [0.0, 0.0, 0.0]
    for op in traffic.operators:
        parts = _operator_seconds(op, spec, traffic.precision, compute, memory)
        if is_na(parts):
            return parts
        repeats = 1 if op.optimizer else grad_accumulation
        for index, part in enumerate(parts):
            sums[index] += part * repeats
    return sums[0], sums[1], sums[2]


def step_time(traffic: StepTraffic, spec: GpuSpec, efficiency: Efficiency = DEFAULT_EFFICIENCY,
              grad_accumulation: int = 1) -> StepTime | NA:
    """One optimizer step (`grad_accumulation` forward-backward passes of `traffic.batch_size`, one optimizer
    step) on `spec`; NA when an operator's rate is not in the catalog (e.g. fp64 on a GeForce card)."""
    central = _total(traffic, spec, efficiency.compute, efficiency.memory, grad_accumulation)
    if is_na(central):
        return central
    ends = []
    for scale in (efficiency.high, efficiency.low):
        compute = min(efficiency.compute * scale, max(1.0, efficiency.compute))
        memory = min(efficiency.memory * scale, max(1.0, efficiency.memory))
        ends.append(sum(_total(traffic, spec, compute, memory, grad_accumulation)))
    rates = {}
    for op in traffic.operators:
        if op.flops and op.dtype not in rates:
            name, peak = rate_for(spec, op, traffic.precision)
            rates[op.dtype] = f"{op.dtype} at the {name} rate, {peak:g} TFLOP/s"
    return StepTime(seconds=sum(central), seconds_fast=ends[0], seconds_slow=ends[1], compute_bound_s=central[0],
                    memory_bound_s=central[1], layout_s=central[2], rates=rates)


def model_flops_utilisation(flops_per_step: float, seconds: float, spec: GpuSpec, precision: str) -> float | None:
    """Model FLOPs per second over the card's dense peak for `precision` (PaLM's MFU), None when unknown."""
    peak = peak_tflops(spec, "tf32" if precision == "tf32" else precision)
    return None if is_na(peak) or seconds <= 0 else flops_per_step / seconds / (peak * 1e12)
