"""`DeviceTransfer`'s ring run on CPU tensors (its non-CUDA branch: plain copies, the same ring): batches come out
in the order staged, each one's bytes as staged; the device buffers are reused (the same storage, cycling), a batch's
view is not overwritten while the consumer may still be working on it, and a staging slot goes back to the pool only
after its copy. Then `Feed.transfer_batches` on the CPU against a float64 numpy reference for a whole epoch.

Each test also runs on a CUDA GPU when there is one (its id then says "cuda", which benchmarks/device_check.sh selects):
there the side stream, the events and the pinned slots are what keep the same promises."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from feed_reference import expected_batch, float64_statistics, write_pack  # tests/data/feed/feed_reference.py

from gpufeed.data.feed import augment
from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.order import epoch_order
from gpufeed.data.feed.transfer import DeviceTransfer, HostSlot

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]  # the CUDA variants only where they can run
BATCH, SHAPE = 4, (3, 2, 3)  # (H, W, C)
SIZES = (4, 4, 4, 4, 4, 4, 4, 2)  # eight batches, the last one short: the ring turns over at least twice


def staged_slots(transfer: DeviceTransfer, sizes=SIZES):
    """[(index, (slot, size))] as `Staging` yields them, in the transfer's host slots (pinned for CUDA): batch k's
    pixels are all 10 + k (its rows 16 apart), its labels 100 * k + row, its draws (k, -k, row % 2); rows past
    `size` hold 255 (never delivered)."""
    staged = []
    for index, size in enumerate(sizes):
        slot = transfer.make_host_slot()
        slot.images.fill_(255)
        slot.labels.fill_(-1)
        slot.draws.values.fill_(99)
        rows = torch.arange(size)
        slot.images[:size] = (10 + index + rows * 16).to(torch.uint8).view(size, 1, 1, 1)
        slot.labels[:size] = 100 * index + rows
        slot.draws.values[:, :size] = torch.stack([torch.full((size,), index), torch.full((size,), -index), rows % 2])
        staged.append((index, (slot, size)))
    return staged


def expected(index: int, size: int):
    """Batch `index`'s images, labels and draws as `staged_slots` wrote them, built again from the formula."""
    rows = np.arange(size)
    images = np.broadcast_to((10 + index + rows * 16).astype(np.uint8)[:, None, None, None], (size, *SHAPE))
    draws = np.stack([np.full(size, index), np.full(size, -index), rows % 2])
    return images, 100 * index + rows, draws


class ScribblingPool:
    """The staging ring's side of `stream`: records each released slot and at once overwrites it, as a staging
    thread refilling it would, so a batch read from a slot after its release would come out wrong."""

    def __init__(self):
        self.released: list = []

    def release(self, slot: HostSlot) -> None:
        self.released.append(slot)
        slot.images.fill_(0)
        slot.labels.fill_(-7)
        slot.draws.values.fill_(-7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lookahead", [1, 2, 3])
def test_batches_come_out_in_the_order_staged_with_the_bytes_staged(device, lookahead):
    transfer = DeviceTransfer(torch.device(device), BATCH, SHAPE, lookahead=lookahead)
    staged, pool = staged_slots(transfer), ScribblingPool()
    seen = []
    for index, images, labels, draws in transfer.stream(staged, pool):
        size = SIZES[index]
        want_images, want_labels, want_draws = expected(index, size)
        assert images.shape == (size, *SHAPE) and images.dtype == torch.uint8 and images.device.type == device
        assert np.array_equal(images.cpu().numpy(), want_images)
        assert np.array_equal(labels.cpu().numpy(), want_labels) and labels.dtype == torch.int64
        assert len(draws) == size and np.array_equal(draws.values.cpu().numpy(), want_draws)
        seen.append(index)
    assert seen == list(range(len(SIZES)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lookahead", [1, 2, 3])
def test_the_device_buffers_are_reused_in_a_cycle_not_reallocated(device, lookahead):
    transfer = DeviceTransfer(torch.device(device), BATCH, SHAPE, lookahead=lookahead)
    buffers = [(b.images.data_ptr(), b.labels.data_ptr(), b.draws.values.data_ptr()) for b in transfer.buffers]
    assert len(buffers) == lookahead + 1 and len({pointers[0] for pointers in buffers}) == lookahead + 1
    image_pointers, draw_pointers = [], []
    for _, images, labels, draws in transfer.stream(staged_slots(transfer), ScribblingPool()):
        image_pointers.append(images.data_ptr())
        draw_pointers.append(draws.values.data_ptr())
        assert labels.data_ptr() not in {pointers[1] for pointers in buffers}  # labels are a copy: kept by the caller
    count = len(SIZES)
    assert image_pointers == [buffers[k % (lookahead + 1)][0] for k in range(count)]
    assert draw_pointers == [buffers[k % (lookahead + 1)][2] for k in range(count)]
    assert [(b.images.data_ptr(), b.labels.data_ptr(), b.draws.values.data_ptr()) for b in transfer.buffers] == buffers


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lookahead", [1, 2, 3])
def test_a_batch_is_not_overwritten_while_the_consumer_holds_it_or_the_next(device, lookahead):
    """The code's guarantee: batch k's images and draws (views of a reused buffer) stay as staged at least
    until the consumer asks for batch k + 2 (the copy into its buffer is issued then, whatever the lookahead). Feed
    turns each batch into a fresh tensor before it asks for the next. Labels are copies, valid for good."""
    transfer = DeviceTransfer(torch.device(device), BATCH, SHAPE, lookahead=lookahead)
    held = []
    for index, images, labels, draws in transfer.stream(staged_slots(transfer), ScribblingPool()):
        held.append((images, labels, draws))
        for earlier in (index - 1, index):
            if earlier >= 0:
                want_images, _, want_draws = expected(earlier, SIZES[earlier])
                assert np.array_equal(held[earlier][0].cpu().numpy(), want_images), (earlier, index)
                assert np.array_equal(held[earlier][2].values.cpu().numpy(), want_draws), (earlier, index)
    for index, (_, labels, _) in enumerate(held):
        assert np.array_equal(labels.cpu().numpy(), expected(index, SIZES[index])[1])


@pytest.mark.parametrize("device", DEVICES)
def test_a_slot_goes_back_to_the_pool_after_its_copy_and_once(device):
    """Slot k is released when the consumer asks for batch k + 1 (its copy done: on CUDA the copy is asynchronous
    and waited for first), each slot exactly once, in order; the pool overwrites a slot as soon as it is released, so
    the batches being right shows the copy was taken before the release."""
    transfer = DeviceTransfer(torch.device(device), BATCH, SHAPE, lookahead=2)
    staged, pool = staged_slots(transfer), ScribblingPool()
    slots = [slot for _, (slot, _) in staged]
    released_at_yield = []
    for index, images, _, _ in transfer.stream(staged, pool):
        released_at_yield.append(len(pool.released))
        assert np.array_equal(images.cpu().numpy(), expected(index, SIZES[index])[0])
    assert released_at_yield == list(range(len(SIZES)))
    assert [id(slot) for slot in pool.released] == [id(slot) for slot in slots]
    assert transfer.pin == transfer.make_host_slot().images.is_pinned() == (device == "cuda")  # pinned for CUDA only


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    path = tmp_path_factory.mktemp("transfer") / "indexed.gpuf"
    images, labels = write_pack(path, 203)
    return path, images, labels


@pytest.mark.parametrize("device, workers", [("cpu", 1), *((device, 2) for device in DEVICES)])
def test_transfer_batches_of_an_epoch_equal_the_float64_reference(pack, device, workers):
    """Every sample of epoch 2 (203 = 12 x 16 + 11: the last batch short), in the sampler's order, cropped, mirrored
    and normalised as numpy does it in float64, with its label; then a resumed feed yields exactly the rest."""
    path, images, labels = pack
    feed = Feed(path, 16, device=device, seed=5, augment="crop+flip", normalize=True, drop_last=False,
                workers=workers, prefetch=2, resident=False)
    feed.set_epoch(2)
    order = epoch_order(203, 16, seed=5, epoch=2, drop_last=False)
    plan = augment.parse_augment("crop+flip")
    mean, std = float64_statistics(images)
    batches = list(feed.transfer_batches(feed.order(), 2))
    assert [index for index, _, _ in batches] == list(range(13))
    assert sorted(np.concatenate(order.batches).tolist()) == list(range(203))  # each sample once
    for (index, batch, batch_labels), indices in zip(batches, order.batches, strict=True):
        assert batch.dtype == torch.float32 and batch.is_contiguous(memory_format=torch.channels_last)
        draws = augment.draw(plan, 16, seed=5, epoch=2, batch_index=index, size=len(indices))
        np.testing.assert_allclose(batch.cpu().numpy(), expected_batch(images, indices, plan, draws, mean, std),
                                   rtol=0, atol=1e-4)
        assert np.array_equal(batch_labels.cpu().numpy(), labels[indices])
    feed.load_state_dict(feed.state_dict() | {"epoch": 2, "position": 9})
    resumed = list(feed.transfer_batches(feed.order(), 2))
    assert [index for index, _, _ in resumed] == [9, 10, 11, 12]
    for (_, batch, batch_labels), (_, whole, whole_labels) in zip(resumed, batches[9:], strict=True):
        assert torch.equal(batch, whole) and torch.equal(batch_labels, whole_labels)
