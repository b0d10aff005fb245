"""Data parallelism through torchrun and PyTorch DDP: we read torchrun's environment, DDP does the work.

    torchrun --nproc_per_node 4 -m gpufeed train ...                       # one machine, 4 GPUs
    torchrun --nnodes 2 --node_rank 0 --nproc_per_node 8 \\
             --rdzv_backend c10d --rdzv_endpoint HOST0:29500 -m gpufeed train ...   # on each of 2 machines

Each rank reads its own shard through `Feed(rank, world_size)`; only rank 0 prints and writes files.
"""

from __future__ import annotations

import datetime
import time
import weakref
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gpufeed.hardware.devices import resolve_device
from gpufeed.torchrun import launch

# gpufeed's choice: gloo's worker releases a finished collective within microseconds; 10 s covers a machine so
# loaded that the thread waits long for a core, and bounds the wait if something else keeps the tensor.
RELEASE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class DistributedContext:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str | None  # None when running as one process

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.backend is not None


def setup(device_name: str = "auto", timeout_s: float = 600.0) -> DistributedContext:
    """One process, or one rank of a torchrun job (WORLD_SIZE > 1): NCCL on CUDA GPUs, gloo on CPUs."""
    job = launch()
    if not job.distributed:
        return DistributedContext(0, 0, 1, resolve_device(device_name), None)
    rank, local_rank, world_size = job.rank, job.local_rank, job.world_size
    device = resolve_device(device_name)
    if device.type == "cuda":
        device = resolve_device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return DistributedContext(rank, local_rank, world_size, device, backend)


def teardown(context: DistributedContext) -> None:
    if context.active and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(context: DistributedContext, values: list[float]) -> list[float]:
    """Sum a few numbers across ranks (float64); identity for one process. On gloo, returns only once gloo's
    worker thread has let go of the tensor (`_released`)."""
    if not context.active:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=context.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    total = tensor.tolist()
    if context.backend == "gloo":
        watched = weakref.ref(tensor)
        del tensor
        _released(watched)
    return total


def _released(watched: weakref.ref, timeout_s: float = RELEASE_TIMEOUT_S) -> None:
    """Wait until nothing holds the tensor `watched` refers to. Gloo completes a collective on a worker thread,
    which drops its hold on the tensor (a reference to its Python object, so it takes the GIL) a moment after
    `all_reduce` has returned. When that moment falls after the interpreter began to exit (the last all_reduce
    of a run, then the process ends), the thread cannot take the GIL, CPython ends it with pthread_exit, and its
    unwinding through torch's destructor aborts the process ("terminate called without an active exception",
    SIGABRT): 4 runs in 30 of two gloo ranks on a loaded 2-core machine. Waiting here, with the GIL released
    between polls, lets the thread finish while the interpreter is whole."""
    deadline = time.monotonic() + timeout_s
    while watched() is not None and time.monotonic() < deadline:
        time.sleep(0.001)


class StopVote:
    """Whether any rank was asked to stop, agreed by all: `decide(asked)` after each step starts that step's
    vote (a 1-element sum, asynchronous) and returns the previous step's result, so every rank gets the same
    answer after the same step while the sum overlaps the next step's work. One process: `asked` itself."""

    def __init__(self, context: DistributedContext) -> None:
        self.context = context
        self._pending: tuple[object, torch.Tensor] | None = None

    def decide(self, asked: bool) -> bool:
        if not self.context.active:
            return asked
        decided = self._collect()
        flag = torch.tensor([1.0 if asked else 0.0], device=self.context.device)
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.SUM, async_op=True), flag)
        return decided

    def _collect(self) -> bool:
        if self._pending is None:
            return False
        work, flag = self._pending
        self._pending = None
        work.wait()
        decided = bool(flag.item() > 0)
        if self.context.backend == "gloo":
            watched = weakref.ref(flag)
            del flag, work
            _released(watched)
        return decided

    def close(self) -> None:
        """Wait for the vote in flight (every rank started it, so it completes) before the next collective."""
        self._collect()


def barrier(context: DistributedContext) -> None:
    if context.active:
        dist.barrier()


def wrap(model: torch.nn.Module, context: DistributedContext) -> torch.nn.Module:
    """DistributedDataParallel over the model when there are several ranks; the model itself otherwise."""
    if not context.active:
        return model
    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
