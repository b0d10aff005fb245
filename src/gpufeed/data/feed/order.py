"""The order of an epoch: a pure function of (seed, epoch, rank, world size).

One global permutation per epoch is cut into steps of `world_size * batch_size` samples; within a step,
rank r takes the r-th contiguous slice of `batch_size`. So one process with batch `world_size * B` sees, step
for step, exactly the union of what `world_size` ranks with batch B see, and every rank has the same number
of batches.

With `drop_last`, the tail that does not fill a whole step is left out of this epoch (a different tail each
epoch when shuffling). Without it, the tail forms one more, shorter step split as evenly as possible across
ranks, so every sample is seen exactly once; only when the tail is smaller than `world_size` do the ranks
left empty get one sample from the start of the permutation, so a few samples are seen twice
(`EpochOrder.repeated`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufeed.errors import ConfigError


@dataclass(frozen=True)
class EpochOrder:
    """The batches of one rank for one epoch: `batches[i]` is an int64 array of sample indices."""

    batches: tuple[np.ndarray, ...]
    dropped: int  # samples of the dataset left out of this epoch (drop_last)
    repeated: int  # samples seen twice this epoch across ranks (padding so no rank is empty)

    def __len__(self) -> int:
        return len(self.batches)


def permutation(count: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The global order of one epoch; identical on every rank."""
    if not shuffle:
        return np.arange(count, dtype=np.int64)
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(epoch), 0x6770])))
    return generator.permutation(count).astype(np.int64)


def batches_per_epoch(count: int, batch_size: int, world_size: int = 1, drop_last: bool = True) -> int:
    step = batch_size * world_size
    return count // step if drop_last else -(-count // step)


def check_order_arguments(count: int, batch_size: int, rank: int, world_size: int, drop_last: bool) -> None:
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ConfigError(f"batch size must be a positive integer, got {batch_size!r}")
    if world_size <= 0 or not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is not in 0..world_size-1 (world_size={world_size})")
    needed = batch_size * world_size if drop_last else world_size
    if count < needed:
        raise ConfigError(f"the dataset has {count} samples, fewer than one step needs ({batch_size} x "
                          f"{world_size} ranks); lower --batch-size to at most {max(1, count // world_size)}")


def epoch_order(count: int, batch_size: int, seed: int, epoch: int, rank: int = 0, world_size: int = 1,
                shuffle: bool = True, drop_last: bool = True) -> EpochOrder:
    """The batches rank `rank` reads in epoch `epoch`."""
    check_order_arguments(count, batch_size, rank, world_size, drop_last)
    order = permutation(count, seed, epoch, shuffle)
    step = batch_size * world_size
    full_steps = count // step
    mine = order[: full_steps * step].reshape(full_steps, world_size, batch_size)[:, rank]
    batches = list(mine)
    tail = count - full_steps * step
    if drop_last or tail == 0:
        return EpochOrder(tuple(batches), dropped=tail if drop_last else 0, repeated=0)
    rest = order[full_steps * step:]
    sizes = [tail // world_size + (r < tail % world_size) for r in range(world_size)]
    start = sum(sizes[:rank])
    piece = rest[start:start + sizes[rank]]
    empty_ranks = sizes.count(0)
    if sizes[rank] == 0:
        piece = order[rank - tail: rank - tail + 1]  # one sample from the front, distinct per empty rank
    batches.append(piece)
    return EpochOrder(tuple(batches), dropped=0, repeated=empty_ranks)
