"""Verified fixes (`gpufeed doctor --try`): re-run the user's own loop with one change and measure what it gains.

Each experiment runs the script again in this process (`run_script`: the same argv, working directory and step
clock) with one change installed around the doctor's instrumentation. The changes and the checks that a change
took effect are here; which finding gets which change is its kind's declaration (findings/kind.py:
`Kind.experiments`), which plan.py builds into one of these:
- "replay" (input_bound): the DataLoader iterator's `__next__` serves its first REPLAY_BATCHES batches again, in a
  cycle, so the model runs as if input were free (the upper bound of any input fix, like a synthetic-data run:
  an experiment of role "bound", reported as `gain.bound`, never as the fix's gain);
- `loader_experiment`: `DataLoader.__init__` with more workers and persistent_workers, pin_memory, or a doubled
  batch_size ("workers" and "persistent_workers" for input_bound, "pin_memory" for host_to_device,
  "double_batch" for small_batch, which changes the optimisation: the gain is in samples/s only, a measurement
  and not a drop-in fix);
- `autocast_forward` ("bf16_autocast" for precision on CUDA): the outermost forward under bf16 autocast (a global
  forward pre-hook enters `torch.autocast`, the post-hook leaves it); the loss outside the forward stays as it was;
- `ddp_experiment` ("gradient_as_bucket_view", "fp16_compress" for communication, on every rank);
- "async_item" (sync_stall on CUDA): async_item.py.

How each is run and compared is in runs.py: `repeats` pairs of a fresh baseline run then the changed run, the
gain the median of the pair ratios. The first (diagnosis) run is not reused as a baseline: it ran cold.

Limits: the changes reach every DataLoader and every module in the process (a validation loader too). Replayed
batches are the very objects the loader made (no copy, so no cost per step): a script that changes its batch in
place sees that change again. A change that did not take (no batch replayed, a loader not rebuilt) is a note,
never a gain.
"""

from __future__ import annotations

import functools
import inspect
import statistics
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.patching import Patch
from gpufeed.measure.steps import StepRecord

# gpufeed's choice: eight batches to cycle through, as an epoch-free stand-in for the loader's output.
REPLAY_BATCHES = 8


class Changes:
    """Patches and hook handles installed for one experiment; `restore()` undoes them, last first. `counts`:
    what the changes did (replayed batches, say), for the experiment's check."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.patches: list[Patch] = []
        self.handles: list = []
        self.cleanups: list[Callable[[], None]] = []

    def restore(self) -> None:
        for handle in self.handles:
            handle.remove()
        for patch in reversed(self.patches):
            patch.restore()
        for cleanup in self.cleanups:
            cleanup()
        self.patches, self.handles, self.cleanups = [], [], []


@dataclass(frozen=True)
class Experiment:
    kind: str  # the finding it tests
    name: str  # "replay", "workers", "pin_memory", "double_batch", "bf16_autocast"
    description: str  # what was changed, in words: the start of Gain.how
    install: Callable[[Changes], None]
    min_warmup: int = 0  # warm-up steps the change needs (replay: the batches it caches)
    # "fix": the change the finding recommends, its gain the finding's `gain.measured`; "bound": a change the
    # user cannot make (replay: input for free), an upper bound on every fix, the finding's `gain.bound`
    role: str = "fix"
    # why the change did not take (given the run's watcher, the changes, the baseline's records), or None
    check: Callable[[Watcher, Changes, list[StepRecord]], str | None] = lambda watcher, changes, baseline: None
    # compared in samples/s only: the change alters the batch size, so a rate in steps/s would mislead (runs.py)
    samples_only: bool = False


@dataclass
class _ReplayState:
    batches: list = field(default_factory=list)
    served: int = 0
    exhausted: bool = False


def replay(changes: Changes, batches: int = REPLAY_BATCHES) -> None:
    """Every DataLoader iterator yields its first `batches` batches, then serves them again in a cycle."""
    from torch.utils.data import dataloader

    states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def make_next(original):
        def __next__(iterator):
            state = states.setdefault(iterator, _ReplayState())
            if len(state.batches) < batches and not state.exhausted:
                try:
                    batch = original(iterator)
                except StopIteration:
                    if not state.batches:
                        raise
                    state.exhausted = True  # a loader shorter than `batches`: cycle what it gave
                else:
                    state.batches.append(batch)
                    return batch
            batch = state.batches[state.served % len(state.batches)]
            state.served += 1
            changes.counts["replayed batches"] += 1
            return batch
        return __next__

    changes.patches.append(Patch(dataloader._BaseDataLoaderIter, "__next__", make_next))


def loader_arguments(changes: Changes, change: Callable[[dict], None]) -> None:
    """`DataLoader.__init__` runs with its bound arguments (defaults left out) passed through `change` first."""
    from torch.utils.data import DataLoader

    def make_init(original):
        signature = inspect.signature(original)

        @functools.wraps(original)  # Lightning reads the signature of the __init__ it wraps
        def __init__(loader, *args, **kwargs):
            bound = signature.bind(loader, *args, **kwargs)
            change(bound.arguments)
            original(*bound.args, **bound.kwargs)
        return __init__

    changes.patches.append(Patch(DataLoader, "__init__", make_init))


def autocast_forward(changes: Changes, device_type: str, dtype: torch.dtype = torch.bfloat16) -> None:
    """The outermost module forward runs under `torch.autocast(device_type, dtype)`."""
    state: dict = {"depth": 0, "context": None}

    def leave() -> None:
        if state["context"] is not None:
            state["context"].__exit__(None, None, None)
        state["depth"], state["context"] = 0, None

    def pre(module, inputs) -> None:
        state["depth"] += 1
        if state["depth"] == 1:
            state["context"] = torch.autocast(device_type, dtype=dtype)
            state["context"].__enter__()

    def post(module, inputs, output) -> None:
        state["depth"] = max(0, state["depth"] - 1)
        if state["depth"] == 0:
            leave()

    changes.handles += [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]
    changes.cleanups.append(leave)  # a run stopped inside a forward (the doctor's stop skips the post-hook)


# --- the DataLoader's experiments and their checks -----------------------------------------------------------


def typical_batch(records: list[StepRecord]) -> int | None:
    sizes = [record.batch_size for record in records if record.batch_size is not None]
    return int(statistics.median_low(sizes)) if sizes else None


def loader_experiment(kind: str, name: str, *, workers: int | None = None, pin_memory: bool = False,
                      batch_factor: int = 1, path: str | None = None) -> Experiment:
    """Every DataLoader built with `workers` workers (and persistent_workers), pinned memory, a `batch_factor`
    times larger batch_size: whichever are given. `path`: how that reaches the framework's training loader, in
    words (framework_words.experiment_path), added to the description."""
    settings = ([f"num_workers={workers}", "persistent_workers=True"] if workers else []) + (
        ["pin_memory=True"] if pin_memory else [])
    description = f"DataLoader({', '.join(settings)})" if settings else "DataLoader as it was"
    if path:
        description += f", {path}"
    if batch_factor != 1:
        description = (f"DataLoader batch_size x{batch_factor} (this changes the optimisation: learning rate, "
                       f"steps per epoch)")

    def change(arguments: dict) -> None:
        if workers:
            arguments["num_workers"], arguments["persistent_workers"] = workers, True
        if pin_memory:
            arguments["pin_memory"] = True
        batch = arguments.get("batch_size", 1)
        if batch_factor != 1 and isinstance(batch, int) and arguments.get("batch_sampler") is None:
            arguments["batch_size"] = batch * batch_factor

    def check(watcher: Watcher, changes: Changes, baseline: list[StepRecord]) -> str | None:
        if workers and watcher.loader_workers != workers:
            return f"the loader ran with {watcher.loader_workers} workers, not {workers}: it is not a torch " \
                   f"DataLoader built while the script ran"
        if pin_memory and watcher.loader_pin_memory is not True:
            return "the loader did not pin memory: it is not a torch DataLoader built while the script ran"
        old, new = typical_batch(baseline), typical_batch(watcher.records)
        if batch_factor != 1 and (old is None or new is None):
            return "no DataLoader batch size was read: the batches do not come from a DataLoader's batch_size"
        if batch_factor != 1 and new == old:
            return f"the batch size stayed {new}: the batches do not come from a DataLoader's batch_size"
        return None

    return Experiment(kind, name, description, lambda changes: loader_arguments(changes, change), check=check,
                      samples_only=batch_factor != 1)


def ddp_experiment(kind: str, name: str, *, gradient_as_bucket_view: bool = False,
                   fp16_compress: bool = False) -> Experiment:
    """Every DistributedDataParallel built with gradient_as_bucket_view=True, and/or with DDP's
    fp16_compress_hook registered (the gradients all-reduced in float16: half the bytes)."""
    settings = (["gradient_as_bucket_view=True"] if gradient_as_bucket_view else []) + (
        ["register_comm_hook(None, default_hooks.fp16_compress_hook)"] if fp16_compress else [])
    description = "DistributedDataParallel(..., " + ", then ".join(settings) + ")"

    def install(changes: Changes) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        def make(original):
            @functools.wraps(original)
            def __init__(module, *args, **kwargs):
                if gradient_as_bucket_view:
                    kwargs["gradient_as_bucket_view"] = True
                original(module, *args, **kwargs)
                if fp16_compress:
                    module.register_comm_hook(None, default_hooks.fp16_compress_hook)
                changes.counts["DDP modules changed"] += 1
            return __init__

        changes.patches.append(Patch(DistributedDataParallel, "__init__", make))

    def check(watcher: Watcher, changes: Changes, baseline: list[StepRecord]) -> str | None:
        if changes.counts["DDP modules changed"] == 0:
            return "no DistributedDataParallel module was built while the script ran"
        return None

    return Experiment(kind, name, description, install, check=check)


def replayed(watcher: Watcher, changes: Changes, baseline: list[StepRecord]) -> str | None:
    if changes.counts["replayed batches"] == 0:
        return "no DataLoader batch was replayed: the loop does not draw its batches from a torch DataLoader"
    return None

