"""torchrun's environment, read in one place.

`torch.distributed.run` starts each rank with WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT in its environment. Without WORLD_SIZE, or with
WORLD_SIZE 1, the process is alone: rank 0 of 1 on its node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from gpufeed.errors import ConfigError

FIX = "launch with torchrun, or gpufeed doctor --nproc-per-node N"


@dataclass(frozen=True)
class Launch:
    """Where this process stands in a torchrun job (one process: the defaults)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1  # ranks on this node
    master_addr: str | None = None
    master_port: int | None = None
    run_id: str = "job-0"  # TORCHELASTIC_RUN_ID-TORCHELASTIC_RESTART_COUNT: one job's attempt

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _integer(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer; {FIX}") from None


def launch(environ: Mapping[str, str] | None = None) -> Launch:
    """torchrun's environment (`os.environ` by default). A variable that is not an integer, or, when WORLD_SIZE
    is above 1, no RANK, MASTER_ADDR or MASTER_PORT: a ConfigError naming it."""
    environ = os.environ if environ is None else environ
    world = _integer(environ, "WORLD_SIZE", 1)
    placed = dict(rank=_integer(environ, "RANK", 0), local_rank=_integer(environ, "LOCAL_RANK", 0),
                  local_world_size=_integer(environ, "LOCAL_WORLD_SIZE", 1))
    if world <= 1:  # alone; a rank or local rank set anyway is kept (another launcher's, or a test's)
        return Launch(**placed)
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not environ.get(name)]
    if missing:
        raise ConfigError(f"WORLD_SIZE is {world} but {missing[0]} is not set; {FIX}")
    run_id = f"{environ.get('TORCHELASTIC_RUN_ID', 'job')}-{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return Launch(world, **placed, master_addr=environ["MASTER_ADDR"],
                  master_port=_integer(environ, "MASTER_PORT", 0), run_id=run_id)
