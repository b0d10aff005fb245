"""Packing a map-style Dataset (gpufeed.pack(dataset, ...), data/pack/dataset.py): each kind of item read back with
open_packed and compared with Pillow, numpy and torch references; bad items, a raising __getitem__ and an unpicklable
Dataset named in one line with nothing written; worker processes writing what this process writes."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
import torch
from PIL import Image

import gpufeed
from gpufeed.data.format.reader import open_packed
from gpufeed.data.pack import dataset as dataset_module
from gpufeed.data.pack.dataset import pack_dataset
from gpufeed.errors import ConfigError


class Items(torch.utils.data.Dataset):
    """A Dataset over a list of items; module-level so that it pickles. `classes` only when given."""

    def __init__(self, items, classes=None):
        self.items = items
        if classes is not None:
            self.classes = classes

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class Synthetic(torch.utils.data.Dataset):
    """Item i a function of i: a uint8 C x H x W tensor and the label i % 7; `bad` returns (or raises) at one index."""

    def __init__(self, count, bad_index=None, bad=None):
        self.count, self.bad_index, self.bad = count, bad_index, bad

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        if index == self.bad_index:
            if isinstance(self.bad, Exception):
                raise self.bad
            return self.bad
        pixels = np.random.default_rng(index).integers(0, 256, (3, 6, 5), dtype=np.uint8)
        return torch.from_numpy(pixels), index % 7


def photo(height, width, seed=0, channels=3):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1),
                     128 + 100 * np.sin((x + y) / 9)], axis=-1)[..., :channels]
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def encoded(pixels, kind, **options):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, kind, **options)
    return buffer.getvalue()


def arrays(packed):
    return [packed.sample_array(index) for index in range(len(packed))]


def decoded(packed, index):
    return np.asarray(Image.open(io.BytesIO(packed.sample_bytes(index).tobytes())))


def same_but_the_time(first, second):
    """Two packed files hold the same bytes, but for the header's `created`."""
    raw = [path.read_bytes() for path in (first, second)]
    headers = [json.loads(data[16:16 + struct.unpack("<Q", data[8:16])[0]]) for data in raw]
    start = headers[0].get("images_offset", headers[0].get("table_offset"))
    return {**headers[0], "created": None} == {**headers[1], "created": None} and raw[0][start:] == raw[1][start:]


def test_pil_images_and_uint8_arrays_are_stored_exactly(tmp_path):
    hwc = [photo(12, 10, seed) for seed in range(3)]
    items = [(Image.fromarray(hwc[0]), 0), (hwc[1], np.int64(2)), (torch.from_numpy(hwc[2]), torch.tensor(1))]
    result = gpufeed.pack(Items(items, classes=["cat", "dog", "eel"]), tmp_path / "a.gpuf", workers=0)
    packed = open_packed(tmp_path / "a.gpuf", verify=True)
    assert result.version == 1 and result.shape == (12, 10, 3) and result.converted == 0
    assert packed.classes == ("cat", "dog", "eel") and packed.labels.tolist() == [0, 2, 1]
    assert all(np.array_equal(got, want) for got, want in zip(arrays(packed), hwc, strict=True))
    assert packed.header.source == "dataset:Items"


def test_chw_tensors_grey_and_rgba_follow_their_layouts(tmp_path):
    chw = torch.from_numpy(photo(9, 11, 1)).permute(2, 0, 1).contiguous()  # as torchvision.io.read_image gives
    grey, rgba = photo(9, 11, 2)[..., 0], np.dstack([photo(9, 11, 3), np.full((9, 11), 7, np.uint8)])
    grey_chw = torch.from_numpy(grey)[None]  # 1 x H x W
    items = [(chw, 0), (grey, 1), (rgba, 0), (grey_chw, 1)]
    result = pack_dataset(Items(items), tmp_path / "b.gpuf", workers=0)
    packed = open_packed(tmp_path / "b.gpuf")
    expected = [chw.numpy().transpose(1, 2, 0), np.repeat(grey[..., None], 3, axis=2), rgba[..., :3],
                np.repeat(grey[..., None], 3, axis=2)]
    assert all(np.array_equal(got, want) for got, want in zip(arrays(packed), expected, strict=True))
    assert result.converted == 3 and packed.classes == ("0", "1")  # grey and RGBA changed mode
    pack_dataset(Items(items[1:2] + items[3:]), tmp_path / "grey.gpuf", channels=1, workers=0)
    assert np.array_equal(np.asarray(open_packed(tmp_path / "grey.gpuf").images), np.stack([grey[..., None]] * 2))


def test_float_tensors_in_0_1_become_round_x_255(tmp_path):
    generator = torch.Generator().manual_seed(0)
    floats = [torch.rand(3, 7, 8, generator=generator), torch.rand(3, 7, 8, generator=generator).double(),
              torch.rand(3, 7, 8, generator=generator).to(torch.bfloat16), np.random.default_rng(0).random((7, 8, 3))]
    floats[0][0, 0, :3] = torch.tensor([0.0, 1.0, 0.5])  # the ends, and 127.5
    pack_dataset(Items([(value, 0) for value in floats]), tmp_path / "f.gpuf", workers=0)
    packed = open_packed(tmp_path / "f.gpuf")
    for got, value in zip(arrays(packed), floats, strict=True):
        chw = torch.from_numpy(value.transpose(2, 0, 1)) if isinstance(value, np.ndarray) else value  # numpy: HWC
        reference = (chw.double() * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()  # torch's own rounding
        assert np.array_equal(got, reference)
    assert packed.sample_array(0)[0, :3, 0].tolist() == [0, 255, 128]  # 127.5: halves to even


def test_float_images_outside_0_1_are_an_error_naming_the_item(tmp_path):
    normalised = (torch.rand(3, 4, 4) - 0.5) / 0.25
    for bad in (normalised, torch.full((3, 4, 4), float("nan"))):
        with pytest.raises(ConfigError) as caught:
            pack_dataset(Items([(torch.rand(3, 4, 4), 0), (bad, 1)]), tmp_path / "x.gpuf", workers=0)
        assert str(caught.value).startswith("dataset[1]'s float image holds values") and "[0, 1]" in str(caught.value)
        assert "\n" not in str(caught.value) and list(tmp_path.iterdir()) == []


def test_jpeg_bytes_pass_through_and_png_bytes_decode(tmp_path):
    small, large, flat = photo(40, 30, 4), photo(100, 60, 5), photo(20, 24, 6)
    jpeg_small, jpeg_large, png = encoded(small, "JPEG", quality=92), encoded(large, "JPEG"), encoded(flat, "PNG")
    as_tensor = torch.frombuffer(bytearray(jpeg_small), dtype=torch.uint8)  # as torchvision.io.read_file gives
    items = [(jpeg_small, 0), (bytearray(jpeg_large), 1), (memoryview(png), 0), (as_tensor, 1)]
    result = pack_dataset(Items(items), tmp_path / "j.gpuf", max_side=64, workers=0)
    packed = open_packed(tmp_path / "j.gpuf", verify=True)
    assert result.version == 2 and packed.encoding == "jpeg" and result.passthrough == 2
    assert packed.sample_bytes(0).tobytes() == jpeg_small and packed.sample_bytes(3).tobytes() == jpeg_small
    assert [packed.sample_name(index) for index in range(4)] == ["item 0", "item 1", "item 2", "item 3"]
    assert (int(packed.heights[1]), int(packed.widths[1])) == (64, 38)  # s = 64/100: 60 * s = 38.4
    raw = pack_dataset(Items(items), tmp_path / "r.gpuf", max_side=64, encoding="raw", workers=0)
    reference = open_packed(tmp_path / "r.gpuf")
    assert raw.passthrough == 0 and np.array_equal(reference.sample_array(2), flat)  # PNG: lossless
    with Image.open(io.BytesIO(jpeg_small)) as image:
        assert np.array_equal(reference.sample_array(0), np.asarray(image.convert("RGB")))
    for index in (1, 2):  # re-encoded: Pillow's q90 of the raw pack's pixels, the same picture
        assert packed.sample_bytes(index).tobytes() == encoded(reference.sample_array(index), "JPEG", quality=90)
        assert np.abs(decoded(packed, index).astype(int) - reference.sample_array(index)).mean() < 10.0


def test_encoded_bytes_and_pictures_in_a_version_1_pack(tmp_path):
    picture = photo(16, 16, 7)
    items = [(encoded(picture, "PNG"), 0), (Image.fromarray(photo(32, 24, 8)), 1)]
    result = pack_dataset(Items(items), tmp_path / "s.gpuf", size=(16, 16), workers=0)
    packed = open_packed(tmp_path / "s.gpuf")
    assert result.version == 1 and result.resized == 1 and np.array_equal(packed.sample_array(0), picture)
    scaled = Image.fromarray(photo(32, 24, 8)).resize((16, 21), Image.Resampling.BILINEAR).crop((0, 2, 16, 18))
    assert np.array_equal(packed.sample_array(1), np.asarray(scaled))  # cover 16 x 16 (scale 2/3), centre crop


def test_images_of_different_sizes_without_size_name_both_items(tmp_path):
    items = [(photo(8, 8, 0), 0), (photo(8, 8, 1), 0), (photo(6, 8, 2), 1)]
    with pytest.raises(ConfigError) as caught:
        pack_dataset(Items(items), tmp_path / "x.gpuf", workers=0)
    assert "dataset[0] is 8x8 (height x width) but dataset[2] is 6x8" in str(caught.value)
    assert "size=(H, W)" in str(caught.value) and list(tmp_path.iterdir()) == []


def test_classes_from_the_dataset_the_argument_or_the_labels(tmp_path):
    items = [(photo(4, 4, 0), 4), (photo(4, 4, 1), 0)]
    assert pack_dataset(Items(items), tmp_path / "a.gpuf", workers=0).classes == ("0", "1", "2", "3", "4")
    assert open_packed(tmp_path / "a.gpuf").classes == ("0", "1", "2", "3", "4")
    named = Items(items, classes=[f"c{k}" for k in range(6)])
    assert pack_dataset(named, tmp_path / "b.gpuf", workers=0).classes == ("c0", "c1", "c2", "c3", "c4", "c5")
    subset = torch.utils.data.Subset(named, [1])
    assert open_packed(pack_dataset(subset, tmp_path / "c.gpuf", workers=0).destination).classes[5] == "c5"
    given = pack_dataset(named, tmp_path / "d.gpuf", classes=list("abcde"), max_side=8, workers=0)
    assert given.classes == tuple("abcde") and open_packed(tmp_path / "d.gpuf").classes == tuple("abcde")
    with pytest.raises(ConfigError, match=r"dataset\[0\]'s label is 4, but there are 3 classes"):
        pack_dataset(named, tmp_path / "e.gpuf", classes=["a", "b", "c"], workers=0)
    with pytest.raises(ConfigError, match=r"dataset\[1\]'s label is 5000.*under 1000; give classes="):
        pack_dataset(Items([(photo(4, 4, 0), 0), (photo(4, 4, 1), 5000)]), tmp_path / "f.gpuf", workers=0)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.gpuf", "b.gpuf", "c.gpuf", "d.gpuf"]


@pytest.mark.parametrize("item, words", [
    ("a string", "dataset[1] is a str ('a string'), not an (image, label) pair"),
    ((np.zeros((5, 7, 9), np.uint8), 0), "dataset[1]'s image has shape (5, 7, 9), which is not"),
    ((np.zeros((4, 4, 3), np.uint8), 0, 1), "dataset[1] is a tuple of 3 items, not an (image, label) pair"),
    ((np.zeros((4, 4, 3), np.uint8), 1.0), "dataset[1]'s label is a float (1.0); labels must be integers"),
    ((np.zeros((4, 4, 3), np.int32), 1), "dataset[1]'s image is an array of int32; images must be uint8"),
    ((b"GIF89a\x01\x00", 1), "dataset[1]'s image is 8 bytes that are not a JPEG or PNG file"),
    ((b"\xff\xd8\xff\xe0 cut short", 1), "dataset[1]'s image cannot be decoded"),
    ((np.zeros((4, 4, 3), np.uint8), -1), "dataset[1]'s label is -1; labels must be 0 or more"),
], ids=["string", "shape", "triple", "float-label", "int32", "gif", "broken-jpeg", "negative"])
def test_a_bad_item_is_one_line_naming_its_index_and_nothing_is_written(tmp_path, item, words):
    dataset = Items([(np.zeros((4, 4, 3), np.uint8), 0), item, (np.zeros((4, 4, 3), np.uint8), 0)])
    for options in ({}, {"max_side": 8}):
        with pytest.raises(ConfigError) as caught:
            pack_dataset(dataset, tmp_path / "x.gpuf", workers=0, **options)
        assert str(caught.value).startswith(words) and "\n" not in str(caught.value)
        assert list(tmp_path.iterdir()) == []


def test_a_raising_getitem_is_named_with_its_exception_and_kept_as_the_cause(tmp_path):
    with pytest.raises(ConfigError) as caught:
        gpufeed.pack(Synthetic(40, 17, KeyError("x")), tmp_path / "x.gpuf", workers=0)
    assert str(caught.value) == "dataset[17] raised KeyError: 'x'" and isinstance(caught.value.__cause__, KeyError)
    assert list(tmp_path.iterdir()) == []


def test_workers_write_what_this_process_writes(tmp_path):
    dataset = Synthetic(300)  # 5 chunks of 64 after item 0: both workers read
    progress = []
    one = pack_dataset(dataset, tmp_path / "zero.gpuf", workers=0, progress=lambda done, total: progress.append(done))
    two = pack_dataset(dataset, tmp_path / "two.gpuf", workers=2)
    assert progress[0] == 1 and progress[-1] == 300 and progress == sorted(progress)
    here, there = open_packed(tmp_path / "zero.gpuf"), open_packed(tmp_path / "two.gpuf")
    assert one.count == two.count == 300 and here.classes == there.classes == tuple(map(str, range(7)))
    assert np.array_equal(np.asarray(here.images), np.asarray(there.images))
    assert here.labels.tolist() == there.labels.tolist() == [index % 7 for index in range(300)]
    assert np.array_equal(np.asarray(here.images[123]), dataset[123][0].numpy().transpose(1, 2, 0))
    assert same_but_the_time(tmp_path / "zero.gpuf", tmp_path / "two.gpuf")
    jpeg = [pack_dataset(dataset, tmp_path / f"{workers}.gpuf", encoding="jpeg", workers=workers)
            for workers in (0, 2)]
    assert jpeg[0].version == jpeg[1].version == 2 and jpeg[0].encoding == "jpeg"
    assert same_but_the_time(tmp_path / "0.gpuf", tmp_path / "2.gpuf")


def test_a_bad_item_read_by_a_worker_is_named_and_nothing_is_written(tmp_path):
    for bad in (KeyError("x"), "a string"):
        with pytest.raises(ConfigError) as caught:
            pack_dataset(Synthetic(300, 217, bad), tmp_path / "x.gpuf", workers=2, max_side=8)
        assert str(caught.value).startswith("dataset[217] ") and "\n" not in str(caught.value)
        assert list(tmp_path.iterdir()) == []


def test_a_dataset_that_cannot_be_pickled_names_workers_0(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset_module, "START_METHOD", "spawn")  # as on macOS, Windows, Python 3.14's Linux
    unpicklable = Items([(photo(4, 4, index), 0) for index in range(200)])
    unpicklable.transform = lambda x: x  # a lambda does not pickle
    with pytest.raises(ConfigError) as caught:
        pack_dataset(unpicklable, tmp_path / "x.gpuf", workers=2)
    assert "cannot be sent to worker processes" in str(caught.value) and "workers=0" in str(caught.value)
    assert "\n" not in str(caught.value) and list(tmp_path.iterdir()) == []
    assert pack_dataset(unpicklable, tmp_path / "x.gpuf", workers=0).count == 200


def test_pack_takes_any_map_style_dataset_and_refuses_other_objects(tmp_path):
    pairs = [(photo(4, 4, index), index % 2) for index in range(3)]  # a list of pairs is map-style too
    assert gpufeed.pack(pairs, tmp_path / "l.gpuf", encoding="raw").source == "dataset:list"
    with pytest.raises(ConfigError, match="strict does not apply when packing dataset"):
        gpufeed.pack(pairs, tmp_path / "x.gpuf", strict=True)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(pairs)

    with pytest.raises(ConfigError, match="IterableDataset .*has no items by index"):
        gpufeed.pack(Stream(), tmp_path / "x.gpuf")
    with pytest.raises(ConfigError, match="the source is an int .*map-style Dataset"):
        gpufeed.pack(42, tmp_path / "x.gpuf")
    with pytest.raises(ConfigError, match="holds no items"):
        gpufeed.pack([], tmp_path / "x.gpuf")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["l.gpuf"]
