"""`--batch-size auto`: the largest batch that fits, found by backing off on out-of-memory errors."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpufeed.errors import RunFailed

# Above this, a larger batch mostly changes the optimisation, not the speed, for the models we train.
AUTO_BATCH_CEILING = 1024


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def find_batch_size(try_step: Callable[[int], None], start: int = AUTO_BATCH_CEILING, minimum: int = 1,
                    release: Callable[[], None] | None = None) -> tuple[int, list[int]]:
    """Try `try_step(batch)` from `start`, halving on out-of-memory. Returns (batch, the sizes that failed).

    Any other error propagates. `release` (e.g. torch.cuda.empty_cache) runs after each failure.
    """
    batch, failed = start, []
    while batch >= minimum:
        try:
            try_step(batch)
            return batch, failed
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
            if not is_out_of_memory(error):
                raise
            failed.append(batch)
            if release is not None:
                release()
            batch //= 2
    raise RunFailed(f"even a batch of {minimum} does not fit in device memory (tried {failed}); "
                    f"use a smaller model or a device with more memory")
