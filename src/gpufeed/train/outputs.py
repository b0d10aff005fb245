"""The files of a run in --out DIR: config.json, metrics.jsonl, model.safetensors, summary.json, checkpoints/."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from gpufeed.atomic import finish_temporary, remove_stale_temporaries, temporary_path, write_text_atomic
from gpufeed.errors import ConfigError, RunFailed
from gpufeed.train.checkpoint import list_checkpoints

RUN_FILE_NAMES = ("config.json", "metrics.jsonl", "model.safetensors", "summary.json")  # beside checkpoints/


@dataclass(frozen=True)
class FolderContents:
    """What of a gpufeed run a folder holds; files gpufeed did not write are not listed, and never removed."""

    folder: Path
    files: tuple[str, ...]  # names from RUN_FILE_NAMES present
    checkpoints: tuple[Path, ...]  # checkpoint files in checkpoints/

    @property
    def holds_run(self) -> bool:
        return bool(self.files or self.checkpoints)

    def describe(self) -> str:
        """`config.json, metrics.jsonl, 3 checkpoints`."""
        count = len(self.checkpoints)
        return ", ".join([*self.files, *([f"{count} checkpoint{'s' * (count != 1)}"] if count else [])])


def read_contents(folder: Path) -> FolderContents:
    folder = Path(folder)
    files = tuple(name for name in RUN_FILE_NAMES if (folder / name).is_file())
    return FolderContents(folder, files, tuple(path for _, path in list_checkpoints(folder / "checkpoints")))


def remove_run(contents: FolderContents) -> None:
    """Delete the run's own files, checkpoints included, and checkpoints/ when that leaves it empty."""
    try:
        for path in (*(contents.folder / name for name in contents.files), *contents.checkpoints):
            path.unlink(missing_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot remove the run in {contents.folder}: {error.filename}: {error.strerror}; "
                          f"remove it by hand or choose another --out") from None
    with contextlib.suppress(OSError):  # not empty: it holds files gpufeed did not write
        (contents.folder / "checkpoints").rmdir()


class RunFiles:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ConfigError(f"--out {folder} is a file; give a folder")
        try:
            self.checkpoints.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"cannot create --out folder {folder}: {error.strerror}") from None

    @property
    def checkpoints(self) -> Path:
        return self.folder / "checkpoints"

    def write_config(self, config: dict) -> None:
        write_text_atomic(self.folder / "config.json", json.dumps(config, indent=2, default=str) + "\n")

    def append_metrics(self, record) -> None:
        """One JSON line per log interval; a resumed run appends to the same file."""
        with open(self.folder / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(dataclasses.asdict(record)) + "\n")

    def write_summary(self, summary: dict) -> None:
        write_text_atomic(self.folder / "summary.json", json.dumps(summary, indent=2) + "\n")

    def save_model(self, model: torch.nn.Module) -> Path:
        """Final weights as safetensors, written to a temporary file, fsynced and renamed (`finish_temporary`)."""
        destination = self.folder / "model.safetensors"
        remove_stale_temporaries(destination)
        temporary = temporary_path(destination)
        tensors = {name: value.detach().contiguous().cpu() for name, value in model.state_dict().items()}
        try:
            save_file(tensors, str(temporary), metadata={"format": "pt", "producer": "gpufeed"})
            with open(temporary, "rb") as handle:  # safetensors writes by path; fsync what it wrote
                finish_temporary(handle, temporary, destination)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise RunFailed(f"could not write {destination}: {error.strerror}; "
                            f"free disk space or change --out") from None
        return destination
