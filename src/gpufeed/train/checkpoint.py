"""Checkpoints that survive a kill or a full disk, and load without running pickled code.

A checkpoint is `folder/checkpoint-{step:09d}.pt`, written by `torch.save` into a temporary file in
the same folder, fsynced and renamed (`atomic_open`): a killed or failed save leaves the previous
checkpoints as they were. Loading uses `weights_only=True`, so the state may hold only tensors,
dicts, lists, tuples, str, int, float, bool and None; `save_checkpoint` checks this before writing.
"""

from __future__ import annotations

import contextlib
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from gpufeed.atomic import TEMP_MARKER, atomic_open, remove_stale_temporaries
from gpufeed.errors import ConfigError, RunFailed

FORMAT_VERSION = 1
REQUIRED_KEYS = ("model", "optimizer", "scaler", "rng", "feed", "step", "epoch", "config", "format")
_NAME = re.compile(r"^checkpoint-(\d+)\.pt$")
_TEMPORARY = re.compile(r"^\.(checkpoint-\d+\.pt)" + re.escape(TEMP_MARKER) + r"\d+$")
_SCALARS = (str, int, float, bool, type(None))
_TENSORS = (torch.Tensor, torch.nn.Parameter)


class CheckpointError(RunFailed):
    """A checkpoint file is torn, corrupt, foreign or unsafe to unpickle."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"checkpoint {path} cannot be loaded: {reason}; delete it to resume from an earlier one")


def checkpoint_path(folder: Path, step: int) -> Path:
    return Path(folder) / f"checkpoint-{step:09d}.pt"


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file in `folder`, oldest written first (equal times: lower step first).

    Time, not the step in the name, says which is newest: a run resumed from an earlier checkpoint writes
    lower steps after higher ones. Copy a run folder with `cp -a` or `rsync -a`, which keep the times.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        if match := _NAME.match(entry.name):
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile: not a checkpoint any more
                found.append((entry.stat().st_mtime_ns, int(match.group(1)), entry))
    return [(step, path) for _, step, path in sorted(found)]


def _check_loadable(value: Any, key_path: str) -> None:
    """Raise ConfigError naming the first value that `torch.load(weights_only=True)` would refuse."""
    kind = type(value)
    if kind in _TENSORS or kind in _SCALARS:
        return
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in _SCALARS:
                raise ConfigError(f"checkpoint state {key_path} has a key of type {type(key).__name__}; use str or int")
            _check_loadable(item, f"{key_path}[{key!r}]")
        return
    if kind in (list, tuple):
        for index, item in enumerate(value):
            _check_loadable(item, f"{key_path}[{index}]")
        return
    raise ConfigError(
        f"checkpoint state {key_path} is a {kind.__module__}.{kind.__qualname__}, which torch.load(weights_only=True) "
        "refuses; convert it to a tensor, a plain number or a str"
    )


def _missing_keys(state: dict) -> list[str]:
    return [key for key in REQUIRED_KEYS if key not in state]


def _os_error_of(error: BaseException | None) -> OSError | None:
    """The OSError behind `error`: torch.save reports a failed write as a RuntimeError chained to it."""
    for _ in range(8):  # a chain is short; the bound guards against a cycle
        if error is None or isinstance(error, OSError):
            return error
        error = error.__cause__ or error.__context__
    return None


def _remove_stale(folder: Path) -> None:
    for entry in folder.iterdir():
        if match := _TEMPORARY.match(entry.name):
            remove_stale_temporaries(folder / match.group(1))


def save_checkpoint(folder: Path, step: int, state: dict, keep: int = 3) -> Path:
    """Write `state` atomically to `folder/checkpoint-{step:09d}.pt`; keep the `keep` newest written, this one too.

    Raises ConfigError (nothing written) for a state that would not load with weights_only=True,
    and RunFailed when the disk refuses the write; the earlier checkpoints are then untouched.
    """
    if keep < 1:
        raise ConfigError(f"keep must be at least 1 checkpoint, got {keep}")
    if missing := _missing_keys(state):
        raise ConfigError(f"checkpoint state lacks {', '.join(missing)}; it needs {', '.join(REQUIRED_KEYS)}")
    if state["format"] != FORMAT_VERSION:
        raise ConfigError(f"checkpoint state has format {state['format']!r}; this version writes {FORMAT_VERSION}")
    _check_loadable(state, "state")
    folder = Path(folder)
    destination = checkpoint_path(folder, step)
    existing: list[tuple[int, Path]] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale(folder)
        existing = list_checkpoints(folder)
        with atomic_open(destination) as handle:
            torch.save(state, handle)
    except (OSError, RuntimeError) as error:
        cause = _os_error_of(error)
        if cause is None:
            raise
        previous = str(existing[-1][1]) if existing else "none"
        reason = cause.strerror or str(cause)
        raise RunFailed(
            f"could not write checkpoint {destination}: {reason}; the previous checkpoint {previous} is intact; "
            "free disk space or point --out elsewhere"
        ) from error
    others = [path for _, path in list_checkpoints(folder) if path != destination]
    for old in others[: max(0, len(others) - (keep - 1))]:  # the one just written is the newest, always kept
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return destination


def load_checkpoint(path: Path) -> dict:
    """Load a checkpoint onto the CPU with weights_only=True; CheckpointError if torn, corrupt or foreign."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torn zips, refused globals and short reads raise many different types
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise CheckpointError(path, f"{type(error).__name__}: {first_line}") from error
    if not isinstance(state, dict):
        raise CheckpointError(path, f"it holds a {type(state).__name__}, not a gpufeed checkpoint")
    if missing := _missing_keys(state):
        raise CheckpointError(path, f"it lacks {', '.join(missing)}, so it is not a gpufeed checkpoint")
    if state["format"] != FORMAT_VERSION:
        raise CheckpointError(path, f"format {state['format']!r}; this version reads format {FORMAT_VERSION}")
    return state


def find_latest(folder: Path) -> tuple[dict | None, Path | None, list[tuple[Path, str]]]:
    """The newest written checkpoint in `folder` that loads, its path, and the (path, reason) of newer ones skipped."""
    skipped: list[tuple[Path, str]] = []
    for _, path in reversed(list_checkpoints(folder)):
        try:
            return load_checkpoint(path), path, skipped
        except CheckpointError as error:
            skipped.append((path, error.reason))
    return None, None, skipped


def capture_rng() -> dict:
    """{"torch": CPU generator state, "cuda": one state per CUDA device (empty without CUDA)}."""
    cuda = list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else []
    return {"torch": torch.get_rng_state(), "cuda": cuda}


def restore_rng(state: dict) -> None:
    """Set the generators from `capture_rng`'s dict; CUDA states for devices not present are ignored."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        for index, device_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(device_state, index)
