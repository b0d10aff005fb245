"""The `--try` experiments a finding kind declares (`Kind.experiments`, kind.py), as data: which change, with which
settings. No torch here (findings/ loads none, and may not import trials/): trials/plan.py builds each declaration
into the change it installs (trials/changes.py, trials/async_item.py) by the declaration's type, never by the
name of the kind that declared it.

- `Replay`: the loader's first batches served again from memory; the bound if input were free (an experiment of
  role "bound", reported as `gain.bound`, never as a fix's gain);
- `LoaderChange`: every DataLoader built with `workers` workers (and persistent_workers), pinned memory, or a
  batch `batch_factor` times larger (compared in samples/s only: it changes the optimisation);
- `Autocast`: the outermost forward under bf16 autocast on `device_type`;
- `DdpChange`: every DistributedDataParallel with gradient_as_bucket_view, and/or DDP's fp16 compression hook;
- `AsyncItem`: each CUDA `.item()` served one step stale, without the wait;
- `CutPadding`: every training batch of token ids cut to its longest row (trials/cut_padding.py).
Each has the experiment's `name` (the report's and the --try plan line's); `path` is how the change reaches the
framework's loader, in its words (frameworks/words.py), added to the description.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_EXPERIMENT = "not tried: no experiment for this kind of finding"


@dataclass(frozen=True)
class Replay:
    name: str = "replay"


@dataclass(frozen=True)
class LoaderChange:
    name: str
    workers: int | None = None
    pin_memory: bool = False
    batch_factor: int = 1
    path: str | None = None


@dataclass(frozen=True)
class Autocast:
    name: str
    device_type: str
    path: str = ""


@dataclass(frozen=True)
class DdpChange:
    name: str
    gradient_as_bucket_view: bool = False
    fp16_compress: bool = False


@dataclass(frozen=True)
class AsyncItem:
    name: str = "async_item"


@dataclass(frozen=True)
class CutPadding:
    name: str = "cut_padding"


ExperimentSpec = Replay | LoaderChange | Autocast | DdpChange | AsyncItem | CutPadding
# a kind's experiments for one finding, and why none or no more are tried (None: nothing left out)
Declared = tuple[list[ExperimentSpec], str | None]
