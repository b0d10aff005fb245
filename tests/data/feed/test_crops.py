"""Crop boxes: the vectorised RandomResizedCrop sampler against a per-sample transcription of torchvision's
`RandomResizedCrop.get_params` fed the same uniform numbers; centre-crop boxes by hand-derived numbers."""

import math

import numpy as np
import pytest

from gpufeed.data.feed import crops
from gpufeed.errors import ConfigError


def reference_get_params(height, width, uniforms, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's rule, one sample, plain Python: U(a, b) is a + (b - a) * u, randint(0, n) is int(u * n)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for attempt in range(10):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * uniforms[attempt])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * uniforms[10 + attempt])
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(uniforms[20] * (height - h + 1))
            j = int(uniforms[21] * (width - w + 1))
            return i, j, h, w
    in_ratio = float(width) / float(height)  # fallback to central crop
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def test_boxes_equal_torchvision_rule_per_sample():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 600, size=(2000, 2))
    sizes[:40, 0] = rng.integers(1, 8, 40)  # very wide strips: most attempts fail, some fall back
    sizes[40:80, 1] = rng.integers(1, 8, 40)  # very tall strips
    uniforms = crops.draw_uniforms(len(sizes), seed=3, epoch=1, batch_index=7)
    ours = crops.random_resized_boxes(sizes[:, 0], sizes[:, 1], uniforms)
    fallbacks = 0
    for k, (height, width) in enumerate(sizes.tolist()):
        expected = reference_get_params(height, width, uniforms[k].tolist())
        assert tuple(ours[k]) == expected, f"sample {k} of size {height}x{width}"
        fallbacks += expected[0] == (height - expected[2]) // 2 and expected[1] == (width - expected[3]) // 2
    top, left, height, width = ours.T
    assert (top >= 0).all() and (left >= 0).all() and (height >= 1).all() and (width >= 1).all()
    assert (top + height <= sizes[:, 0]).all() and (left + width <= sizes[:, 1]).all()
    assert fallbacks >= 20  # the strips took the fallback branch


def test_all_attempts_failing_takes_the_centre_fallback():
    """Whole-area targets at the extreme ratio never fit a square or a strip: each case by hand."""
    uniforms = np.zeros((3, crops.UNIFORMS_PER_SAMPLE))
    uniforms[:, :10] = 1.0  # target area = the whole image
    uniforms[:, 10:20] = 1.0  # ratio 4/3: w = 1.1547 * side > side
    boxes = crops.random_resized_boxes(np.array([100, 10, 300]), np.array([100, 300, 10]), uniforms)
    assert boxes[0].tolist() == [0, 0, 100, 100]  # ratio 1 is in range: the whole image
    assert boxes[1].tolist() == [0, (300 - 13) // 2, 10, 13]  # wide: h = 10, w = round(10 * 4/3) = 13
    assert boxes[2].tolist() == [(300 - 13) // 2, 0, 13, 10]  # tall: w = 10, h = round(10 / (3/4)) = 13


def test_draws_are_a_function_of_the_step_and_ranks_take_slices():
    plan = crops.parse_resized_crop("random-resized-crop", 32)
    heights, widths = np.arange(50, 114), np.arange(200, 136, -1)
    whole = crops.batch_boxes(plan, heights, widths, seed=1, epoch=2, batch_index=5, step=64, start=0)
    for rank in range(4):
        part = slice(16 * rank, 16 * rank + 16)
        mine = crops.batch_boxes(plan, heights[part], widths[part], 1, 2, 5, step=64, start=16 * rank)
        assert np.array_equal(mine, whole[part])
    assert np.array_equal(whole, crops.batch_boxes(plan, heights, widths, 1, 2, 5, 64, 0))
    assert not np.array_equal(whole, crops.batch_boxes(plan, heights, widths, 1, 2, 6, 64, 0))
    area = whole[:, 2] * whole[:, 3] / (heights * widths)
    assert 0.04 < area.min() and area.max() <= 1.0 and 0.3 < area.mean() < 0.7


@pytest.mark.parametrize("size, image, expected", [
    # cover = max(224/375, 224/500) / 0.875 = 0.682667; box = round(224 / cover) = round(328.125) = 328
    ((224, 224), (375, 500), (23, 86, 328, 328)),
    # width: round(160 / 0.682667) = round(234.375) = 234, left = (500 - 234) // 2 = 133
    ((224, 160), (375, 500), (23, 133, 328, 234)),
    # a 256 x 256 image already covers 256: the centre 224, no scaling
    ((224, 224), (256, 256), (16, 16, 224, 224)),
    # portrait: cover = (224/480) / 0.875 = 0.533333; box = 224 / cover = 420
    ((224, 224), (640, 480), (110, 30, 420, 420)),
    # upscaling a small image: cover = (224/100) / 0.875 = 2.56; box = round(87.5) = 88 (half to even)
    ((224, 224), (100, 120), (6, 16, 88, 88)),
])
def test_centre_boxes_by_hand(size, image, expected):
    boxes = crops.centre_boxes(np.array([image[0]]), np.array([image[1]]), size)
    assert tuple(boxes[0]) == expected
    plan = crops.parse_resized_crop("center-crop", size)
    assert not plan.random and not plan.flip
    assert tuple(crops.batch_boxes(plan, np.array([image[0]]), np.array([image[1]]), 0, 0, 0, 8, 0)[0]) == expected


def test_plans_and_image_size():
    assert crops.parse_resized_crop("random-resized-crop", 224) == crops.ResizedCrop(True, True, (224, 224))
    assert crops.parse_resized_crop("random-resized-crop-noflip", (160, 128)).flip is False
    assert crops.parse_resized_crop("crop+flip", 224) is None
    for bad in (0, (224,), "224", 22.5, True, (10, -1)):
        with pytest.raises(ConfigError, match="image_size"):
            crops.parse_image_size(bad)
