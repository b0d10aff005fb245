"""Crop + resize kernel against Pillow: crop the box, resize with BILINEAR (antialiased), compare.

Tolerances, and why:
- raw samples: max abs difference <= 1 level, mean <= 0.3. torch's uint8 antialiased bilinear is a port of
  Pillow's fixed-point resampler (the same triangle filter, widened when shrinking); they differ only in the
  rounding of weights. Measured here: max 1, mean <= 0.26 over 200 random boxes, noise images included.
- JPEG samples without DCT scaling: the same (both decoders are libjpeg-turbo with the exact IDCT).
- JPEG samples with DCT scaling by f = 2, 4, 8: compared with Pillow on the box snapped to the f-grid (what the
  kernel crops: `scaled_box`), max <= 16, mean <= 3.5. libjpeg's scaled IDCT filters each f x f block
  (close to a box filter) before our triangle filter, where the reference filters the full image only once;
  these test images have waves of 57-88 source pixels, only 7-11 output pixels at 1/8, where the filters'
  responses differ most. Measured here over three seeds, RGB and grey: max 13, mean <= 2.9 (1/2: max 9,
  mean <= 1.8). Without snapping (against the unrounded box) the mean grows to 2-9 levels: the rounding
  moves each edge by up to half an output pixel, which these steep waves show; both are looser than raw.
"""

import re

import numpy as np
import pytest
import torch
from photos import photo_dataset, pil_resized_crop, smooth_image  # tests/data/photos.py

from gpufeed.data.feed import cpu_resize
from gpufeed.data.feed.cpu_resize import CropResizer, dct_factor, resize_into, scaled_box
from gpufeed.errors import FormatError


def random_box(rng, height, width, smallest=1):
    box_height = int(rng.integers(max(1, height // smallest), height + 1))
    box_width = int(rng.integers(max(1, width // smallest), width + 1))
    return (int(rng.integers(0, height - box_height + 1)), int(rng.integers(0, width - box_width + 1)),
            box_height, box_width)


def assert_close_to(ours: np.ndarray, reference: np.ndarray, most: int, mean: float, what: str):
    difference = np.abs(ours.astype(np.int64) - reference)
    assert difference.max() <= most and difference.mean() <= mean, \
        f"{what}: max {difference.max()}, mean {difference.mean():.3f}"


@pytest.mark.parametrize("channels, in_ram", [(3, True), (1, True), (3, False)])
def test_raw_crops_match_pillow(tmp_path, channels, in_ram):
    rng = np.random.default_rng(channels)
    sizes = [tuple(int(v) for v in rng.integers(20, 300, 2)) for _ in range(60)]
    dataset, images = photo_dataset(tmp_path / "raw.gpuf", sizes, "raw", channels, in_ram=in_ram)
    assert dataset.in_ram == in_ram
    resizer = CropResizer(dataset)
    for out_size in [(32, 32), (57, 41), (224, 224)]:  # shrinking, mixed, and mostly enlarging
        boxes = np.array([random_box(rng, h, w) for h, w in sizes])
        out = torch.empty((len(sizes), *out_size, channels), dtype=torch.uint8)
        resizer.stage(np.arange(len(sizes)), boxes, out)
        for k in range(len(sizes)):
            reference = pil_resized_crop(images[k], boxes[k], out_size)
            assert_close_to(out[k].numpy(), reference, 1, 0.3, f"sample {k} box {boxes[k]} -> {out_size}")


def test_noise_images_match_pillow_too():
    """Detail at the pixel scale, where a misplaced filter tap shows at once."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        image = rng.integers(0, 256, (int(rng.integers(10, 200)), int(rng.integers(10, 200)), 3), dtype=np.uint8)
        box = random_box(rng, *image.shape[:2])
        out = torch.empty((int(rng.integers(5, 90)), int(rng.integers(5, 90)), 3), dtype=torch.uint8)
        top, left, height, width = box
        resize_into(torch.from_numpy(image)[top:top + height, left:left + width], out)
        assert_close_to(out.numpy(), pil_resized_crop(image, box, tuple(out.shape[:2])), 1, 0.3, f"box {box}")


def test_a_flip_mirrors_the_resized_crop_exactly_and_the_fallback_agrees(monkeypatch):
    """flip=True is the unflipped result mirrored, and `F.interpolate` (used where torch lacks the kernel's
    out= form) gives the same pixels as the kernel called directly."""
    if cpu_resize.RESIZE_KERNEL is None:
        pytest.skip("this torch has no out= form of the kernel: only the fallback runs, tested above")
    rng = np.random.default_rng(8)
    for _ in range(30):
        channels = int(rng.choice([1, 3]))
        image = rng.integers(0, 256, (int(rng.integers(10, 200)), int(rng.integers(10, 200)), channels), np.uint8)
        top, left, height, width = random_box(rng, *image.shape[:2])
        view = torch.from_numpy(image)[top:top + height, left:left + width]
        size = (int(rng.integers(5, 90)), int(rng.integers(5, 90)), channels)
        plain, flipped, fallback = (torch.empty(size, dtype=torch.uint8) for _ in range(3))
        resize_into(view, plain)
        resize_into(view, flipped, flip=True)
        assert torch.equal(flipped, plain.flip(1))
        monkeypatch.setattr(cpu_resize, "RESIZE_KERNEL", None)
        resize_into(view, fallback, flip=True)
        monkeypatch.undo()
        assert torch.equal(fallback, flipped)


def test_a_box_of_the_output_size_is_copied_exactly():
    image = smooth_image(0, 50, 60)
    out = torch.empty((20, 30, 3), dtype=torch.uint8)
    resize_into(torch.from_numpy(image)[5:25, 7:37], out)
    assert np.array_equal(out.numpy(), image[5:25, 7:37])


@pytest.mark.parametrize("box, out_size, factor", [
    ((0, 0, 100, 100), (50, 50), 2), ((0, 0, 99, 100), (50, 50), 1), ((0, 0, 400, 800), (50, 50), 8),
    ((0, 0, 400, 800), (50, 100), 8), ((0, 0, 399, 800), (50, 100), 4), ((0, 0, 120, 120), (224, 224), 1),
])
def test_dct_factor_keeps_the_scaled_box_at_least_the_output(box, out_size, factor):
    assert dct_factor(box[2], box[3], *out_size) == factor


def test_scaled_box_by_hand():
    # 1/4 of a 403 x 250 image is 101 x 63; rows 10..210 -> round(2.5)=2 .. round(52.5)=52; columns 7..103
    # -> round(1.75)=2 .. round(25.75)=26
    assert scaled_box((10, 7, 200, 96), 4, 101, 63) == (2, 2, 50, 24)
    # rows 300..403 of a 403-row image at 1/8 (51 rows): round(37.5) = 38 (half to even) .. round(50.375) = 50
    assert scaled_box((300, 0, 103, 8), 8, 51, 1) == (38, 0, 12, 1)
    assert scaled_box((3, 4, 5, 6), 1, 10, 10) == (3, 4, 5, 6)


@pytest.mark.parametrize("channels", [3, 1])
def test_jpeg_crops_match_pillow_decode_crop_resize(tmp_path, channels):
    rng = np.random.default_rng(10 + channels)
    sizes = [tuple(int(v) for v in rng.integers(150, 500, 2)) for _ in range(40)]
    dataset, images = photo_dataset(tmp_path / "jpeg.gpuf", sizes, "jpeg", channels)
    resizer = CropResizer(dataset)
    factors = set()
    for out_size in [(24, 24), (40, 56), (120, 100)]:
        boxes = np.array([random_box(rng, h, w, smallest=4) for h, w in sizes])
        out = torch.empty((len(sizes), *out_size, channels), dtype=torch.uint8)
        resizer.stage(np.arange(len(sizes)), boxes, out)
        for k, (height, width) in enumerate(sizes):
            factor = dct_factor(boxes[k][2], boxes[k][3], *out_size)
            factors.add(factor)
            top, left, rows, columns = scaled_box(boxes[k], factor, -(-height // factor), -(-width // factor))
            snapped = (top * factor, left * factor, min(rows * factor, height - top * factor),
                       min(columns * factor, width - left * factor))
            assert all(abs(a - b) <= factor / 2 for a, b in zip(snapped[:2], boxes[k][:2], strict=True))
            most, mean = (1, 0.3) if factor == 1 else (16, 3.5)
            assert_close_to(out[k].numpy(), pil_resized_crop(images[k], snapped, out_size), most, mean,
                            f"sample {k} box {boxes[k]} at 1/{factor} -> {out_size}")
    assert factors == {1, 2, 4, 8}


def test_a_corrupt_jpeg_names_the_file_and_sample(tmp_path):
    path = tmp_path / "photos.gpuf"
    dataset, _ = photo_dataset(path, [(64, 64), (64, 80), (70, 64)], "jpeg", damaged=(1,))
    out = torch.empty((3, 32, 32, 3), dtype=torch.uint8)
    pattern = "^" + re.escape(f"{path}: sample 1 (photo_1.png) does not decode as JPEG (")
    with pytest.raises(FormatError, match=pattern) as caught:
        CropResizer(dataset).stage(np.arange(3), np.array([[0, 0, 64, 64]] * 3), out)
    assert "\n" not in str(caught.value) and caught.value.exit_status == 2


def test_a_jpeg_of_another_size_than_its_table_is_refused(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", [(64, 64)], "jpeg")
    dataset.table.heights[0] = 65
    with pytest.raises(FormatError, match=r"sample 0 \(photo_0.png\) is a 64x64 JPEG but the table says 64x65"):
        CropResizer(dataset).stage(np.arange(1), np.array([[0, 0, 64, 64]]), torch.empty((1, 8, 8, 3),
                                                                                          dtype=torch.uint8))
