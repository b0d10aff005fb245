"""Batch crop + flip + normalise against a per-sample numpy reference given the same random draws."""

import numpy as np
import pytest
import torch

from gpufeed.data.feed import augment
from gpufeed.errors import ConfigError


def reference_crop_flip(image: np.ndarray, row_offset: int, column_offset: int, flip: int, padding: int):
    """Per sample, the textbook way: zero-pad, crop at (padding + offset), then mirror left-right."""
    padded = np.pad(image, ((padding, padding), (padding, padding), (0, 0)))
    height, width = image.shape[:2]
    top, left = padding + row_offset, padding + column_offset
    crop = padded[top:top + height, left:left + width]
    return crop[:, ::-1] if flip else crop


@pytest.mark.parametrize("shape", [(8, 32, 32, 3), (5, 7, 9, 1), (3, 6, 6, 4)])
def test_crop_flip_equals_numpy_reference(shape):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, shape, dtype=np.uint8)
    plan = augment.parse_augment("crop+flip", padding=4)
    draws = augment.draw(plan, shape[0], seed=1, epoch=2, batch_index=3)
    rows, columns, flips = draws.row_offsets.numpy(), draws.column_offsets.numpy(), draws.flips.numpy()
    assert min(rows.min(), columns.min()) >= -4 and max(rows.max(), columns.max()) <= 4
    assert set(np.unique(flips)) <= {0, 1}
    ours = augment.crop_flip(torch.from_numpy(images), draws, padding=4).numpy()
    for i in range(shape[0]):
        expected = reference_crop_flip(images[i], rows[i], columns[i], flips[i], padding=4)
        assert np.array_equal(ours[i], expected), f"sample {i} with draws {rows[i], columns[i], flips[i]}"


def test_draws_cover_the_range_and_depend_on_the_batch_index():
    plan = augment.parse_augment("crop+flip")
    first = augment.draw(plan, 4096, seed=0, epoch=0, batch_index=0)
    assert set(np.unique(first.row_offsets.numpy())) == set(range(-4, 5))
    assert 0.45 < first.flips.double().mean() < 0.55
    assert torch.equal(first.values, augment.draw(plan, 4096, 0, 0, 0).values)
    assert not torch.equal(first.values, augment.draw(plan, 4096, 0, 0, 1).values)


def test_a_slice_of_the_step_is_the_same_draws():
    plan = augment.parse_augment("crop+flip")
    step = augment.draw(plan, 12, seed=4, epoch=1, batch_index=2)
    rank = augment.draw(plan, 12, seed=4, epoch=1, batch_index=2, start=8, size=4)
    assert len(rank) == 4 and rank.values.is_contiguous() and torch.equal(rank.values, step.values[:, 8:])


def test_flip_only_and_crop_only():
    flip_only = augment.draw(augment.parse_augment("flip"), 64, 0, 0, 0)
    crop_only = augment.draw(augment.parse_augment("crop"), 64, 0, 0, 0)
    assert not flip_only.row_offsets.any() and not flip_only.column_offsets.any() and flip_only.flips.any()
    assert crop_only.row_offsets.any() and crop_only.column_offsets.any() and not crop_only.flips.any()


def test_to_float_normalises_in_float64_reference():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (4, 5, 6, 3), dtype=np.uint8)
    mean = np.array([120.0, 110.5, 100.25])
    std = np.array([60.0, 55.0, 70.0])
    expected = (images.astype(np.float64) - mean) / std
    scale = torch.tensor(1 / std, dtype=torch.float32)
    shift = torch.tensor(-mean / std, dtype=torch.float32)
    for channels_last in (False, True):
        out = augment.to_float(torch.from_numpy(images), torch.float32, scale, shift, channels_last)
        assert out.shape == (4, 3, 5, 6)
        assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        np.testing.assert_allclose(out.numpy(), expected.transpose(0, 3, 1, 2), rtol=1e-6, atol=1e-5)
    plain = augment.to_float(torch.from_numpy(images), torch.float32, None, None, channels_last=True)
    assert plain.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_allclose(plain.numpy(), images.transpose(0, 3, 1, 2) / 255.0, rtol=1e-6)


@pytest.mark.parametrize("chunk_images", [1, 2, 11])
def test_to_float_in_chunks_into_a_given_output(monkeypatch, chunk_images):
    """On the CPU a batch larger than 4 chunks is converted a chunk at a time: here 1 image, 2 with a remainder
    of 1, or (11: under 4 chunks) the whole batch at once."""
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (11, 4, 7, 3), dtype=np.uint8)
    monkeypatch.setattr(augment, "CPU_CHUNK_BYTES", chunk_images * 4 * 7 * 3 * 4)  # 4x7 float32 RGB images
    mean, std = np.array([100.0, 90.0, 80.0]), np.array([50.0, 40.0, 30.0])
    expected = ((images.astype(np.float64) - mean) / std).transpose(0, 3, 1, 2)
    scale, shift = torch.tensor(1 / std, dtype=torch.float32), torch.tensor(-mean / std, dtype=torch.float32)
    for channels_last in (False, True):
        out = torch.full((11, 3, 4, 7), float("nan"))
        out = out.contiguous(memory_format=torch.channels_last) if channels_last else out
        result = augment.to_float(torch.from_numpy(images), torch.float32, scale, shift, channels_last, out=out)
        assert result.data_ptr() == out.data_ptr()
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-5)
        plain = augment.to_float(torch.from_numpy(images), torch.float32, None, None, channels_last)
        np.testing.assert_allclose(plain.numpy(), images.transpose(0, 3, 1, 2) / 255.0, rtol=1e-6)


def test_crop_only_and_flip_only_match_the_reference():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (16, 8, 8, 3), dtype=np.uint8)
    for name in ("crop", "flip"):
        plan = augment.parse_augment(name, padding=2)
        draws = augment.draw(plan, 16, 0, 0, 0)
        ours = augment.crop_flip(torch.from_numpy(images), draws, 2, plan.flip).numpy()
        rows, columns, flips = draws.row_offsets.numpy(), draws.column_offsets.numpy(), draws.flips.numpy()
        for i in range(16):
            assert np.array_equal(ours[i], reference_crop_flip(images[i], rows[i], columns[i], flips[i], padding=2))


def test_unknown_augment_names_the_choices():
    with pytest.raises(ConfigError, match="crop\\+flip"):
        augment.parse_augment("rotate")
