"""Feed over photos of varying sizes (raw or JPEG): resized crops on the staging threads, flips, resume, ranks,
and the errors for missing settings and undecodable samples."""

import re
import threading

import numpy as np
import pytest
import torch
from photos import photo_dataset, pil_resized_crop, varied_sizes, write_photos

from gpufeed.data.feed import augment, crops, staging
from gpufeed.data.feed.feed import Feed
from gpufeed.data.format.reader import dataset_from_arrays
from gpufeed.errors import ConfigError, FormatError


def raw(feed_batch):
    """Undo normalize=False's division by 255 to get the uint8 pixels back, NHWC."""
    return (feed_batch * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def reference_batch(dataset, images, augment_name, size, seed, epoch, index, indices, step, start):
    """Per sample: the box from the sampler (tested against torchvision's rule in test_crops.py), Pillow's
    crop and BILINEAR resize, then the flip coin of the "flip" augment, as numpy."""
    plan = crops.parse_resized_crop(augment_name, size)
    boxes = crops.batch_boxes(plan, dataset.heights[indices], dataset.widths[indices], seed, epoch, index, step,
                              start)
    flips = augment.draw(augment.parse_augment("flip"), step, seed, epoch, index).flips[start:start + len(indices)]
    expected = []
    for k, sample in enumerate(indices):
        crop = pil_resized_crop(images[sample], boxes[k], plan.size)
        expected.append(crop[:, ::-1] if plan.flip and flips[k] else crop)
    return np.stack(expected)


@pytest.mark.parametrize("augment_name, size", [("random-resized-crop", 32), ("random-resized-crop-noflip", (24, 40)),
                                                ("centre-crop", 32), ("center-crop", (40, 24))])
def test_batches_equal_pillow_reference(tmp_path, augment_name, size):
    dataset, images = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(45))
    feed = Feed(dataset, 8, device="cpu", seed=3, augment=augment_name, image_size=size, normalize=False,
                rank=1, world_size=2, workers=2, drop_last=False)
    feed.set_epoch(2)
    height, width = crops.parse_image_size(size)
    assert feed.sample_shape == (3, height, width) and feed.notes == ()
    order = feed.order()
    for index, (batch, labels) in enumerate(feed):
        indices = order.batches[index]
        assert batch.shape == (len(indices), 3, height, width) and batch.dtype == torch.float32
        assert batch.is_contiguous(memory_format=torch.channels_last)
        expected = reference_batch(dataset, images, augment_name, size, 3, 2, index, indices, step=16, start=8)
        difference = np.abs(raw(batch).astype(np.int64) - expected)
        assert difference.max() <= 1 and difference.mean() <= 0.3, f"batch {index}"  # see test_cpu_resize.py
        assert np.array_equal(labels.numpy(), dataset.labels[indices])


def test_flips_happen_only_with_the_flip_augment(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(64, seed=1))
    options = dict(device="cpu", seed=5, image_size=32, normalize=False, augment=None)
    flipped = Feed(dataset, 64, **{**options, "augment": "random-resized-crop"})
    plain = Feed(dataset, 64, **{**options, "augment": "random-resized-crop-noflip"})
    (a, _), (b, _) = next(iter(flipped)), next(iter(plain))
    coins = augment.draw(augment.parse_augment("flip"), 64, 5, 0, 0).flips.bool()
    assert 10 < coins.sum() < 54
    assert torch.equal(a[coins], b[coins].flip(3)) and torch.equal(a[~coins], b[~coins])


@pytest.mark.parametrize("encoding", ["raw", "jpeg"])
def test_bfloat16_batches_are_the_normalised_pixels_rounded_to_bfloat16(tmp_path, encoding):
    """dtype=torch.bfloat16 (train's bf16 on the CPU, benchmarks/feed_jpeg.py's bf16 line): the same crops as
    float32, each value within bfloat16's rounding of x * scale + shift computed in float64 from the same uint8
    pixels: 8 significant bits, so half an ulp (2^-8 relative) for each of the constants, the product, the sum."""
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(24, seed=4, low=40, high=120), encoding)
    options = dict(device="cpu", seed=2, augment="random-resized-crop", image_size=32, workers=2)
    pixels = Feed(dataset, 8, normalize=False, **options)
    halves = Feed(dataset, 8, dtype=torch.bfloat16, **options)
    mean, std = torch.tensor(dataset.mean, dtype=torch.float64), torch.tensor(dataset.std, dtype=torch.float64)
    scale, shift = (1 / std.clamp_min(1e-3)).view(1, 3, 1, 1), (-mean / std.clamp_min(1e-3)).view(1, 3, 1, 1)
    for (plain, labels), (half, half_labels) in zip(pixels, halves, strict=True):
        assert half.dtype == torch.bfloat16 and half.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(labels, half_labels)
        x = (plain.double() * 255).round()  # the uint8 pixels
        exact = x * scale + shift
        bound = 2.0 ** -8 * (3 * (x * scale).abs() + 2 * shift.abs() + exact.abs()) + 1e-12
        assert ((half.double() - exact).abs() <= bound).all()
        assert (half.double() - exact).abs().max() > 0  # it is bfloat16, not float32 relabelled


@pytest.mark.parametrize("encoding", ["raw", "jpeg"])
def test_two_ranks_equal_one_process_with_twice_the_batch(tmp_path, encoding):
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(40, seed=2, low=60, high=200), encoding)
    options = dict(device="cpu", seed=11, augment="random-resized-crop", image_size=(24, 28), workers=2)
    whole = list(Feed(dataset, 12, **options))
    ranks = [list(Feed(dataset, 6, rank=r, world_size=2, **options)) for r in range(2)]
    assert len(whole) == len(ranks[0]) == len(ranks[1]) == 3
    for (images, labels), (first, first_labels), (second, second_labels) in zip(whole, *ranks, strict=True):
        assert torch.equal(images, torch.cat([first, second])) and torch.equal(labels, torch.cat(
            [first_labels, second_labels]))


@pytest.mark.parametrize("encoding", ["raw", "jpeg"])
def test_resume_mid_epoch_gives_the_same_batches(tmp_path, encoding):
    path = tmp_path / "photos.gpuf"
    write_photos(path, varied_sizes(50, seed=3, low=60, high=200), encoding)
    dataset = path  # each feed opens the file, as separate runs would
    options = dict(device="cpu", seed=9, augment="random-resized-crop", image_size=24, workers=2)
    whole = Feed(dataset, 5, **options)
    whole.set_epoch(1)
    expected = list(whole)
    partial = Feed(dataset, 5, **options)
    partial.set_epoch(1)
    iterator = iter(partial)
    for _ in range(4):
        next(iterator)
    state = partial.state_dict()
    iterator.close()
    resumed = Feed(dataset, 5, **options)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(expected) - 4
    for (a, la), (b, lb) in zip(rest, expected[4:], strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_transfer_path_on_the_cpu_matches_the_host_path(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(30, seed=4), "jpeg", in_ram=False)
    feed = Feed(dataset, 8, device="cpu", seed=6, augment="random-resized-crop", image_size=20, workers=2)
    order = feed.order()
    host = list(feed.host_batches(order, 0))
    transfer = list(feed.transfer_batches(order, 0))
    assert len(host) == len(transfer) == len(feed)
    for (_, a, la), (_, b, lb) in zip(host, transfer, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_the_memory_of_a_batch_is_reused_only_once_nothing_refers_to_it(tmp_path, monkeypatch):
    """The CPU path lends batch memory again (OutputPool, here for batches of any size); views kept of earlier
    batches must stay intact."""
    monkeypatch.setattr(staging, "POOLED_BYTES", 0)
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(48, seed=7), "jpeg")
    feed = Feed(dataset, 4, device="cpu", seed=2, augment="random-resized-crop", image_size=16, workers=2,
                prefetch=1)
    kept, copies = [], []
    for index, (images, _) in enumerate(feed):
        if index % 3 == 0:
            kept.append(images[1:3])
            copies.append(images[1:3].clone())
    assert len(kept) == 4 and all(torch.equal(view, copy) for view, copy in zip(kept, copies, strict=True))


@pytest.mark.parametrize("version", [1, 2])
def test_fixed_size_data_takes_the_packed_size_by_default(tmp_path, version):
    dataset, images = photo_dataset(tmp_path / "photos.gpuf", [(30, 40)] * 20)
    fixed = dataset_from_arrays(np.stack(images), dataset.labels) if version == 1 else dataset
    feed = Feed(fixed, 10, device="cpu", augment="random-resized-crop", normalize=False, seed=1)
    assert feed.sample_shape == (3, 30, 40) and not feed.resident
    batch, _ = next(iter(feed))
    expected = reference_batch(dataset, images, "random-resized-crop", (30, 40), 1, 0, 0, feed.order().batches[0],
                               step=10, start=0)
    assert np.abs(raw(batch).astype(np.int64) - expected).max() <= 1


def test_variable_size_data_needs_image_size(tmp_path):
    path = tmp_path / "photos.gpuf"
    dataset, _ = photo_dataset(path, [(40, 50), (60, 30), (45, 45)])
    for name in ("random-resized-crop", "centre-crop", "crop+flip", None):
        pattern = "^" + re.escape(f"{path} holds images of varying sizes (up to 60x50): pass image_size=224")
        with pytest.raises(ConfigError, match=pattern):
            Feed(dataset, 2, device="cpu", augment=name)
    fixed_v2, _ = photo_dataset(tmp_path / "fixed.gpuf", [(30, 30)] * 4)
    with pytest.raises(ConfigError, match="is a version-2 pack: augment='crop\\+flip' needs a version-1 pack"):
        Feed(fixed_v2, 2, device="cpu")
    with pytest.raises(ConfigError, match="unknown augment 'mixup'.*'random-resized-crop'"):
        Feed(dataset, 2, device="cpu", augment="mixup", image_size=32)
    fixed = dataset_from_arrays(np.zeros((8, 4, 4, 3), np.uint8), np.arange(8))
    with pytest.raises(ConfigError, match="image_size is for augment='random-resized-crop' or 'centre-crop'"):
        Feed(fixed, 4, device="cpu", augment="crop+flip", image_size=32)


def test_upscaling_is_allowed_with_a_note(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", [(40, 60), (50, 30), (45, 45)])
    feed = Feed(dataset, 3, device="cpu", augment="centre-crop", image_size=64)
    assert feed.notes == ("image_size 64x64 is larger than the largest packed side (60 pixels): crops are "
                          "upscaled",)
    batch, _ = next(iter(feed))
    assert batch.shape == (3, 3, 64, 64)


def test_a_sample_that_does_not_decode_stops_with_one_line(tmp_path):
    path = tmp_path / "photos.gpuf"
    write_photos(path, varied_sizes(24, seed=5, low=60, high=100), "jpeg", damaged=(13,))
    feed = Feed(path, 4, device="cpu", augment="random-resized-crop", image_size=16, workers=2, shuffle=False)
    pattern = "^" + re.escape(f"{path}: sample 13 (photo_13.png) does not decode as JPEG (")
    with pytest.raises(FormatError, match=pattern) as caught:
        list(feed)
    assert "\n" not in str(caught.value) and caught.value.exit_status == 2
    assert not [t for t in threading.enumerate() if t.name.startswith("gpufeed-staging") and t.is_alive()]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("encoding", ["raw", "jpeg"])
def test_cuda_batches_match_the_cpu_path(tmp_path, encoding):
    dataset, _ = photo_dataset(tmp_path / "photos.gpuf", varied_sizes(40, seed=6, low=60, high=300), encoding)
    options = dict(seed=1, augment="random-resized-crop", image_size=(32, 40), workers=2)
    cpu = list(Feed(dataset, 8, device="cpu", **options))
    gpu = list(Feed(dataset, 8, device="cuda", **options))
    assert len(cpu) == len(gpu)
    for (a, la), (b, lb) in zip(cpu, gpu, strict=True):
        assert b.is_cuda and b.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
        assert torch.equal(la, lb.cpu())
