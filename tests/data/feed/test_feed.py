"""Feed on the CPU: bit-exact batches, epochs, ranks, resume, augmentation, errors from staging threads."""

import threading

import numpy as np
import pytest
import torch

from gpufeed.data.feed import augment
from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.order import epoch_order
from gpufeed.data.pack.writer import PackWriter
from gpufeed.errors import ConfigError, DeviceUnavailable, FormatError, StagingError


def indexed_images(count, height=6, width=5, channels=3):
    """Every sample is a function of its index: pixel = (index * 7 + position) mod 256."""
    positions = np.arange(height * width * channels).reshape(height, width, channels)
    return ((np.arange(count)[:, None, None, None] * 7 + positions) % 256).astype(np.uint8)


@pytest.fixture
def packed(tmp_path):
    images = indexed_images(403)
    labels = np.arange(403) % 10
    path = tmp_path / "d.gpuf"
    with PackWriter(path, images.shape[1:], [str(i) for i in range(10)], len(images)) as writer:
        writer.append(images, labels)
    return path, images, labels


def raw(feed_batch):
    """Undo normalize=False's division by 255 to get the uint8 pixels back, NHWC."""
    return (feed_batch * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("workers", [1, 3])
def test_batches_are_the_order_bit_exact(packed, workers):
    path, images, labels = packed
    feed = Feed(path, 32, device="cpu", seed=4, augment=None, normalize=False, workers=workers, prefetch=2)
    order = epoch_order(403, 32, seed=4, epoch=0)
    batches = list(feed)
    assert len(batches) == len(feed) == 12
    for (batch_images, batch_labels), indices in zip(batches, order.batches, strict=True):
        assert batch_images.dtype == torch.float32 and batch_images.shape == (32, 3, 6, 5)
        assert np.array_equal(raw(batch_images), images[indices])
        assert np.array_equal(batch_labels.numpy(), labels[indices])
    assert feed.epoch == 1 and feed.position == 0


def test_epochs_differ_and_set_epoch_repeats(packed):
    path, _, _ = packed
    feed = Feed(path, 50, device="cpu", augment=None)
    first = torch.cat([labels for _, labels in feed])
    second = torch.cat([labels for _, labels in feed])
    feed.set_epoch(0)
    again = torch.cat([labels for _, labels in feed])
    assert not torch.equal(first, second) and torch.equal(first, again)


def test_normalised_output_matches_float64_reference(packed):
    path, images, _ = packed
    feed = Feed(path, 403, device="cpu", augment=None, shuffle=False, drop_last=False)
    batch, _ = next(iter(feed))
    flat = images.reshape(-1, 3).astype(np.float64)
    expected = (images - flat.mean(axis=0)) / flat.std(axis=0)
    np.testing.assert_allclose(batch.numpy(), expected.transpose(0, 3, 1, 2), atol=1e-4)


def test_augmented_batches_equal_per_sample_reference(packed):
    path, images, _ = packed
    feed = Feed(path, 16, device="cpu", seed=2, augment="crop+flip", normalize=False, rank=1, world_size=2)
    feed.set_epoch(3)
    order = feed.order()
    plan = augment.parse_augment("crop+flip")
    for index, (batch, _) in enumerate(feed):
        step = augment.draw(plan, 32, seed=2, epoch=3, batch_index=index)
        rows, columns, flips = (values[16:].numpy() for values in (step.row_offsets, step.column_offsets, step.flips))
        for i, sample in enumerate(order.batches[index]):  # rank 1's half of the step
            padded = np.pad(images[sample], ((4, 4), (4, 4), (0, 0)))
            crop = padded[4 + rows[i]:4 + rows[i] + 6, 4 + columns[i]:4 + columns[i] + 5]
            expected = crop[:, ::-1] if flips[i] else crop
            assert np.array_equal(raw(batch[i:i + 1])[0], expected)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_cover_the_epoch_once_with_equal_batch_counts(packed, world_size):
    path, _, labels = packed
    feeds = [Feed(path, 8, device="cpu", augment=None, rank=r, world_size=world_size, drop_last=False)
             for r in range(world_size)]
    counts = {len(list(feed)) for feed in feeds}
    assert counts == {len(feeds[0])}
    order = [np.concatenate(feed.order(0).batches) for feed in feeds]
    seen = np.concatenate(order)
    assert sorted(set(seen.tolist())) == list(range(403))
    assert len(seen) == 403 + feeds[0].order(0).repeated


def test_resume_mid_epoch_yields_exactly_the_remaining_batches(packed):
    path, _, _ = packed
    options = dict(device="cpu", seed=9, augment="crop+flip", workers=2)
    whole = Feed(path, 20, **options)
    whole.set_epoch(1)
    expected = list(whole)
    partial = Feed(path, 20, **options)
    partial.set_epoch(1)
    iterator = iter(partial)
    for _ in range(7):
        next(iterator)
    state = partial.state_dict()
    iterator.close()
    assert state["position"] == 7 and state["epoch"] == 1
    resumed = Feed(path, 20, **options)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(expected) - 7
    for (a, la), (b, lb) in zip(rest, expected[7:], strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_resume_with_other_settings_is_refused(packed):
    path, _, _ = packed
    state = Feed(path, 20, device="cpu").state_dict()
    with pytest.raises(ConfigError, match="batch_size=20"):
        Feed(path, 21, device="cpu").load_state_dict(state)


def test_from_arrays_grey_images():
    images = indexed_images(50, 4, 4, 1)[..., 0]
    feed = Feed.from_arrays(images, np.arange(50) % 2, 10, device="cpu", augment=None, normalize=False,
                            shuffle=False)
    batch, labels = next(iter(feed))
    assert batch.shape == (10, 1, 4, 4) and feed.num_classes == 2
    assert np.array_equal(raw(batch)[..., 0], images[:10])


def test_staging_error_names_the_batch_and_does_not_hang(packed, monkeypatch):
    path, _, _ = packed
    feed = Feed(path, 32, device="cpu", workers=2)
    original = feed.finish

    def failing(images, draws, *out):
        if threading.current_thread().name.endswith("-1"):
            raise OSError("disk went away")
        return original(images, draws, *out)

    monkeypatch.setattr(feed, "finish", failing)
    with pytest.raises(StagingError, match=r"preparing batch 1 failed: OSError: disk went away"):
        list(feed)
    assert not [t for t in threading.enumerate() if t.name.startswith("gpufeed-staging")]


def test_abandoned_iteration_stops_its_threads(packed):
    path, _, _ = packed
    feed = Feed(path, 8, device="cpu", workers=2)
    iterator = iter(feed)
    next(iterator)
    iterator.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gpufeed-staging") and t.is_alive()]


@pytest.mark.parametrize("options, error, words", [
    (dict(batch_size=500), ConfigError, "lower --batch-size"),
    (dict(batch_size=8, augment="mixup"), ConfigError, "unknown augment"),
    (dict(batch_size=8, device="tpu"), DeviceUnavailable, "unknown device"),
    (dict(batch_size=8, device="cuda"), DeviceUnavailable, 'pass device="cpu"'),
    (dict(batch_size=8, dtype=torch.int32), ConfigError, "floating"),
])
def test_bad_arguments(packed, options, error, words):
    path, _, _ = packed
    if options.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(error, match=words):
        Feed(path, **options)


def test_foreign_file(tmp_path):
    path = tmp_path / "x.gpuf"
    path.write_text("hello")
    with pytest.raises(FormatError, match="not a gpufeed packed dataset"):
        Feed(path, 8, device="cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("resident", [True, False])
def test_cuda_batches_match_the_cpu_path(packed, resident):
    path, _, _ = packed
    options = dict(seed=1, augment="crop+flip", normalize=True)
    cpu = list(Feed(path, 32, device="cpu", **options))
    gpu = list(Feed(path, 32, device="cuda", resident=resident, **options))
    assert len(cpu) == len(gpu)
    for (a, la), (b, lb) in zip(cpu, gpu, strict=True):
        assert b.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(b.float().cpu(), a, atol=1e-5, rtol=1e-5)
        assert torch.equal(la, lb.cpu())


@pytest.mark.parametrize("workers", [1, 2])
def test_transfer_path_on_the_cpu_matches_the_host_path(packed, workers):
    """The GPU path's staging ring, slot release and transfer loop, run with plain copies on the CPU."""
    path, _, _ = packed
    feed = Feed(path, 24, device="cpu", seed=6, workers=workers, prefetch=2)
    order = feed.order()
    host = [(images, labels) for _, images, labels in feed.host_batches(order, 0)]
    transfer = [(images, labels) for _, images, labels in feed.transfer_batches(order, 0)]
    assert len(host) == len(transfer) == len(feed)
    for (a, la), (b, lb) in zip(host, transfer, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_staging_leaves_the_thread_settings_as_it_found_them(packed):
    path, _, _ = packed
    before = torch.get_num_threads()
    list(Feed(path, 32, device="cpu", workers=2))
    seen = []
    late = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    late.start()
    late.join()
    assert torch.get_num_threads() == before and seen == [before]
