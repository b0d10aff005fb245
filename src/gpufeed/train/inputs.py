"""Where training and validation samples come from: a packed file, or the built-in dataset (packed once into a
cache folder, then memory-mapped like any other), and a held-out validation share when no --val is given. A folder
given as --data or --val arrives here as its pack in the cache (folder_data.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufeed.data.format.header import read_header
from gpufeed.data.format.reader import PackedDataset, dataset_from_arrays, open_packed
from gpufeed.data.pack import builtin
from gpufeed.data.pack.cache import cache_folder
from gpufeed.errors import ConfigError, FormatError

DEFAULT_VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class TrainingData:
    train: PackedDataset
    train_indices: np.ndarray | None  # a subset of `train`, when validation is held out of it
    validation: PackedDataset
    validation_indices: np.ndarray | None
    description: str


def open_builtin(split: str, count: int, seed: int = 0) -> PackedDataset:
    """The built-in split, packed once into the cache folder; made in memory if the cache cannot be written."""
    from gpufeed.data.pack.sources import pack_builtin  # the packer pulls in image decoding; only needed here

    path = cache_folder() / f"builtin-{split}-{count}-seed{seed}-v1.gpuf"
    try:
        read_header(path)
        return open_packed(path)
    except FormatError:
        pass  # not there yet, or damaged: pack it (again)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pack_builtin(path, count=count, split=split, seed=seed)
        return open_packed(path)
    except OSError:
        images, labels = builtin.make_builtin(count, split, seed)
        return dataset_from_arrays(images, labels, builtin.CLASSES)


def _split(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if not 0 < fraction < 1:
        raise ConfigError(f"--val-fraction must be between 0 and 1, got {fraction}")
    held = int(round(count * fraction))
    if held < 1 or held >= count:
        raise ConfigError(f"--val-fraction {fraction} of {count} samples leaves an empty side; change the fraction")
    order = np.random.default_rng([seed, 0x7A1]).permutation(count)
    return np.sort(order[held:]), np.sort(order[:held])


def _check_compatible(train: PackedDataset, validation: PackedDataset, where: str) -> None:
    if validation.channels != train.channels:
        raise ConfigError(f"validation data {where} has {validation.channels}-channel images, training data "
                          f"{train.channels}; pack both with the same --channels")
    if not train.variable and not validation.variable and validation.shape != train.shape:
        raise ConfigError(f"validation data {where} has images of shape {validation.shape}, training data "
                          f"{train.shape}; pack both with the same --size and --channels")
    if len(validation.classes) != len(train.classes):
        raise ConfigError(f"validation data {where} has {len(validation.classes)} classes, training data "
                          f"{len(train.classes)}; pack both from folders with the same class subfolders")


def open_training_data(data: str, validation: str | None = None, validation_fraction: float | None = None,
                       seed: int = 0, count: int | None = None, data_label: str | None = None,
                       validation_label: str | None = None) -> TrainingData:
    """Resolve --data, --val, --val-fraction (and --count for the built-in set); the labels name the data in the
    description when it is not its path (a folder, for its pack in the cache)."""
    if validation is not None and validation_fraction is not None:
        raise ConfigError("give either --val or --val-fraction, not both")
    if data == "builtin":
        train_count = count or builtin.DEFAULT_TRAIN_COUNT
        train = open_builtin("train", train_count)
        if validation is None and validation_fraction is None:
            test_count = max(100, train_count // 5) if count else builtin.DEFAULT_TEST_COUNT
            held = open_builtin("test", test_count)
            return TrainingData(train, None, held, None, f"built-in: {train_count} train, {test_count} test images")
    else:
        if count is not None:
            raise ConfigError("--count applies to the built-in dataset only; pack a subset to train on fewer")
        train = open_packed(data)
    if validation is not None:
        held = open_packed(validation)
        _check_compatible(train, held, validation_label or validation)
        return TrainingData(train, None, held, None, f"{data_label or data} ({len(train)}), validation "
                                                     f"{validation_label or validation} ({len(held)})")
    fraction = DEFAULT_VALIDATION_FRACTION if validation_fraction is None else validation_fraction
    train_indices, held_indices = _split(len(train), fraction, seed)
    described = f"{data_label or data}: {len(train_indices)} train, {len(held_indices)} held out ({fraction:.0%})"
    return TrainingData(train, train_indices, train, held_indices, described)


@dataclass(frozen=True)
class Augments:
    """How the feeds shape the images: the training and validation augments, the output size (None: the packed
    size), and the sample shape (C, H, W) the model is built for."""

    train: str | None
    validation: str | None
    image_size: tuple[int, int] | None
    sample_shape: tuple[int, int, int]


def choose_augments(data: TrainingData, image_size: int | None) -> Augments:
    """The CIFAR recipe (pad-crop + flip, validation as packed) for fixed-size version-1 data at its own size;
    the ImageNet recipe (random-resized-crop + flip for training, centre crop for validation) when the packed
    images vary in size, are stored per sample (version 2), or differ from `image_size`."""
    train, validation = data.train, data.validation
    channels = train.channels
    fixed_v1 = not train.variable and not validation.variable
    if image_size is None:
        if fixed_v1:
            height, width, _ = train.shape
            return Augments("crop+flip", None, None, (channels, height, width))
        for dataset, role in ((train, "training"), (validation, "validation")):
            if not dataset.is_fixed_size:
                height, width, _ = dataset.max_shape
                raise ConfigError(f"the {role} images vary in size (up to {height}x{width}): give --image-size N "
                                  f"(e.g. 224) to train on random-resized crops of that size")
        height, width, _ = train.shape
        size = (height, width)
    else:
        size = (int(image_size), int(image_size))
        if fixed_v1 and tuple(train.shape[:2]) == size and tuple(validation.shape[:2]) == size:
            return Augments("crop+flip", None, None, (channels, *size))
    return Augments("random-resized-crop", "centre-crop", size, (channels, *size))
