"""How a run starts in --out DIR: fresh, continued (--resume), replacing the one there (--overwrite), or not at all.

Runs are never mixed. A folder that holds another run is refused unless the command says what to do with it;
`--resume` continues the run with the saved settings, refusing a command line that changes what was trained
(data, model, batch size, precision); options the command line leaves out come from the saved run.

Every rank reads the folder before any rank changes it, so all take the same decision; only rank 0 removes
files, between two barriers.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from gpufeed.data.feed.order import batches_per_epoch
from gpufeed.errors import ConfigError
from gpufeed.train import distributed
from gpufeed.train.checkpoint import find_latest
from gpufeed.train.config import TrainConfig
from gpufeed.train.outputs import FolderContents, read_contents, remove_run

# What was trained: a resumed run must keep these (image_size is checked where TrainConfig has it).
FIXED_KEYS = ("data", "validation", "validation_fraction", "count", "seed", "image_size", "max_side", "model",
              "hidden", "width", "batch_size", "precision")
MACHINE_KEYS = ("device", "workers", "compile")  # where it runs now: always this command line's
FOLDER_KEYS = ("out", "resume", "overwrite", "explicit")  # about this command, not the run
FLAGS = {"validation": "--val", "validation_fraction": "--val-fraction", "learning_rate": "--lr"}


@dataclass(frozen=True)
class RunStart:
    """The decision, before any data is opened or a model built."""

    config: TrainConfig  # the command line's, completed from the resumed run's settings
    state: dict | None = None  # the checkpoint to continue from; None: a fresh start
    checkpoint: Path | None = None
    skipped: tuple[tuple[Path, str], ...] = ()  # newer checkpoints that did not load, with the reason
    nothing_to_resume: bool = False  # --resume found no run, so this one starts fresh
    total_steps: int | None = None  # of the resumed run under this configuration
    complete: bool = False  # the resumed run has taken its steps and saved its model: nothing to do


def start_run(config: TrainConfig, context: distributed.DistributedContext) -> RunStart:
    """Look at `config.out` and decide; ConfigError (exit 2, nothing changed) when it holds another run."""
    if not config.out:
        return RunStart(config)
    contents = read_contents(Path(config.out))
    if config.overwrite:
        _remove(contents, context)
        return RunStart(config)
    if config.resume:
        return _resume(config, contents, context)
    if contents.holds_run:
        raise ConfigError(f"{config.out} holds another run ({contents.describe()}); continue it with --resume, "
                          f"replace it with --overwrite, or choose another --out")
    return RunStart(config)


def _remove(contents: FolderContents, context: distributed.DistributedContext) -> None:
    if not contents.holds_run:  # the same on every rank: none has changed the folder yet
        return
    distributed.barrier(context)  # every rank has read the folder
    if context.is_main:
        remove_run(contents)
    distributed.barrier(context)


def _resume(config: TrainConfig, contents: FolderContents, context: distributed.DistributedContext) -> RunStart:
    state, path, skipped = find_latest(contents.folder / "checkpoints")
    if state is None:
        finished = {"model.safetensors", "summary.json"} & set(contents.files)
        if contents.checkpoints or finished:
            why = f"none of its checkpoints loads ({skipped[0][1]})" if skipped else "it has no checkpoints"
            raise ConfigError(f"cannot resume {config.out}: it holds a run ({contents.describe()}) but {why}; "
                              f"replace it with --overwrite, or choose another --out")
        _remove(contents, context)  # config.json and metrics.jsonl of a run stopped before its first checkpoint
        return RunStart(config, nothing_to_resume=True)
    config = resumed_config(config, state["config"])
    feed = state["feed"]
    steps_per_epoch = batches_per_epoch(int(feed["count"]), int(feed["batch_size"]), int(feed["world_size"]),
                                        bool(feed["drop_last"]))
    total_steps = config.total_steps(steps_per_epoch)
    # Stopped after its last checkpoint but before its model was saved: the run resumes to evaluate and save.
    complete = int(state["step"]) >= total_steps and "model.safetensors" in contents.files
    return RunStart(config, state, path, tuple(skipped), total_steps=total_steps, complete=complete)


def resumed_config(config: TrainConfig, saved: dict) -> TrainConfig:
    """`config` with the saved run's value for every option it did not set; ConfigError naming each change.

    A value the command line set counts as given (even if it equals the default); `auto` takes what the run
    chose. Epochs and max_steps may grow; the device, workers and compile are always this command line's.
    """
    explicit = None if config.explicit is None else set(config.explicit)
    values, changes = {}, []
    for field in dataclasses.fields(config):
        name, mine = field.name, getattr(config, field.name)
        values[name] = mine
        if name in FOLDER_KEYS or name in MACHINE_KEYS or name not in saved:
            continue
        theirs = tuple(saved[name]) if isinstance(saved[name], list) else saved[name]
        if (explicit is not None and name not in explicit) or mine == "auto":
            values[name] = theirs
        elif name in FIXED_KEYS and _applies(name, saved) and not _same(name, mine, theirs):
            flag = FLAGS.get(name, "--" + name.replace("_", "-"))
            changes.append(f"{flag} {_shown(mine)} (the run has {_shown(theirs)})")
    if changes:
        raise ConfigError(f"cannot resume {config.out} with other settings: {', '.join(changes)}; leave these "
                          f"options out to continue the run as it was, or train a new run with another --out")
    return TrainConfig(**values)


def _applies(name: str, saved: dict) -> bool:
    """The model's shape options count for the model they shape: hidden for the MLP, width for the others."""
    if name == "hidden":
        return saved.get("model") == "mlp"
    return name != "width" or saved.get("model") != "mlp"


def _same(name: str, mine, theirs) -> bool:
    if name in ("data", "validation") and mine not in (None, "builtin") and theirs not in (None, "builtin"):
        return os.path.realpath(mine) == os.path.realpath(theirs)
    return mine == theirs


def _shown(value) -> str:
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value) or '""'
    return "none" if value is None else str(value)
