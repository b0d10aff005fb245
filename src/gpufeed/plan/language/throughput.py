"""A language model's training time on a catalog GPU: tokens per second per GPU, the step's compute and
communication, and hours for a number of tokens.

Compute: the FLOPs of the traced step (memory.py's `step_flops`: matrix products by torch's FlopCounterMode, sdpa
by torch's formulas, recomputation under checkpointing in, frozen weights' gradient products out), K micro-batches a
step, at the card's dense peak for the precision (bf16 and fp16 on tensor cores, fp32 at the fp32 rate) times
LANGUAGE_EFFICIENCY. At these sizes a step is its matrix products; the norms, activations and optimizer between
them are inside the efficiency, fitted to a published throughput (below), not modeled per operator as the image
plan's roofline does.

Communication: sharding.communication_bytes over the link its ring runs on, at COLLECTIVE_EFFICIENCY of the link's
stated rate: inside a machine the catalog's gpu_link (NVLink with NVSwitch at its rate; a 2-card bridge only for
2 GPUs, else PCIe; AMD's Infinity Fabric mesh at 1/7 of its rate per peer a ring uses, so 8 GPUs reach all of it;
PCIe at the card's generation and width), between machines node_network_gb_per_s (a group spanning machines
runs at the network's rate). Overlap: FSDP, ZeRO-3 and HSDP prefetch the next all-gather while computing, so their
communication hides behind the whole step's compute; DDP, ZeRO-1 and ZeRO-2 reduce gradients as the backward
goes, behind its two thirds of the compute. What is left over is added: step = compute + max(0, communication -
window).

LANGUAGE_EFFICIENCY is fitted to one published run (torchtitan's Llama 3.1 8B on 8 H100s, FSDP, eager); the band
x0.8-x1.25 is about what it leaves out. benchmarks/RESULTS.md says which figures were used to fit and which only to
check.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufeed.hardware.catalog import GpuSpec, peak_tflops
from gpufeed.hardware.na import NA, is_na
from gpufeed.hardware.pcie import pcie_theoretical_gb_per_s
from gpufeed.plan.language.sharding import SHARDS_WEIGHTS, Sharding, ShardUnits, communication_bytes
from gpufeed.plan.memory import MemoryEstimate

# torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (commit 820504e, torchtitan 9dec370, 2024-12-26), Table 1:
# Llama 3.1 8B, 8 H100 (96 GB HBM2e, 500 W, NVLink), FSDP 8, local batch 2 x 8,192 tokens, selective activation
# checkpointing (per op: matrix products kept, so none recomputed), bf16 with fp32 reduce, eager: 5,762 tokens/s per
# GPU. This trace of that step (the catalog's llama-3.1-8b, no checkpointing, batch 2 x 8,192): 6.006e10 FLOPs a
# token (6N with the output layer, attention's 3.5 x 4 s h L by torch's formulas); so 5,762 x 6.006e10 / 989.4e12
# (H100 SXM's dense bf16, which torchtitan's own MFU uses; theirs ran at 500 W) = 0.350.
LANGUAGE_EFFICIENCY = 0.35
LANGUAGE_EFFICIENCY_SOURCE = (
    "0.35 of the dense peak, fitted to torchtitan's published Llama 3.1 8B on 8 H100s (FSDP, batch 2 x 8,192, "
    "eager, selective checkpointing, which recomputes no matrix product: 5,762 tokens/s a GPU; "
    "benchmarks/llama3_h100_202412_torchtitan.md); band x0.8-x1.25")
BAND = (0.8, 1.25)
# nccl-tests all_gather/reduce_scatter bus bandwidth on 8 H100 SXM with NVSwitch: ~360-370 GB/s of 450 (an NCCL
# maintainer, nccl-tests issues #326 and #212); A100 235 of 300, B200 682 of 900 (stas00/ml-engineering).
COLLECTIVE_EFFICIENCY = 0.8
XGMI_PEERS = 7  # an MI300X's Infinity Fabric links, one to each other GPU of an 8-GPU board
OVERLAP_WINDOW = {"ddp": 2 / 3, "zero1": 2 / 3, "zero2": 2 / 3}  # of the compute; 1 for the weight-sharding ones


@dataclass(frozen=True)
class LanguageTime:
    """One optimizer step on one GPU of the run: `flops` (its K micro-batches), `tokens` (per GPU), the compute at
    the fitted efficiency, the communication at its link's rate (`link` in words) and what of it is not hidden, the
    step with its band, tokens per second per GPU and for all GPUs, and MFU (FLOPs over the step at the dense peak:
    the fitted efficiency, less what communication costs)."""

    flops: int
    tokens: int
    compute_s: float
    communication_s: float
    exposed_s: float
    step_s: float
    step_fast_s: float
    step_slow_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s: float
    mfu: float
    link: str
    peak_tflops: float
    efficiency_source: str = LANGUAGE_EFFICIENCY_SOURCE


def _precision_rate(precision: str) -> str:
    return "bf16" if precision == "bf16-true" else precision


def link_rate(spec: GpuSpec, sharding: Sharding) -> tuple[float, float | None, str]:
    """(GB/s inside a machine, GB/s between machines or None when not known, the link in words): the stated rates
    per GPU per direction, before COLLECTIVE_EFFICIENCY."""
    group = min(sharding.per_node, sharding.gpus)
    pcie = pcie_theoretical_gb_per_s(spec.pcie_generation, spec.pcie_lanes) \
        if spec.pcie_generation and spec.pcie_lanes else None
    if spec.gpu_link == "nvlink" or (spec.gpu_link == "nvlink-bridge" and group <= 2):
        inside, words = spec.gpu_link_gb_per_s, f"{spec.gpu_link.replace('-', ' ')} {spec.gpu_link_gb_per_s:g} GB/s"
    elif spec.gpu_link == "xgmi":
        inside = spec.gpu_link_gb_per_s * min(group - 1, XGMI_PEERS) / XGMI_PEERS
        words = f"Infinity Fabric, {min(group - 1, XGMI_PEERS)} of {XGMI_PEERS} links: {inside:g} GB/s"
    elif pcie is not None:
        inside = pcie
        bridge = " (a bridge joins only 2 cards)" if spec.gpu_link == "nvlink-bridge" else ""
        words = f"PCIe {spec.pcie_generation}.0 x{spec.pcie_lanes} {pcie:.1f} GB/s{bridge}"
    else:
        inside, words = 0.0, "no link known"
    if sharding.nodes > 1:
        network = spec.node_network_gb_per_s
        words += f", network {network:g} GB/s a GPU" if network else ", network unknown"
        return inside, network, words
    return inside, None, words


def language_time(memory: MemoryEstimate, units: ShardUnits | None, sharding: Sharding, spec: GpuSpec,
                  precision: str, efficiency: float = LANGUAGE_EFFICIENCY) -> LanguageTime | NA:
    """The step of `memory` (traced on a CUDA target, so `step_flops` holds attention) on `sharding.gpus` of `spec`
    in `precision`; NA when the card has no rate for it or a link the run needs is not known."""
    peak = peak_tflops(spec, _precision_rate(precision))
    if is_na(peak):
        return NA(f"no dense {precision} figure in the catalog")
    if memory.step_flops <= 0:
        return NA("the traced step counted no FLOPs")
    micro = memory.grad_accumulation
    flops = memory.step_flops * micro
    tokens = memory.batch_size * (memory.sequence_length or 1) * micro
    compute = flops / (peak * 1e12 * efficiency)
    communication, link = 0.0, "one GPU: none"
    if sharding.gpus > 1 or sharding.strategy is not None:
        strategy = sharding.strategy or "ddp"
        plain = Sharding(strategy, sharding.gpus, sharding.gpus_per_node) if sharding.gpus > 1 else None
        if plain is not None:
            inside, network, link = link_rate(spec, plain)
            sent, between = communication_bytes(memory, units or ShardUnits((), 0, 0, 0, 0, 0), plain)
            if plain.nodes > 1 and network is None:
                return NA(f"no network rate between machines in the catalog for this card, and the run spans "
                          f"{plain.nodes} machines")
            if inside <= 0:
                return NA("no link between its GPUs in the catalog")
            if plain.nodes > 1 and strategy != "hsdp":
                communication = sent / (min(inside, network) * 1e9 * COLLECTIVE_EFFICIENCY)
            else:
                inside_bytes = sent - between
                communication = inside_bytes / (inside * 1e9 * COLLECTIVE_EFFICIENCY)
                if between:
                    communication += between / (network * 1e9 * COLLECTIVE_EFFICIENCY)
    window = compute * (1.0 if (sharding.strategy or "ddp") in SHARDS_WEIGHTS else OVERLAP_WINDOW.get(
        sharding.strategy or "ddp", 2 / 3))
    exposed = max(0.0, communication - window)

    def step(scale: float) -> float:
        return compute / scale + max(0.0, communication - window / scale)

    seconds = compute + exposed
    return LanguageTime(flops=flops, tokens=tokens, compute_s=compute, communication_s=communication,
                        exposed_s=exposed, step_s=seconds, step_fast_s=step(BAND[1]), step_slow_s=step(BAND[0]),
                        tokens_per_s_per_gpu=tokens / seconds, tokens_per_s=tokens * sharding.gpus / seconds,
                        mfu=flops / seconds / (peak * 1e12), link=link, peak_tflops=peak)
