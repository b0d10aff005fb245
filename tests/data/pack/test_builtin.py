"""The built-in dataset: shapes, determinism, prefixes, splits, balance, streaming, and no colour leak."""

from __future__ import annotations

import numpy as np
import pytest

from gpufeed.data.pack.builtin import (
    BLOCK,
    CLASSES,
    DEFAULT_TEST_COUNT,
    DEFAULT_TRAIN_COUNT,
    builtin_chunks,
    make_builtin,
)
from gpufeed.errors import ConfigError


def test_shapes_and_dtypes():
    images, labels = make_builtin(37)
    assert images.shape == (37, 32, 32, 3)
    assert images.dtype == np.uint8
    assert images.flags.c_contiguous
    assert labels.shape == (37,)
    assert labels.dtype == np.int64
    assert labels.min() >= 0 and labels.max() < len(CLASSES)


def test_constants():
    assert len(CLASSES) == 10 and len(set(CLASSES)) == 10
    assert all(isinstance(name, str) and name for name in CLASSES)
    assert (DEFAULT_TRAIN_COUNT, DEFAULT_TEST_COUNT) == (50_000, 10_000)


def test_empty_request():
    images, labels = make_builtin(0)
    assert images.shape == (0, 32, 32, 3) and labels.shape == (0,)


def test_same_arguments_give_the_same_bytes():
    first_images, first_labels = make_builtin(1500, "test", seed=3)
    second_images, second_labels = make_builtin(1500, "test", seed=3)
    assert first_images.tobytes() == second_images.tobytes()
    assert np.array_equal(first_labels, second_labels)


def test_a_prefix_equals_a_smaller_request():
    # 2345 crosses two block boundaries; 1001 stops one sample into the second block
    big_images, big_labels = make_builtin(2345)
    for count in (1, 999, 1000, 1001):
        small_images, small_labels = make_builtin(count)
        assert np.array_equal(big_images[:count], small_images)
        assert np.array_equal(big_labels[:count], small_labels)


def test_splits_and_seeds_give_different_samples():
    train, _ = make_builtin(200, "train", seed=0)
    test, _ = make_builtin(200, "test", seed=0)
    other_seed, _ = make_builtin(200, "train", seed=1)
    for other in (test, other_seed):
        # no image of one set appears in the other
        train_rows = {row.tobytes() for row in train}
        assert not train_rows & {row.tobytes() for row in other}


def test_every_ten_consecutive_indices_hold_each_class_once():
    _, labels = make_builtin(2 * BLOCK + 30)
    groups = labels.reshape(-1, len(CLASSES))
    assert np.array_equal(np.sort(groups, axis=1), np.tile(np.arange(len(CLASSES)), (len(groups), 1)))
    # and the order within a group is shuffled, not index % 10
    assert not np.array_equal(labels, np.arange(len(labels)) % len(CLASSES))
    counts = np.bincount(make_builtin(1234)[1], minlength=len(CLASSES))
    assert counts.max() - counts.min() <= 1 and counts.sum() == 1234


@pytest.mark.parametrize("chunk", [1, 333, 1000, 4096])
def test_chunks_concatenate_to_the_whole(chunk):
    count = 2100 if chunk > 1 else 25
    images, labels = make_builtin(count, "test", seed=7)
    chunks = list(builtin_chunks(count, "test", seed=7, chunk=chunk))
    assert [len(part_labels) for _, part_labels in chunks[:-1]] == [chunk] * (len(chunks) - 1)
    assert np.array_equal(np.concatenate([part for part, _ in chunks]), images)
    assert np.array_equal(np.concatenate([part for _, part in chunks]), labels)


def test_images_are_not_flat():
    images, _ = make_builtin(100)
    spread = images.reshape(100, -1, 3).astype(np.float64).std(axis=1).mean(axis=1)
    assert spread.min() > 3.0  # noise alone gives at least a few grey levels
    assert len(np.unique(images.reshape(-1, 3), axis=0)) > 10_000  # many colours


def test_mean_colour_does_not_reveal_the_class():
    # nearest class mean on each image's mean RGB, fitted on train, scored on test: near chance (10%)
    train_images, train_labels = make_builtin(4000, "train")
    test_images, test_labels = make_builtin(2000, "test")
    train_colour = train_images.reshape(len(train_images), -1, 3).mean(axis=1)
    test_colour = test_images.reshape(len(test_images), -1, 3).mean(axis=1)
    centres = np.stack([train_colour[train_labels == label].mean(axis=0) for label in range(len(CLASSES))])
    distances = ((test_colour[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    accuracy = (distances.argmin(axis=1) == test_labels).mean()
    assert accuracy < 0.20


def test_class_mean_images_look_alike():
    # averaged over many samples, every class gives nearly the same picture: objects move and colours vary,
    # so an object colour tied to the class (which the mean-RGB check above can miss) shows up here
    images, labels = make_builtin(3000)
    per_class = np.stack([images[labels == label].mean(axis=0) for label in range(len(CLASSES))])
    assert np.abs(per_class - per_class.mean(axis=0)).max() < 40


def test_every_object_stands_out_and_both_polarities_occur():
    # the object differs from the background by at least 0.2 (51 levels) in every channel, so the grey-level
    # spread of every image is large; light-on-dark and dark-on-light are about equally common
    images, labels = make_builtin(2000)
    grey = images.astype(np.float32).mean(axis=3).reshape(len(images), -1)
    low, high = np.percentile(grey, [2, 98], axis=1)
    assert (high - low).min() > 30
    light_background = np.median(grey, axis=1) > 127.5  # the background covers most of the image
    assert 0.4 < light_background.mean() < 0.6
    for label in range(len(CLASSES)):  # and the polarity is not tied to the class
        assert 0.3 < light_background[labels == label].mean() < 0.7


@pytest.mark.parametrize(
    "arguments",
    [{"count": -1}, {"count": 1.5}, {"count": 10, "split": "valid"}, {"count": 10, "seed": -1}],
)
def test_bad_arguments_are_config_errors(arguments):
    with pytest.raises(ConfigError):
        make_builtin(**arguments)


def test_bad_chunk_is_a_config_error():
    with pytest.raises(ConfigError):
        next(builtin_chunks(10, chunk=0))
