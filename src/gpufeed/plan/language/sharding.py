"""A language model's training state sharded over GPUs: the bytes each GPU holds, what it offloads to host RAM, and
what it sends over the links each optimizer step.

The one-GPU step is traced first (memory.py); its parts are then divided as each strategy divides them (the ZeRO
paper's accounting, Rajbhandari et al. 2020, section 5), N being the GPUs the state is sharded over:
- ddp: nothing sharded; torch's DistributedDataParallel also holds its gradient buckets, one more copy of the
  gradients (its default gradient_as_bucket_view=False);
- zero1: the optimizer state / N; zero2: the gradients too; zero3: the weights too (DeepSpeed's stages);
- fsdp: torch's FSDP2 (`fully_shard`), weights, gradients and optimizer state / N; hsdp: the same within one node
  (N = --gpus-per-node), replicated across nodes.
Each value models one layout, said in `ShardedMemory.layout`:
- zero1-3 under bf16 or fp16 take DeepSpeed's: 16-bit weights and gradients, and fp32 master weights in the optimizer
  state (2 + 2 + 12 bytes a trained parameter with AdamW);
- ddp, fsdp and hsdp take the precision's own as gpufeed traces it: bf16 is fp32 weights under autocast (4 + 4 + 8),
  which FSDP2 runs as MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); fp32 is 4 + 4 + 8; bf16-true
  2 + 2 + 4 (DeepSpeed's fp32 and bf16-true are the same).
Frozen weights (a LoRA or QLoRA base) have no gradient or state and are sharded with the weights under zero3/fsdp.

What sharding adds at the peak, per GPU (`shard_units` cuts the model as FSDP wraps a transformers model: a unit per
block of the classes in its `_no_split_modules`, the rest the root):
- gathered (zero3, fsdp, hsdp): the root's weights, unsharded through the forward and backward (FSDP2 does not
  reshard the root after the forward), and two blocks: the one computing and the one prefetched, in the compute dtype;
- buffers: DDP's buckets; under zero1/zero2 one block's gradients being reduced (DeepSpeed's reduce_bucket_size,
  5e8 elements by default, may hold more: set it near a block's size); under zero3/fsdp/hsdp one block's unsharded
  gradients, their copy in the reduce dtype and its shard, from the end of the first block's backward on.
The peak is the largest of three moments: the one-GPU trace's forward-and-backward peak (the backward's start for a
language model: all activations, few gradients) with the sharded states and what sharding adds; the backward's end
(every gradient, no activations); and the optimizer step. Offload moves bytes to host RAM: `optimizer` the
optimizer state (the step runs on the CPU, DeepSpeed's ZeRO-Offload or FSDP2's), `parameters` also the sharded
weights and gradients (FSDP2's CPUOffloadPolicy, DeepSpeed's offload_param; zero3, fsdp and hsdp only).

Not modeled: NCCL's own buffers and the memory of communication still in flight when a collective finishes late
(on 2 CPU ranks with gloo, the same step's peak varied by 20% between runs from it), activation offload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.plan.memory import MemoryEstimate

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")
OFFLOADS = ("none", "optimizer", "parameters")
SHARDS_WEIGHTS = ("zero3", "fsdp", "hsdp")
DEEPSPEED = ("zero1", "zero2", "zero3")
DEFAULT_GPUS_PER_NODE = 8  # an HGX/OAM server's GPUs
HALF = {"bf16": 2, "fp16": 2, "bf16-true": 2, "fp32": 4, "fp64": 8}  # bytes of the compute dtype by precision
FP32 = 4


@dataclass(frozen=True)
class Sharding:
    """How the training is spread: `strategy` (None: one GPU, or plain data parallel copies of it), `gpus` in all,
    `gpus_per_node` (None: min(gpus, 8)), `offload` none | optimizer | parameters."""

    strategy: str | None = None
    gpus: int = 1
    gpus_per_node: int | None = None
    offload: str = "none"

    def __post_init__(self):
        if self.gpus < 1:
            raise ConfigError(f"--gpus must be at least 1, got {self.gpus}")
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown --shard {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.offload not in OFFLOADS:
            raise ConfigError(f"unknown --offload {self.offload!r}; choose one of {', '.join(OFFLOADS)}")
        if self.gpus_per_node is not None and not 1 <= self.gpus_per_node <= self.gpus:
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node} must be between 1 and --gpus {self.gpus}")
        if self.gpus % self.per_node:
            raise ConfigError(f"--gpus {self.gpus} is not a whole number of nodes of {self.per_node}; give a "
                              f"multiple of --gpus-per-node")
        if self.offload != "none" and self.strategy in (None, "ddp"):
            raise ConfigError(f"--offload {self.offload} goes with --shard zero1, zero2, zero3, fsdp or hsdp")
        if self.offload == "parameters" and self.strategy not in SHARDS_WEIGHTS:
            raise ConfigError(f"--offload parameters needs the weights sharded: --shard zero3, fsdp or hsdp, not "
                              f"{self.strategy}")
        if self.strategy == "hsdp" and self.nodes == 1:
            raise ConfigError(f"--shard hsdp replicates across nodes, and {self.gpus} GPUs at {self.per_node} a node "
                              f"are one node: use --shard fsdp, or give --gpus-per-node below --gpus")
        if self.strategy is not None and self.gpus == 1 and self.offload == "none":
            raise ConfigError(f"--shard {self.strategy} with 1 GPU shards nothing: give --gpus 2 or more (or "
                              f"--offload to move state to the host)")

    @property
    def per_node(self) -> int:
        return self.gpus_per_node or min(self.gpus, DEFAULT_GPUS_PER_NODE)

    @property
    def nodes(self) -> int:
        return self.gpus // self.per_node

    @property
    def degree(self) -> int:
        """The GPUs the sharded state is divided over (1: not sharded)."""
        if self.strategy in (None, "ddp"):
            return 1
        return self.per_node if self.strategy == "hsdp" else self.gpus


@dataclass(frozen=True)
class ShardUnits:
    """The model cut as FSDP wraps it: `count` blocks of the classes `names`, the largest block's trained and
    frozen elements, and the root's (everything outside the blocks)."""

    names: tuple[str, ...]
    count: int
    largest_trained: int
    largest_frozen: int
    root_trained: int
    root_frozen: int


def shard_units(model: nn.Module, elements: dict | None = None) -> ShardUnits:
    """`model`'s FSDP units by its `_no_split_modules` (a peft model reads its base's); without them the whole model
    is one root. `elements`: id(parameter) -> elements it stands for (nf4.parameter_elements), else numel."""
    base = model
    while not getattr(base, "_no_split_modules", None) and hasattr(base, "base_model") and base.base_model is not base:
        base = base.base_model
    while not getattr(base, "_no_split_modules", None) and isinstance(getattr(base, "model", None), nn.Module):
        base = base.model
    names = tuple(sorted(getattr(base, "_no_split_modules", None) or ()))

    def count(parameters) -> tuple[int, int]:
        trained = frozen = 0
        for parameter in parameters:
            size = elements.get(id(parameter), parameter.numel()) if elements else parameter.numel()
            if parameter.requires_grad:
                trained += size
            else:
                frozen += size
        return trained, frozen

    blocks, inside = [], set()
    for module in model.modules():
        if type(module).__name__ in names and not any(id(p) in inside for p in module.parameters()):
            blocks.append(count(module.parameters()))
            inside.update(id(p) for p in module.parameters())
    root = count(p for p in model.parameters() if id(p) not in inside)
    largest = max(blocks, default=(0, 0), key=sum)
    return ShardUnits(names, len(blocks), largest[0], largest[1], root[0], root[1])


@dataclass(frozen=True)
class ShardedMemory:
    """One GPU's bytes in a sharded training, and the host's and the links' share.

    weights, gradients, optimizer: this GPU's share at rest (0 when offloaded); gathered: unsharded weights at the
    peak; buffers: DDP's buckets or the gradients being reduced; activations: as the one-GPU trace found them,
    less autocast's weight copies where the layout has none; overhead: the one-GPU estimate's (CUDA context,
    allocator rounding); step_temporaries: the optimizer step's own temporaries (the one-GPU trace's, scaled to the
    optimizer state this GPU holds). peak_bytes: the largest moment, `peak_moment`, the sum of `peak_parts` (each
    part's bytes live then, by the names above; a part absent was not live). host_bytes: offloaded, per GPU.
    communication_bytes: sent by each GPU per optimizer step (ring collectives), of which network_bytes go between
    nodes. layout: the bytes per trained parameter modeled, in words.
    """

    strategy: str
    gpus: int
    degree: int
    gpus_per_node: int
    nodes: int
    offload: str
    layout: str
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    gathered_bytes: int
    buffers_bytes: int
    activations_bytes: int
    step_temporaries_bytes: int
    overhead_bytes: int
    peak_bytes: int
    peak_moment: str
    peak_parts: dict[str, int]
    host_bytes: int
    communication_bytes: int
    network_bytes: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Layout:
    weight: float  # bytes a trained parameter's weight, gradient and optimizer state
    gradient: float
    optimizer: float
    compute: int  # the gathered weights' and the unsharded gradients' dtype
    reduce: int  # the dtype gradients are reduced in
    copies: bool  # autocast's weight copies stay in the activations
    text: str


def _layout(memory: MemoryEstimate, strategy: str) -> _Layout:
    trained = max(memory.trainable_parameters, 1)
    weight, gradient = memory.trainable_weights_bytes / trained, memory.gradients_bytes / trained
    optimizer = memory.optimizer_bytes / trained
    compute = HALF.get(memory.precision, 4)
    mixed = memory.precision in ("bf16", "fp16")
    if strategy in DEEPSPEED and mixed:
        return _Layout(2, 2, optimizer + FP32, 2, 2, False,
                       f"DeepSpeed's {memory.precision}: {memory.precision} weights and gradients, fp32 master weights "
                       f"with the {memory.optimizer} state: 2 + 2 + {optimizer + FP32:g} bytes a trained parameter")
    reduce = FP32 if mixed else compute
    if strategy == "ddp" or not mixed:
        how = "DistributedDataParallel under autocast" if strategy == "ddp" and mixed else "as traced"
    else:
        how = f"FSDP2's MixedPrecisionPolicy(param_dtype={memory.precision}, reduce_dtype=fp32), no autocast copies"
    return _Layout(weight, gradient, optimizer, compute, reduce, strategy == "ddp",
                   f"{memory.precision} {how}: {weight:g} + {gradient:g} + {optimizer:g} bytes a trained parameter")


def shard_memory(memory: MemoryEstimate, units: ShardUnits, sharding: Sharding) -> ShardedMemory:
    """Per-GPU bytes of `memory` (the one-GPU trace) under `sharding` (the module's docstring has the accounting)."""
    if sharding.strategy is None:
        raise ConfigError("shard_memory needs a --shard strategy")
    strategy, n = sharding.strategy, sharding.degree
    layout = _layout(memory, strategy)
    trained = memory.trainable_parameters
    frozen = memory.frozen_weights_bytes
    frozen_per_element = frozen / max(units.root_frozen + units.largest_frozen * units.count, 1)
    weights = trained * layout.weight + frozen
    gradients, optimizer = trained * layout.gradient, trained * layout.optimizer
    block_trained = units.largest_trained
    gathered = buffers = 0.0
    if strategy == "ddp":
        buffers = gradients
    elif strategy in ("zero1", "zero2"):
        buffers = block_trained * layout.gradient
    if strategy != "zero1" and strategy != "ddp":
        gradients /= n
    if strategy != "ddp":
        optimizer /= n
    if strategy in SHARDS_WEIGHTS:
        weights /= n
        block = block_trained * layout.compute + units.largest_frozen * frozen_per_element
        root = units.root_trained * layout.compute + units.root_frozen * frozen_per_element
        gathered = root + 2 * block
        buffers = block_trained * (layout.compute + layout.reduce + layout.reduce / n)
    host = 0.0
    if sharding.offload in ("optimizer", "parameters"):
        host, optimizer = optimizer, 0.0
    if sharding.offload == "parameters":
        host, weights, gradients = host + weights + gradients, 0.0, 0.0
    activations = memory.activations_bytes - (0 if layout.copies else memory.weight_copies_bytes)
    share = memory.computing_gradients_bytes / memory.gradients_bytes if memory.gradients_bytes else 0.0
    scale = optimizer / (trained * layout.optimizer) if trained and layout.optimizer else 0.0
    reducing = 0.0 if strategy in SHARDS_WEIGHTS else buffers  # FSDP's are made as each block's backward ends
    temporaries = memory.optimizer_step_bytes * scale
    held = {"weights": weights, "optimizer": optimizer}
    moments = {"the backward's start": {**held, "gradients": share * gradients, "activations": activations,
                                        "gathered": gathered, "buffers": reducing},
               "the backward's end": {**held, "gradients": gradients, "gathered": gathered, "buffers": buffers},
               "the optimizer step": {**held, "gradients": gradients, "step_temporaries": temporaries,
                                      "buffers": buffers if strategy == "ddp" else 0}}  # DDP's buckets outlive it
    parts = {moment: {name: math.ceil(size) for name, size in sizes.items()} for moment, sizes in moments.items()}
    moment = max(parts, key=lambda name: sum(parts[name].values()))
    peak_parts = {**parts[moment], "overhead": memory.overhead_bytes}
    sent, network = communication_bytes(memory, units, sharding, layout)
    notes = []
    if strategy in SHARDS_WEIGHTS:
        notes.append(f"units: {units.count} blocks ({', '.join(units.names) or 'none found: the model is one unit'})"
                     f" and the root, as FSDP wraps a transformers model")
    return ShardedMemory(strategy=strategy, gpus=sharding.gpus, degree=n, gpus_per_node=sharding.per_node,
                         nodes=sharding.nodes, offload=sharding.offload, layout=layout.text,
                         weights_bytes=math.ceil(weights), gradients_bytes=math.ceil(gradients),
                         optimizer_bytes=math.ceil(optimizer), gathered_bytes=math.ceil(gathered),
                         buffers_bytes=math.ceil(buffers), activations_bytes=math.ceil(activations),
                         step_temporaries_bytes=math.ceil(temporaries), overhead_bytes=memory.overhead_bytes,
                         peak_bytes=sum(peak_parts.values()), peak_moment=moment, peak_parts=peak_parts,
                         host_bytes=math.ceil(host), communication_bytes=math.ceil(sent),
                         network_bytes=math.ceil(network), notes=tuple(notes))


def communication_bytes(memory: MemoryEstimate, units: ShardUnits, sharding: Sharding,
                        layout: _Layout | None = None) -> tuple[float, float]:
    """(bytes each GPU sends per optimizer step, of them between nodes), ring collectives: an all-reduce sends
    2 (n-1)/n of the tensor, an all-gather or a reduce-scatter (n-1)/n.
    - ddp: one all-reduce of the gradients a step (accumulating micro-batches under no_sync);
    - zero1: a reduce-scatter of the gradients and an all-gather of the updated weights a step; zero2: the
      reduce-scatter every micro-batch (DeepSpeed reduces as the backward goes);
    - zero3, fsdp: every micro-batch an all-gather of the weights in the forward and again in the backward, and a
      reduce-scatter of the gradients;
    - hsdp: fsdp within a node, and an all-reduce of each GPU's gradient shard across the nodes a step.
    A group that spans nodes runs its ring over the network; under hsdp only the all-reduce across nodes does."""
    strategy = sharding.strategy
    layout = layout or _layout(memory, strategy)
    micro = memory.grad_accumulation
    trained = memory.trainable_parameters
    gradients = trained * layout.gradient
    gathered_weights = trained * layout.compute + memory.frozen_weights_bytes  # frozen ones in their own dtype
    if strategy == "ddp":
        group = sharding.gpus
        sent = 2 * (group - 1) / group * gradients
    elif strategy == "zero1":
        group = sharding.gpus
        sent = (group - 1) / group * (gradients + trained * layout.compute)
    elif strategy == "zero2":
        group = sharding.gpus
        sent = (group - 1) / group * (micro * gradients + trained * layout.compute)
    else:
        group = sharding.degree
        sent = micro * (group - 1) / group * (2 * gathered_weights + trained * layout.reduce)
    network = sent if sharding.nodes > 1 and strategy != "hsdp" else 0.0
    if strategy == "hsdp":
        replicas = sharding.nodes
        network = 2 * (replicas - 1) / replicas * trained * layout.reduce / sharding.per_node
        sent += network
    return sent, network
