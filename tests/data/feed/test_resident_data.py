"""`ResidentData` (the whole dataset held on the device, batches gathered there) run on CPU tensors: `Feed` keeps a
dataset resident only on a CUDA GPU (`_decide_resident`), but loading, gathering and `Feed.resident_batches` are
device-agnostic. Checked against the pack's samples as written (each a function of its index) and a float64 numpy
reference of the augmentation, for every batch of an epoch in the sampler's order. Each test also runs on a CUDA GPU
when there is one (its id then says "cuda", which benchmarks/device_check.sh selects)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from feed_reference import expected_batch, float64_statistics, write_pack  # tests/data/feed/feed_reference.py

from gpufeed.data.feed import augment
from gpufeed.data.feed.draws import Draws
from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.order import epoch_order
from gpufeed.data.feed.transfer import ResidentData
from gpufeed.data.format.reader import open_packed

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]  # the CUDA variants only where they can run
COUNT = 203  # 12 x 16 + 11: an epoch of batches of 16 ends with a short one


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    path = tmp_path_factory.mktemp("resident") / "indexed.gpuf"
    images, labels = write_pack(path, COUNT)
    return path, images, labels


class RecordingDataset:
    """A packed dataset whose image reads are recorded: `ResidentData.load` must read it in chunks."""

    def __init__(self, dataset):
        self.dataset, self.reads = dataset, []
        self.shape, self.bytes_per_sample, self.labels = dataset.shape, dataset.bytes_per_sample, dataset.labels

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def images(self):
        return self

    def __getitem__(self, rows: slice):
        self.reads.append((rows.start, min(rows.stop, len(self.dataset))))
        return self.dataset.images[rows]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk_samples", [1, 7, 10 * COUNT])
def test_load_copies_every_sample_and_label_of_the_memory_mapped_pack_in_chunks(pack, device, chunk_samples):
    path, images, labels = pack
    dataset = open_packed(path, ram_budget_bytes=0)  # served from the memory map, as a large pack is
    assert not dataset.in_ram
    recording = RecordingDataset(dataset)
    chunk_bytes = chunk_samples * images[0].nbytes + images[0].nbytes // 2  # not a whole number of samples
    resident = ResidentData.load(recording, torch.device(device), chunk_bytes=chunk_bytes)
    assert resident.device.type == device and resident.labels.device.type == device
    assert resident.images.dtype == torch.uint8 and resident.labels.dtype == torch.int64
    assert np.array_equal(resident.images.cpu().numpy(), images)
    assert np.array_equal(resident.labels.cpu().numpy(), labels)
    rows = min(chunk_samples, COUNT)  # what a chunk holds, at most
    starts = list(range(0, COUNT, rows))
    assert recording.reads == [(start, min(start + rows, COUNT)) for start in starts]
    if device == "cpu":
        assert not np.shares_memory(resident.images.numpy(), np.asarray(dataset.images))  # a copy, not the map


@pytest.mark.parametrize("device", DEVICES)
def test_gather_returns_each_batch_of_the_epoch_with_its_labels_and_a_copy_of_its_draws(pack, device):
    path, images, labels = pack
    resident = ResidentData.load(open_packed(path), torch.device(device))
    order = epoch_order(COUNT, 16, seed=8, epoch=1, drop_last=False)
    assert sorted(np.concatenate(order.batches).tolist()) == list(range(COUNT))  # each sample once
    for index, indices in enumerate(order.batches):
        values = np.stack([np.arange(len(indices)), -np.arange(len(indices)), np.arange(len(indices)) % 2]) + index
        draws = Draws(torch.from_numpy(values))
        batch_images, batch_labels, batch_draws = resident.gather(indices, draws)
        assert batch_images.device.type == batch_labels.device.type == batch_draws.values.device.type == device
        assert np.array_equal(batch_images.cpu().numpy(), images[indices])
        assert np.array_equal(batch_labels.cpu().numpy(), labels[indices])
        assert np.array_equal(batch_draws.values.cpu().numpy(), values)
        assert batch_draws.values.data_ptr() != draws.values.data_ptr()  # a copy: the source may be a reused slot
    assert resident.gather(order.batches[0], None)[2] is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [dict(augment="crop+flip", normalize=True),
                                     dict(augment="flip", normalize=False, channels_last=False)])
def test_resident_batches_of_an_epoch_equal_the_float64_reference(pack, device, options, monkeypatch):
    """Feed's resident path on the CPU: each batch of epoch 3 gathered from the resident copy, augmented and
    converted as numpy does it in float64, in the sampler's order, with its labels; a resumed feed yields the rest."""
    path, images, labels = pack
    loads = []
    load = ResidentData.load
    monkeypatch.setattr(ResidentData, "load", lambda *args: loads.append(args) or load(*args))
    feed = Feed(path, 16, device=device, seed=3, drop_last=False, **options)
    assert feed.resident == (device == "cuda")  # _decide_resident: only on a CUDA GPU; the path runs on the CPU too
    feed.set_epoch(3)
    order = epoch_order(COUNT, 16, seed=3, epoch=3, drop_last=False)
    plan = augment.parse_augment(options["augment"])
    mean, std = float64_statistics(images) if options["normalize"] else (None, None)
    batches = list(feed.resident_batches(feed.order(), 3))
    assert [index for index, _, _ in batches] == list(range(len(order)))
    for (index, batch, batch_labels), indices in zip(batches, order.batches, strict=True):
        layout = torch.channels_last if options.get("channels_last", True) else torch.contiguous_format
        assert batch.dtype == torch.float32 and batch.is_contiguous(memory_format=layout)
        draws = augment.draw(plan, 16, seed=3, epoch=3, batch_index=index, size=len(indices))
        np.testing.assert_allclose(batch.cpu().numpy(), expected_batch(images, indices, plan, draws, mean, std),
                                   rtol=0, atol=1e-4)
        assert np.array_equal(batch_labels.cpu().numpy(), labels[indices])
    assert len(loads) == 1
    feed.load_state_dict(feed.state_dict() | {"epoch": 3, "position": 10})
    resumed = list(feed.resident_batches(feed.order(), 3))
    assert len(loads) == 1  # loaded once per feed, not per epoch
    assert [index for index, _, _ in resumed] == [10, 11, 12]
    for (_, batch, batch_labels), (_, whole, whole_labels) in zip(resumed, batches[10:], strict=True):
        assert torch.equal(batch, whole) and torch.equal(batch_labels, whole_labels)
