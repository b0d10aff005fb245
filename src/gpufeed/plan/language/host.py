"""The machine around a language model's GPUs: host RAM, disk, CPU cores and power supply of one node, sized for the
GPUs the job uses on it (not the board's count).

Host RAM is the largest of the seed's rule (system.host_ram: at least the node's GPU memory, ideally twice) and what
the job holds there: loading the checkpoint, the offloaded state (sharding.py's host bytes x the node's ranks, pinned)
and LOADER_WORKERS_PER_GPU loader processes of WORKER_BYTES each. Loading, three ways, each in the checkpoint's
dtype (CHECKPOINT_BYTES a weight: the bf16 a hub checkpoint ships):
- every rank materialises the full state dict (from_pretrained on each rank): K x the weights;
- rank 0 loads it and the others receive it (accelerate's cpu_ram_efficient_loading, FSDP's sync_module_states):
  1 x the weights;
- meta-device init and each rank reads its own shard (torch.distributed.checkpoint, torchtitan): the node's share.
The plan assumes the last for zero3, fsdp and hsdp, the first otherwise (each GPU holds the whole model anyway), and
gives the others.

Disk: the base checkpoint, CHECKPOINTS_KEPT checkpoints plus one being written (the trained weights and their
optimizer state, as training holds them: a full fine-tune's 4 + 8 bytes a parameter under bf16's fp32 weights, or
DeepSpeed's 2 + 12; LoRA's only the adapters and theirs), and the job's tokens stored once at
`token_bytes` each (uint16 while the vocabulary fits in it, else uint32, as nanoGPT stores them). Cores: a training
process and LOADER_WORKERS_PER_GPU workers per GPU (pre-tokenized data costs a worker little; tokenizing on the fly
is not counted). Power: system.psu_watts for a workstation of PCIe cards, hosts.server_power for a server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufeed.hardware.catalog import GpuSpec
from gpufeed.plan.hosts import server_power, system_to_buy
from gpufeed.plan.language.sharding import SHARDS_WEIGHTS, ShardedMemory
from gpufeed.plan.memory import MemoryEstimate
from gpufeed.plan.system import host_ram, psu_watts, round_ram
from gpufeed.units import size_text

CHECKPOINT_BYTES = 2  # a weight in a hub checkpoint (bf16)
WORKER_BYTES = 512 * 2**20  # one loader process: the interpreter, torch and a memory-mapped token file (a default)
LOADER_WORKERS_PER_GPU = 1
CHECKPOINTS_KEPT = 3


@dataclass(frozen=True)
class LanguageHost:
    """One node of `gpus` of `gpu` (of `nodes`): RAM (ideal and minimum, with the arithmetic), the checkpoint's
    loading by each way (`loading`: way -> bytes on the node; `loading_assumed` the way planned), the offloaded
    bytes, disk, cores and power supply, each with its arithmetic."""

    gpu: str
    gpus: int
    nodes: int
    system: str
    ram_bytes: int
    ram_minimum_bytes: int
    ram_reason: str
    loading: dict[str, int]
    loading_assumed: str
    offloaded_bytes: int
    disk_bytes: int
    disk_reason: str
    cpu_cores: int
    cpu_reason: str
    psu_watts: int
    psu_arithmetic: str


def _gib(value: float) -> str:
    return size_text(value, 1, 1) if value else "0"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def token_bytes(vocabulary: int) -> int:
    """Bytes a stored token takes: uint16 while the vocabulary fits in it, else uint32."""
    return 2 if vocabulary <= 2**16 else 4


def plan_language_host(spec: GpuSpec, memory: MemoryEstimate, sharded: ShardedMemory | None, gpus: int,
                       gpus_per_node: int, tokens: int, vocabulary: int, method: str) -> LanguageHost:
    """The node of `gpus_per_node` of `spec` for a job on `gpus` in all (the module's docstring has the rules)."""
    per_node = min(gpus_per_node, gpus)
    nodes = math.ceil(gpus / per_node)
    weights = memory.parameters * CHECKPOINT_BYTES
    strategy = sharded.strategy if sharded is not None else None
    replicas = 1 if strategy == "hsdp" else nodes  # HSDP keeps a whole copy on every node
    loading = {"each rank loads the full checkpoint": per_node * weights,
               "rank 0 loads it and sends it to the others": weights,
               "meta-device init, each rank reads its shard": math.ceil(weights / replicas)}
    assumed = "meta-device init, each rank reads its shard" if strategy in SHARDS_WEIGHTS else \
        "each rank loads the full checkpoint"
    offloaded = (sharded.host_bytes if sharded is not None else 0) * per_node
    workers = per_node * LOADER_WORKERS_PER_GPU * WORKER_BYTES
    held = loading[assumed] + offloaded + workers
    ideal, minimum, rule = host_ram(spec.memory_bytes * per_node)
    needed = round_ram(held)
    ram_reason = (f"{rule}; the job holds {_gib(held)}: loading ({assumed}) {_gib(loading[assumed])} + offloaded "
                  f"state {_gib(offloaded)} + {_plural(per_node * LOADER_WORKERS_PER_GPU, 'loader worker')} x "
                  f"{_gib(WORKER_BYTES)} -> {_gib(needed)}")
    checkpoint = memory.trainable_weights_bytes + memory.optimizer_bytes
    trained = "weights" if method == "full" else f"the {memory.trainable_parameters:,} adapter weights"
    saved = f"{trained} {_gib(memory.trainable_weights_bytes)} + optimizer state {_gib(memory.optimizer_bytes)}"
    stored = tokens * token_bytes(vocabulary)
    disk = weights + (CHECKPOINTS_KEPT + 1) * checkpoint + stored
    disk_reason = (f"base checkpoint {_gib(weights)} + ({CHECKPOINTS_KEPT} kept + 1 being written) x checkpoint "
                   f"({saved} = {_gib(checkpoint)}) + {tokens:,} tokens x {token_bytes(vocabulary)} B "
                   f"{_gib(stored)} = {_gib(disk)}, on the node that saves (or shared storage)")
    cores = per_node * (1 + LOADER_WORKERS_PER_GPU)
    cpu_reason = (f"{_plural(per_node, 'GPU')} x (1 training process + "
                  f"{_plural(LOADER_WORKERS_PER_GPU, 'loader worker')}) = {cores}")
    system = system_to_buy(spec, per_node)
    if system.kind == "server":
        watts, arithmetic = server_power(spec.tdp_w, per_node, spec)
    else:
        watts, arithmetic = psu_watts([spec.tdp_w] * per_node)
    if system.gpus_per_system > per_node:
        arithmetic += (f" (sized for the {_plural(per_node, 'GPU')} the job uses; the board holds "
                       f"{system.gpus_per_system})")
    return LanguageHost(gpu=spec.name, gpus=per_node, nodes=nodes, system=system.text,
                        ram_bytes=max(ideal, needed), ram_minimum_bytes=max(minimum, needed), ram_reason=ram_reason,
                        loading=loading, loading_assumed=assumed, offloaded_bytes=offloaded, disk_bytes=disk,
                        disk_reason=disk_reason, cpu_cores=cores, cpu_reason=cpu_reason, psu_watts=watts,
                        psu_arithmetic=arithmetic)
