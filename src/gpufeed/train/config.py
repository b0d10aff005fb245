"""The configuration of a training run: a frozen dataclass with units in names; unknown keys are an error."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpufeed.errors import ConfigError
from gpufeed.train.models import MODELS
from gpufeed.train.precision import PRECISIONS

# Peak learning rate per model for AdamW at the default batch; chosen on the built-in data (see README).
DEFAULT_LEARNING_RATES = {"mlp": 1e-3, "cnn": 2e-3, "resnet18": 1e-3, "resnet50": 1e-3}


@dataclass(frozen=True)
class TrainConfig:
    data: str = "builtin"
    validation: str | None = None
    validation_fraction: float | None = None
    count: int | None = None  # built-in data only: train on this many images
    model: str = "cnn"
    hidden: tuple[int, ...] = (512, 256)
    width: int | None = None
    image_size: int | None = None  # N x N crops (random-resized for training, centre for validation); None: as packed
    max_side: int | None = None  # a folder as data: its pack's longer side; None: ceil(image_size / 0.875)
    epochs: int = 5
    batch_size: int | str = 256  # or "auto"
    learning_rate: float | None = None  # None: the model's default
    weight_decay: float = 5e-4
    label_smoothing: float = 0.1
    warmup_fraction: float = 0.05
    precision: str = "auto"
    device: str = "auto"
    compile: bool = False
    workers: int | None = None
    seed: int = 0
    out: str | None = None
    checkpoint_every_steps: int = 0  # 0: at the end of each epoch only
    resume: bool = False  # continue the run in `out` (its settings, unless the command line sets them)
    overwrite: bool = False  # remove the run in `out` first (its own files only, checkpoints included)
    log_every_steps: int = 20
    max_steps: int | None = None  # stop early (for tests and quick looks)
    explicit: tuple[str, ...] | None = None  # the options the command line set; None: all (a library caller's)

    def __post_init__(self):
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.batch_size != "auto" and (not isinstance(self.batch_size, int) or self.batch_size <= 0):
            raise ConfigError(f"--batch-size must be a positive integer or 'auto', got {self.batch_size!r}")
        for name in ("epochs", "log_every_steps"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.checkpoint_every_steps < 0:
            raise ConfigError(f"--checkpoint-every must be >= 0 steps, got {self.checkpoint_every_steps}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ConfigError(f"--lr must be positive, got {self.learning_rate}")
        if self.resume and not self.out:
            raise ConfigError("--resume needs --out DIR, the folder holding the checkpoints")
        if self.overwrite and not self.out:
            raise ConfigError("--overwrite needs --out DIR, the folder whose run it replaces")
        if self.resume and self.overwrite:
            raise ConfigError("--resume continues the run in --out and --overwrite replaces it; give one of them")
        if self.image_size is not None and (not isinstance(self.image_size, int) or self.image_size <= 0):
            raise ConfigError(f"--image-size must be a positive number of pixels, got {self.image_size!r}")
        if self.max_side is not None and (not isinstance(self.max_side, int) or self.max_side <= 0):
            raise ConfigError(f"--max-side must be a positive number of pixels, got {self.max_side!r}")
        if self.max_steps is not None and self.max_steps <= 0:
            raise ConfigError(f"max_steps must be positive, got {self.max_steps}")

    @property
    def peak_learning_rate(self) -> float:
        return self.learning_rate if self.learning_rate is not None else DEFAULT_LEARNING_RATES[self.model]

    def total_steps(self, steps_per_epoch: int) -> int:
        """Optimizer steps of the whole run: all epochs, or `max_steps` when that comes first."""
        total = self.epochs * steps_per_epoch
        return total if self.max_steps is None else min(total, self.max_steps)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {', '.join(unknown)}; "
                              f"known keys: {', '.join(sorted(known))}")
        values = dict(values)
        for name in ("hidden", "explicit"):  # JSON and checkpoints hold lists
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)

    def to_dict(self) -> dict:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
